"""The loopback guard's BPF programs and maps (daemon side; see ``loopback_guard.py``).

Hand-written instructions (``bpf.Asm``), each program's logic in its docstring and comments.
Context offsets are those of ``struct bpf_sock_addr`` and ``struct bpf_sock_tuple`` in the
kernel UAPI (``include/uapi/linux/bpf.h``), checked against the header with ``offsetof``.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from executor_linux import bpf
from executor_linux.bpf import R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10, Asm, BpfObject, Reg

__all__ = ["DNS_PORT", "GuardMaps", "trie_key"]

#: Reachable on every local address: name resolution keeps working.
DNS_PORT: Final = 53
_MAX_LOCAL: Final = 65536  # not preallocated: costs only what is used

# Protocol numbers and the ``struct bpf_sock_addr`` / ``struct bpf_sock_tuple`` layout.
_TCP, _UDP, _ICMP, _ICMPV6 = 6, 17, 1, 58
_USER_IP4: Final = 4  # __u32, network byte order
_USER_IP6: Final = 8  # __u32[4], network byte order
_USER_PORT: Final = 24  # __u32 holding the __be16 port (network byte order)
_PROTOCOL: Final = 36  # __u32
_SK: Final = 64  # struct bpf_sock *: the socket making the call
_TUPLE4_SIZE: Final = 12  # {__be32 saddr, daddr; __be16 sport, dport}
_TUPLE6_SIZE: Final = 36  # {__be32 saddr[4], daddr[4]; __be16 sport, dport}
# The programs' stack frame (offsets from r10): the LPM key, then the lookup tuple.
_KEY: Final = -24  # u32 prefixlen at -24, u8 data[16] at -20..-5
_TUPLE6: Final = -64  # saddr -64, daddr -48, sport -32, dport -30
_TUPLE4: Final = -40  # saddr -40, daddr -36, sport -32, dport -30
_OWN_TAG: Final = -72  # u64: the calling socket's tag


def _native16(value: int) -> int:
    """The register value of a ``__be16`` loaded from memory on this CPU."""
    return int(struct.unpack("=H", struct.pack("!H", value))[0])


def _native32(raw: bytes) -> int:
    """The register value of four network-order bytes loaded from memory on this CPU."""
    return int(struct.unpack("=I", raw)[0])


def _signed32(value: int) -> int:
    return value - (1 << 32) if value >= 1 << 31 else value


#: Words 0-2 of an IPv4-mapped IPv6 address (``::ffff:0:0/96``), as loaded.
_MAPPED_WORD2: Final = _signed32(_native32(b"\x00\x00\xff\xff"))


def trie_key(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bytes:
    """The LPM trie key of ``network``: u32 prefix length, then 16 address bytes (IPv4 as
    ``::ffff:a.b.c.d``, the form the programs build for IPv4 destinations)."""
    if isinstance(network, ipaddress.IPv4Network):
        data = b"\0" * 10 + b"\xff\xff" + network.network_address.packed
        return struct.pack("=I", 96 + network.prefixlen) + data
    return struct.pack("=I", network.prefixlen) + network.network_address.packed


def _sock_create(tags: BpfObject, tag: int) -> bytes:
    """``sock_create``: give every new IPv4/IPv6 socket the scope's tag; never refuse one.

    r1 = ctx (struct bpf_sock *). A socket whose storage cannot be allocated stays untagged:
    its listeners are then unreachable for the scope (closed, not open).
    """
    a = Asm()
    a.mov(R2, Reg(R1))  # the socket
    a.load_map(R1, tags)
    a.mov(R3, 0)  # no initial value
    a.mov(R4, bpf.SK_STORAGE_GET_F_CREATE)
    a.call(bpf.FUNC_SK_STORAGE_GET)
    a.jump("jeq", R0, 0, "done")
    a.load_imm64(R1, tag)
    a.store("dw", R0, 0, Reg(R1))
    a.label("done")
    a.mov(R0, 1)
    a.exit()
    return a.code()


def _sock_addr(family: int, *, local: BpfObject, tags: BpfObject, ports: Iterable[int]) -> bytes:
    """``connect4``/``sendmsg4`` (``family`` 4) or ``connect6``/``sendmsg6`` (6).

    r1 = ctx (struct bpf_sock_addr *); return 1 to let the call proceed, 0 for EPERM.
    Registers kept across calls: r6 ctx, r7 IPv4 destination (or the found socket),
    r8 destination port as loaded (network order), r9 protocol. The scope is not a
    constant here: the calling socket carries its tag (``sock_create`` ran in the same
    cgroup), so one loaded program serves every command with the same ``ports``.
    """
    a = Asm()
    a.mov(R6, Reg(R1))
    # 1. The LPM key: prefix length 128, then the destination as 16 bytes (IPv4 mapped).
    a.store("w", R10, _KEY, 128)
    if family == 4:
        a.store("w", R10, _KEY + 4, 0)
        a.store("w", R10, _KEY + 8, 0)
        a.store("w", R10, _KEY + 12, _MAPPED_WORD2)
        a.load("w", R7, R6, _USER_IP4)
        a.store("w", R10, _KEY + 16, Reg(R7))
    else:
        for word in range(4):
            a.load("w", R7, R6, _USER_IP6 + 4 * word)
            a.store("w", R10, _KEY + 4 + 4 * word, Reg(R7))
        # r7 = word 3 now: the IPv4 address when the destination is IPv4-mapped.
    # 2. Not a local destination: not ours to judge.
    a.load_map(R1, local)
    a.mov(R2, Reg(R10))
    a.add(R2, _KEY)
    a.call(bpf.FUNC_MAP_LOOKUP_ELEM)
    a.jump("jeq", R0, 0, "allow")
    # 3. Ports allowed on every local address: DNS, then the command's local_ports.
    a.load("w", R8, R6, _USER_PORT)
    for port in (DNS_PORT, *ports):
        a.jump("jeq", R8, _native16(port), "allow")
    # 4. Only TCP and UDP have listeners to look up; ICMP has no ports (ping localhost is
    #    harmless); anything else (SCTP, UDP-Lite, ...) to a local address is refused.
    a.load("w", R9, R6, _PROTOCOL)
    a.jump("jeq", R9, _ICMP, "allow")
    a.jump("jeq", R9, _ICMPV6, "allow")
    a.jump("jeq", R9, _TCP, "own")
    a.jump("jne", R9, _UDP, "deny")
    # 5. The calling socket's own tag (none: refused); kept on the stack across the calls.
    a.label("own")
    a.load_map(R1, tags)
    a.load("dw", R2, R6, _SK)
    a.mov(R3, 0)
    a.mov(R4, 0)
    a.call(bpf.FUNC_SK_STORAGE_GET)
    a.jump("jeq", R0, 0, "deny")
    a.load("dw", R1, R0, 0)
    a.jump("jeq", R1, 0, "deny")
    a.store("dw", R10, _OWN_TAG, Reg(R1))
    # 6. The tuple of the socket that would receive it: no source (listeners and unconnected
    #    UDP sockets match any), destination address and port.
    if family == 6:
        # IPv4-mapped: the kernel delivers it as IPv4, so look for an IPv4 receiver.
        a.load("w", R1, R10, _KEY + 4)
        a.jump("jne", R1, 0, "tuple6")
        a.load("w", R1, R10, _KEY + 8)
        a.jump("jne", R1, 0, "tuple6")
        a.load("w", R1, R10, _KEY + 12)
        a.jump("jne", R1, _MAPPED_WORD2, "tuple6")
    a.store("w", R10, _TUPLE4, 0)
    a.store("w", R10, _TUPLE4 + 4, Reg(R7))
    a.store("h", R10, _TUPLE4 + 8, 0)
    a.store("h", R10, _TUPLE4 + 10, Reg(R8))
    a.mov(R3, _TUPLE4_SIZE)
    a.mov(R2, Reg(R10))
    a.add(R2, _TUPLE4)
    a.goto("lookup")
    if family == 6:
        a.label("tuple6")
        for word in range(4):
            a.store("w", R10, _TUPLE6 + 4 * word, 0)
            a.load("w", R1, R10, _KEY + 4 + 4 * word)
            a.store("w", R10, _TUPLE6 + 16 + 4 * word, Reg(R1))
        a.store("h", R10, _TUPLE6 + 32, 0)
        a.store("h", R10, _TUPLE6 + 34, Reg(R8))
        a.mov(R3, _TUPLE6_SIZE)
        a.mov(R2, Reg(R10))
        a.add(R2, _TUPLE6)
    # 7. bpf_sk_lookup_{tcp,udp}(ctx, &tuple, size, BPF_F_CURRENT_NETNS, 0).
    a.label("lookup")
    a.mov(R1, Reg(R6))
    a.mov(R4, bpf.CURRENT_NETNS)
    a.mov(R5, 0)
    a.jump("jeq", R9, _UDP, "udp")
    a.call(bpf.FUNC_SK_LOOKUP_TCP)
    a.goto("found")
    a.label("udp")
    a.call(bpf.FUNC_SK_LOOKUP_UDP)
    # 8. Nobody would receive it: refused (the EPERM hides nothing a refusal would tell).
    a.label("found")
    a.jump("jeq", R0, 0, "deny")
    a.mov(R7, Reg(R0))
    # 9. The receiver's tag (0: none), read before the socket reference is released.
    a.load_map(R1, tags)
    a.mov(R2, Reg(R7))
    a.mov(R3, 0)
    a.mov(R4, 0)
    a.call(bpf.FUNC_SK_STORAGE_GET)
    a.mov(R8, 0)
    a.jump("jeq", R0, 0, "release")
    a.load("dw", R8, R0, 0)
    a.label("release")
    a.mov(R1, Reg(R7))
    a.call(bpf.FUNC_SK_RELEASE)
    # 10. Same scope: allowed.
    a.load("dw", R1, R10, _OWN_TAG)
    a.jump("jeq", R8, Reg(R1), "allow")
    a.label("deny")
    a.mov(R0, 0)
    a.exit()
    a.label("allow")
    a.mov(R0, 1)
    a.exit()
    return a.code()


#: (attach type, family, name) of the socket-address programs.
_ADDRESS_HOOKS: Final = (
    (bpf.CGROUP_INET4_CONNECT, 4, "exec_connect4"),
    (bpf.CGROUP_INET6_CONNECT, 6, "exec_connect6"),
    (bpf.CGROUP_UDP4_SENDMSG, 4, "exec_sendmsg4"),
    (bpf.CGROUP_UDP6_SENDMSG, 6, "exec_sendmsg6"),
)


@dataclass(eq=False)
class GuardMaps:
    """The daemon's two maps: local prefixes (LPM trie) and socket tags (socket storage)."""

    local: BpfObject
    tags: BpfObject
    btf: BpfObject
    #: The trie's keys now (the trie is only changed through ``sync``).
    present: set[bytes] = field(default_factory=set)

    @classmethod
    def create(cls) -> GuardMaps:
        btf = bpf.btf_integers(4, 8)
        try:
            tags = bpf.map_create(
                bpf.MAP_TYPE_SK_STORAGE,
                4,
                8,
                0,
                flags=bpf.F_NO_PREALLOC,
                name="exec_tags",
                btf=(btf, 1, 2),
            )
        except OSError:
            btf.close()
            raise
        try:
            local = bpf.map_create(
                bpf.MAP_TYPE_LPM_TRIE,
                20,
                1,
                _MAX_LOCAL,
                flags=bpf.F_NO_PREALLOC,
                name="exec_local",
            )
        except OSError:
            tags.close()
            btf.close()
            raise
        return cls(local=local, tags=tags, btf=btf)

    def sync(self, prefixes: Iterable[str]) -> None:
        """Make the trie hold exactly ``prefixes``."""
        wanted = {trie_key(ipaddress.ip_network(p, strict=False)) for p in prefixes}
        for key in wanted - self.present:
            bpf.map_update(self.local, key, b"\1")
        for key in self.present - wanted:
            try:
                bpf.map_delete(self.local, key)
            except FileNotFoundError:
                pass
        self.present = wanted

    def tagger(self, tag: int) -> list[tuple[int, BpfObject]]:
        """The ``sock_create`` program of one scope, loaded; the caller closes it."""
        code = _sock_create(self.tags, tag)
        program = bpf.prog_load(
            bpf.PROG_TYPE_CGROUP_SOCK,
            code,
            expected_attach_type=bpf.CGROUP_INET_SOCK_CREATE,
            name="exec_sock_tag",
        )
        return [(bpf.CGROUP_INET_SOCK_CREATE, program)]

    def checks(self, ports: tuple[int, ...]) -> list[tuple[int, BpfObject]]:
        """The four socket-address programs for ``ports``, loaded; the caller closes them."""
        loaded: list[tuple[int, BpfObject]] = []
        try:
            for attach_type, family, name in _ADDRESS_HOOKS:
                code = _sock_addr(family, local=self.local, tags=self.tags, ports=ports)
                program = bpf.prog_load(
                    bpf.PROG_TYPE_CGROUP_SOCK_ADDR,
                    code,
                    expected_attach_type=attach_type,
                    name=name,
                )
                loaded.append((attach_type, program))
        except OSError:
            for _attach, program in loaded:
                program.close()
            raise
        return loaded

    def close(self) -> None:
        """Drop the daemon's references (attached programs keep the maps alive)."""
        for item in (self.local, self.tags, self.btf):
            item.close()
