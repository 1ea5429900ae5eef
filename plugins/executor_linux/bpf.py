"""Raw ``bpf(2)`` through ctypes: maps, programs, cgroup attachment, a tiny assembler.

Only what the loopback guard (``loopback_guard.py``) needs, STDLIB ONLY, with no libbpf and
no compiler: programs are assembled here from hand-written instructions. Every number below
is from the kernel UAPI (``include/uapi/linux/bpf.h``, ``union bpf_attr`` and the enums),
whose layout only ever grows at the end.

Errors are ``OSError`` with the syscall's errno; a program the verifier refuses raises
``VerifierError`` carrying the verifier's log.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, NamedTuple

__all__ = [
    "Asm",
    "BpfObject",
    "VerifierError",
    "attach",
    "available",
    "detach",
    "map_create",
    "map_delete",
    "map_keys",
    "map_lookup",
    "map_update",
    "prog_load",
]

# --- commands, types, attach points (enum bpf_cmd, bpf_map_type, bpf_prog_type, ...) -------

MAP_CREATE: Final = 0
MAP_LOOKUP_ELEM: Final = 1
MAP_UPDATE_ELEM: Final = 2
MAP_DELETE_ELEM: Final = 3
MAP_GET_NEXT_KEY: Final = 4
PROG_LOAD: Final = 5
PROG_ATTACH: Final = 8
PROG_DETACH: Final = 9
BTF_LOAD: Final = 18

MAP_TYPE_HASH: Final = 1
MAP_TYPE_LPM_TRIE: Final = 11
#: Per-socket storage, freed with the socket; needs BTF for its key and value.
MAP_TYPE_SK_STORAGE: Final = 24
#: LPM tries must be created with it (they are never preallocated).
F_NO_PREALLOC: Final = 1

PROG_TYPE_CGROUP_SOCK: Final = 9
PROG_TYPE_CGROUP_SOCK_ADDR: Final = 18

CGROUP_INET_SOCK_CREATE: Final = 2

CGROUP_INET4_CONNECT: Final = 10
CGROUP_INET6_CONNECT: Final = 11
CGROUP_UDP4_SENDMSG: Final = 14
CGROUP_UDP6_SENDMSG: Final = 15

#: Attach beside whatever the cgroup's ancestors run: every program must allow.
F_ALLOW_MULTI: Final = 2

# --- helper ids (enum bpf_func_id / __BPF_FUNC_MAPPER) -----------------------------------

FUNC_MAP_LOOKUP_ELEM: Final = 1
FUNC_SK_LOOKUP_TCP: Final = 84
FUNC_SK_LOOKUP_UDP: Final = 85
FUNC_SK_RELEASE: Final = 86
FUNC_SK_STORAGE_GET: Final = 107
#: ``bpf_sk_storage_get`` flag: create the socket's storage when it has none.
SK_STORAGE_GET_F_CREATE: Final = 1

#: ``BPF_F_CURRENT_NETNS`` (-1): socket lookups in the netns of the program's socket.
CURRENT_NETNS: Final = -1

#: ``__NR_bpf`` per architecture (``platform.machine()``).
_SYSCALL: Final = {
    "x86_64": 321,
    "amd64": 321,
    "aarch64": 280,
    "arm64": 280,
    "riscv64": 280,
    "loongarch64": 280,
    "s390x": 351,
    "ppc64le": 361,
    "ppc64": 361,
    "armv7l": 386,
    "i686": 357,
    "i386": 357,
}
_ATTR_SIZE: Final = 144  # sizeof(union bpf_attr) in the 6.x UAPI; the kernel accepts less
_LOG_SIZE: Final = 1 << 20

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class VerifierError(OSError):
    """``BPF_PROG_LOAD`` failed; ``log`` is what the verifier said."""

    def __init__(self, errno_: int, name: str, log: str) -> None:
        tail = log.strip()[-4000:]
        super().__init__(errno_, f"the kernel refused BPF program {name}: {os.strerror(errno_)}")
        self.log = log
        self.detail = tail

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}\nverifier log:\n{self.detail}" if self.detail else text


def available() -> str:
    """Empty when ``bpf(2)`` can be called here, else why not."""
    if platform.machine() not in _SYSCALL:
        return f"no bpf(2) syscall number known for {platform.machine()}"
    return ""


def _bpf(command: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    number = _SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(38, available())
    result = _libc.syscall(
        ctypes.c_long(number), ctypes.c_int(command), attr, ctypes.c_uint(len(attr))
    )
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(result)


def _attr(layout: str, *values: object) -> ctypes.Array[ctypes.c_char]:
    """A zeroed ``union bpf_attr`` with ``values`` packed (``struct`` ``layout``) at 0."""
    buffer = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into(layout, buffer, 0, *values)
    return buffer


def _address(data: ctypes.Array[ctypes.c_char]) -> int:
    return ctypes.addressof(data)


@dataclass(eq=False)
class BpfObject:
    """An owned bpf file descriptor (map or program); ``close`` once."""

    fd: int
    name: str

    def close(self) -> None:
        """Drop the reference; the kernel frees the object when nothing else holds it."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


# --- maps ----------------------------------------------------------------------------------


def map_create(
    map_type: int,
    key_size: int,
    value_size: int,
    max_entries: int,
    *,
    flags: int = 0,
    name: str,
    btf: tuple[BpfObject, int, int] | None = None,
) -> BpfObject:
    """``BPF_MAP_CREATE``: u32 map_type, key_size, value_size, max_entries, map_flags,
    inner_map_fd, numa_node, char map_name[16] (offset 28), u32 map_ifindex (44), btf_fd
    (48), btf_key_type_id, btf_value_type_id; ``btf`` is (BTF object, key type, value type).
    """
    btf_fd, key_type, value_type = (btf[0].fd, btf[1], btf[2]) if btf else (0, 0, 0)
    attr = _attr(
        "=7I16s4I",
        map_type,
        key_size,
        value_size,
        max_entries,
        flags,
        0,
        0,
        name[:15].encode(),
        0,
        btf_fd,
        key_type,
        value_type,
    )
    return BpfObject(_bpf(MAP_CREATE, attr), name)


#: ``BTF_KIND_INT`` (``include/uapi/linux/btf.h``); ``info`` holds the kind in bits 24-28.
_BTF_KIND_INT: Final = 1
_BTF_MAGIC: Final = 0xEB9F


def btf_integers(*sizes: int) -> BpfObject:
    """Load BTF describing one unsigned integer type per size in bytes (type ids 1, 2, ...).

    The blob: ``struct btf_header`` {u16 magic, u8 version 1, u8 flags, u32 hdr_len 24,
    u32 type_off, type_len, str_off, str_len}, then per type a ``struct btf_type``
    {name_off, info, size} and the INT's u32 (encoding << 24 | offset << 16 | bits), then
    the string section (``"\0u"``: every type is named "u").
    """
    types = b"".join(struct.pack("=IIII", 1, _BTF_KIND_INT << 24, size, size * 8) for size in sizes)
    strings = b"\0u\0"
    blob = (
        struct.pack("=HBBIIIII", _BTF_MAGIC, 1, 0, 24, 0, len(types), len(types), len(strings))
        + types
        + strings
    )
    data = ctypes.create_string_buffer(blob, len(blob))
    log = ctypes.create_string_buffer(1 << 16)
    # u64 btf, u64 btf_log_buf, u32 btf_size, btf_log_size, btf_log_level
    attr = _attr("=QQIII", _address(data), _address(log), len(blob), len(log), 1)
    try:
        return BpfObject(_bpf(BTF_LOAD, attr), "btf")
    except OSError as exc:
        raise VerifierError(exc.errno or 0, "btf", log.value.decode("utf-8", "replace")) from None


def _element(
    fd: int,
    key: ctypes.Array[ctypes.c_char] | None,
    value: ctypes.Array[ctypes.c_char] | None,
    flags: int = 0,
) -> ctypes.Array[ctypes.c_char]:
    """``BPF_MAP_*_ELEM``: u32 map_fd, (pad), u64 key, u64 value (or next_key), u64 flags.

    The caller keeps ``key`` and ``value`` alive across the call.
    """
    return _attr(
        "=IxxxxQQQ",
        fd,
        0 if key is None else _address(key),
        0 if value is None else _address(value),
        flags,
    )


def _buffer(data: bytes) -> ctypes.Array[ctypes.c_char]:
    return ctypes.create_string_buffer(data, len(data))


def map_update(target: BpfObject, key: bytes, value: bytes, flags: int = 0) -> None:
    """Insert or replace one element (``flags``: ``BPF_ANY`` 0)."""
    key_buffer, value_buffer = _buffer(key), _buffer(value)
    _bpf(MAP_UPDATE_ELEM, _element(target.fd, key_buffer, value_buffer, flags))


def map_delete(target: BpfObject, key: bytes) -> None:
    """Remove one element (``FileNotFoundError`` when absent)."""
    key_buffer = _buffer(key)
    _bpf(MAP_DELETE_ELEM, _element(target.fd, key_buffer, None))


def map_lookup(target: BpfObject, key: bytes, value_size: int) -> bytes | None:
    """The value stored at ``key``, or None."""
    key_buffer, value = _buffer(key), ctypes.create_string_buffer(value_size)
    try:
        _bpf(MAP_LOOKUP_ELEM, _element(target.fd, key_buffer, value))
    except FileNotFoundError:
        return None
    return value.raw


def map_keys(target: BpfObject, key_size: int) -> Iterator[bytes]:
    """Every key (``BPF_MAP_GET_NEXT_KEY`` from "no key"); for maps nobody else changes."""
    current: ctypes.Array[ctypes.c_char] | None = None
    while True:
        following = ctypes.create_string_buffer(key_size)
        try:
            _bpf(MAP_GET_NEXT_KEY, _element(target.fd, current, following))
        except FileNotFoundError:
            return
        current = following
        yield following.raw


# --- programs ------------------------------------------------------------------------------


def prog_load(
    prog_type: int,
    code: bytes,
    *,
    expected_attach_type: int,
    name: str,
    license: str = "Apache-2.0",
) -> BpfObject:
    """``BPF_PROG_LOAD`` with the verifier log kept for the error.

    Layout: u32 prog_type, insn_cnt, u64 insns, u64 license, u32 log_level, log_size,
    u64 log_buf, u32 kern_version, prog_flags, char prog_name[16], u32 prog_ifindex,
    u32 expected_attach_type (offset 68). The helpers used here are not GPL-only, so the
    project's own licence is declared.
    """
    insns = ctypes.create_string_buffer(code, len(code))
    licence = ctypes.create_string_buffer(license.encode())
    log = ctypes.create_string_buffer(_LOG_SIZE)

    def load(level: int) -> int:
        attr = _attr(
            "=IIQQIIQII16sII",
            prog_type,
            len(code) // 8,
            _address(insns),
            _address(licence),
            level,
            _LOG_SIZE if level else 0,
            _address(log) if level else 0,
            0,
            0,
            name[:15].encode(),
            0,
            expected_attach_type,
        )
        return _bpf(PROG_LOAD, attr)

    try:
        return BpfObject(load(0), name)
    except OSError as first:
        # Loaded again with a log only on failure: logging costs verifier time.
        try:
            return BpfObject(load(1), name)
        except OSError as second:
            text = log.value.decode("utf-8", "replace")
            raise VerifierError(second.errno or first.errno or 0, name, text) from None


def attach(
    cgroup_fd: int, program: BpfObject, attach_type: int, flags: int = F_ALLOW_MULTI
) -> None:
    """``BPF_PROG_ATTACH``: u32 target_fd, attach_bpf_fd, attach_type, attach_flags.

    Attached this way (not through a link) a program stays until it is detached or the
    cgroup is removed: if the daemon dies, what is left in the cgroup stays guarded.
    """
    _bpf(PROG_ATTACH, _attr("=4I", cgroup_fd, program.fd, attach_type, flags))


def detach(cgroup_fd: int, program: BpfObject, attach_type: int) -> None:
    """``BPF_PROG_DETACH`` of exactly ``program`` (multi-attached cgroups name it)."""
    _bpf(PROG_DETACH, _attr("=3I", cgroup_fd, program.fd, attach_type))


# --- the assembler -------------------------------------------------------------------------

# Instruction classes, sizes, modes, operations (include/uapi/linux/bpf_common.h, bpf.h).
_LDX, _ST, _STX, _ALU64, _JMP = 0x01, 0x02, 0x03, 0x07, 0x05
_LD_IMM64 = 0x18  # BPF_LD | BPF_DW | BPF_IMM
_MEM = 0x60
_SIZES: Final = {"w": 0x00, "h": 0x08, "b": 0x10, "dw": 0x18}
_K, _X = 0x00, 0x08
_MOV, _ADD, _AND, _RSH = 0xB0, 0x00, 0x50, 0x70
_JUMPS: Final = {"ja": 0x00, "jeq": 0x10, "jne": 0x50, "jgt": 0x20, "jlt": 0xA0}
_CALL, _EXIT = 0x80, 0x90
_PSEUDO_MAP_FD = 1

#: Registers: r0 result, r1-r5 arguments (clobbered by calls), r6-r9 kept, r10 frame.
R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10 = range(11)


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


class Asm:
    """Instructions with symbolic jump targets; ``code()`` resolves them.

    Sources that are ints are immediates, ``Reg`` sources registers. ``label`` marks the
    next instruction.
    """

    def __init__(self) -> None:
        self._items: list[bytes | _Jump] = []
        self._labels: dict[str, int] = {}
        self._slots = 0

    def _emit(self, raw: bytes) -> None:
        self._items.append(raw)
        self._slots += len(raw) // 8

    def label(self, name: str) -> None:
        """Name the next instruction."""
        if name in self._labels:
            raise ValueError(f"label {name} twice")
        self._labels[name] = self._slots

    def mov(self, dst: int, src: Reg | int) -> None:
        """``dst = src`` (64-bit; immediates are sign-extended)."""
        self._alu(_MOV, dst, src)

    def add(self, dst: int, src: Reg | int) -> None:
        """``dst += src``."""
        self._alu(_ADD, dst, src)

    def _alu(self, op: int, dst: int, src: Reg | int) -> None:
        if isinstance(src, Reg):
            self._emit(_insn(_ALU64 | op | _X, dst, src.number))
        else:
            self._emit(_insn(_ALU64 | op | _K, dst, imm=src))

    def load(self, size: str, dst: int, base: int, off: int) -> None:
        """``dst = *(size *)(base + off)``."""
        self._emit(_insn(_LDX | _MEM | _SIZES[size], dst, base, off))

    def store(self, size: str, base: int, off: int, src: Reg | int) -> None:
        """``*(size *)(base + off) = src``."""
        if isinstance(src, Reg):
            self._emit(_insn(_STX | _MEM | _SIZES[size], base, src.number, off))
        else:
            self._emit(_insn(_ST | _MEM | _SIZES[size], base, 0, off, src))

    def load_imm64(self, dst: int, value: int) -> None:
        """``dst`` = a full 64-bit constant (two-slot ``ld_imm64``)."""
        low, high = struct.unpack("<ii", struct.pack("<Q", value & (2**64 - 1)))
        self._emit(_insn(_LD_IMM64, dst, 0, 0, low) + _insn(0, imm=high))

    def load_map(self, dst: int, target: BpfObject) -> None:
        """``dst`` = the map (a two-slot ``ld_imm64`` the kernel rewrites to its address)."""
        self._emit(_insn(_LD_IMM64, dst, _PSEUDO_MAP_FD, 0, target.fd) + _insn(0))

    def jump(self, op: str, dst: int, src: Reg | int, target: str) -> None:
        """``if dst <op> src goto target`` (``op``: jeq, jne, jgt, jlt)."""
        if isinstance(src, Reg):
            self._items.append(_Jump(_JMP | _JUMPS[op] | _X, dst, src.number, 0, target))
        else:
            self._items.append(_Jump(_JMP | _JUMPS[op] | _K, dst, 0, src, target))
        self._slots += 1

    def goto(self, target: str) -> None:
        """Unconditional jump."""
        self._items.append(_Jump(_JMP | _JUMPS["ja"], 0, 0, 0, target))
        self._slots += 1

    def call(self, helper: int) -> None:
        """Call helper ``helper``: arguments r1-r5, result r0; r1-r5 are clobbered."""
        self._emit(_insn(_JMP | _CALL, imm=helper))

    def exit(self) -> None:
        """Return r0."""
        self._emit(_insn(_JMP | _EXIT))

    def code(self) -> bytes:
        """The instructions, jumps resolved."""
        out = bytearray()
        slot = 0
        for item in self._items:
            if isinstance(item, bytes):
                out += item
                slot += len(item) // 8
                continue
            if item.target not in self._labels:
                raise ValueError(f"no label {item.target}")
            offset = self._labels[item.target] - slot - 1
            out += _insn(item.code, item.dst, item.src, offset, item.imm)
            slot += 1
        return bytes(out)


class _Jump(NamedTuple):
    code: int
    dst: int
    src: int
    imm: int
    target: str


@dataclass(frozen=True, slots=True)
class Reg:
    """A register as a source operand (ints are immediates)."""

    number: int
