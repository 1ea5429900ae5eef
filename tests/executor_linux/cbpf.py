"""A small classic-BPF interpreter for seccomp programs, to compare two programs' decisions.

It runs what the kernel's ``seccomp_check_filter`` accepts: 32-bit loads from ``struct
seccomp_data`` (and its length), immediates, the scratch memory, the ALU, the jumps, returns.
Besides the return value it records which ``seccomp_data`` offsets the run read, so a caller
can tell that a decision did not depend on the arguments (the program is deterministic: what
it did not read cannot change what it returned).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Run", "SeccompData", "decode", "run"]

_MASK = 0xFFFF_FFFF
#: ``sizeof(struct seccomp_data)``: nr, arch, instruction_pointer, args[6].
DATA_SIZE = 64

# Classes, sizes, modes, sources, operations (include/uapi/linux/bpf_common.h, filter.h).
_LD, _LDX, _ST, _STX, _ALU, _JMP, _RET, _MISC = range(8)
_W, _ABS, _IMM, _MEM, _LEN = 0x00, 0x20, 0x00, 0x60, 0x80
_K, _X, _A = 0x00, 0x08, 0x10
_TAX, _TXA = 0x00, 0x80

_ALU_OPS: dict[int, Callable[[int, int], int]] = {
    0x00: lambda a, b: a + b,
    0x10: lambda a, b: a - b,
    0x20: lambda a, b: a * b,
    0x30: lambda a, b: a // b,
    0x40: lambda a, b: a | b,
    0x50: lambda a, b: a & b,
    0x60: lambda a, b: a << (b & 31),
    0x70: lambda a, b: a >> (b & 31),
    0x80: lambda a, _b: -a,
    0x90: lambda a, b: a % b,
    0xA0: lambda a, b: a ^ b,
}
_JUMP_OPS: dict[int, Callable[[int, int], bool]] = {
    0x10: lambda a, b: a == b,
    0x20: lambda a, b: a > b,
    0x30: lambda a, b: a >= b,
    0x40: lambda a, b: bool(a & b),
}


@dataclass(frozen=True, slots=True)
class SeccompData:
    """What a seccomp filter sees of one system call (``struct seccomp_data``)."""

    nr: int
    arch: int
    args: tuple[int, ...] = (0, 0, 0, 0, 0, 0)
    instruction_pointer: int = 0

    def pack(self) -> bytes:
        """The kernel's layout: int nr, u32 arch, u64 instruction_pointer, u64 args[6]."""
        args = tuple(arg & 0xFFFF_FFFF_FFFF_FFFF for arg in self.args)
        return struct.pack("=iIQ6Q", self.nr, self.arch, self.instruction_pointer, *args)


@dataclass(slots=True)
class Run:
    """A program's return value and what it read to get there."""

    value: int
    offsets: set[int] = field(default_factory=set)
    steps: int = 0


def decode(program: bytes) -> list[tuple[int, int, int, int]]:
    """The ``struct sock_filter`` instructions: (code, jt, jf, k)."""
    if len(program) % 8:
        raise ValueError("a classic BPF program is a multiple of 8 bytes")
    return [struct.unpack_from("=HBBI", program, at) for at in range(0, len(program), 8)]


def run(program: list[tuple[int, int, int, int]], data: SeccompData) -> Run:
    """Evaluate ``program`` on ``data`` as the kernel would; raises on what it would refuse."""
    raw = data.pack()
    a = x = 0
    memory = [0] * 16
    result = Run(0)
    pc = 0
    while True:
        code, jt, jf, k = program[pc]  # IndexError: the program runs off its end
        result.steps += 1
        pc += 1
        kind = code & 0x07
        if kind in (_LD, _LDX):
            value = _load(code, k, raw, memory, result)
            if kind == _LD:
                a = value
            else:
                x = value
        elif kind == _ST:
            memory[k] = a
        elif kind == _STX:
            memory[k] = x
        elif kind == _ALU:
            operand = x if code & _X else k
            a = _ALU_OPS[code & 0xF0](a, operand) & _MASK
        elif kind == _JMP:
            pc += _jump(code, jt, jf, k, a, x)
        elif kind == _RET:
            result.value = a if code & 0x18 == _A else k
            return result
        elif code & 0xF8 == _TAX:  # _MISC: tax or txa
            x = a
        else:
            a = x


def _load(code: int, k: int, raw: bytes, memory: list[int], seen: Run) -> int:
    mode = code & 0xE0
    if mode == _ABS:
        if code & 0x18 != _W or k % 4 or k + 4 > DATA_SIZE:
            raise ValueError(f"the kernel refuses load {code:#x} at {k}")
        seen.offsets.add(k)
        return int(struct.unpack_from("=I", raw, k)[0])
    if mode == _IMM:
        return k
    if mode == _MEM:
        return memory[k]
    if mode == _LEN:
        return DATA_SIZE
    raise ValueError(f"the kernel refuses load {code:#x}")


def _jump(code: int, jt: int, jf: int, k: int, a: int, x: int) -> int:
    """How many instructions to skip."""
    op = code & 0xF0
    if op == 0x00:  # ja: a 32-bit offset
        return k
    return jt if _JUMP_OPS[op](a, x if code & _X else k) else jf
