"""Loopback isolation for full network mode: cgroup-v2 BPF socket-address hooks (daemon side).

A command with ``RuleSet.isolate_loopback`` keeps the host's network but not the host's own
services: its TCP ``connect`` and its UDP ``connect``/``sendmsg`` to a *local destination*
fail with ``EPERM``, unless

* the port is in its ``local_ports``;
* the port is 53 (TCP or UDP): a resolver on the host (systemd-resolved's 127.0.0.53,
  dnsmasq, a local unbound) must keep answering, since ``/etc/resolv.conf`` often names one;
* the socket that would receive the connection or datagram was created by a command of the
  same ``network_scope`` (session): a dev server started by one ``process/start`` is
  reachable from the next, while every other listener on the host stays out of reach.

A *local destination* is one the kernel delivers to this host: 0.0.0.0/8 and ``::`` (which
``connect`` turns into loopback), 127.0.0.0/8, ``::1``, multicast and the limited broadcast,
their IPv4-mapped forms (``::ffff:127.0.0.1``), and every entry of the kernel's ``local``
routing table (the host's interface addresses, their broadcast and anycast addresses, AnyIP
prefixes). That table is read through rtnetlink whenever a guarded command starts; an address
added while a command runs is not covered for that command until the next one starts (there
is no BPF helper to ask "is this address local?" from these hooks).

How
---
Five programs are attached to the command's cgroup (``BPF_F_ALLOW_MULTI``: whatever the
cgroup's ancestors run still runs, and every program must allow):

* ``sock_create`` (``BPF_CGROUP_INET_SOCK_CREATE``) tags every IPv4/IPv6 socket the command
  creates with its scope's tag, in a socket-storage map (``BPF_MAP_TYPE_SK_STORAGE``: the
  tag lives and dies with the socket, so a closed listener's port is never inherited by
  whoever binds it next).
* ``connect4``/``connect6``/``sendmsg4``/``sendmsg6`` (``BPF_PROG_TYPE_CGROUP_SOCK_ADDR``)
  look the destination up in an LPM trie of local prefixes; for a local one on a port not
  allowed outright, they find the socket that would receive it (``bpf_sk_lookup_tcp`` /
  ``bpf_sk_lookup_udp`` in the caller's netns) and allow only if its tag is the calling
  socket's own.

The scope's tag (a keyed hash of the session id; random for a command without one) is the
one constant of ``sock_create``, loaded per command; the allowed ports are constants of the
four checks, which read the scope from the calling socket and so are loaded once per
``local_ports`` set and shared (a join costs about 3 ms). Scopes need no cgroup of their
own, which matters twice: a process is in exactly one cgroup-v2 cgroup, so on a host where
the command's resource limits use a v2 cgroup (``cgroups.py``) the programs go on *that*
cgroup; and two commands of one session may have different ``local_ports``. Only when the
command has no v2 cgroup does the guard create one,
``<daemon's v2 cgroup>/executor-net/<daemon pid>-<random>``, which the child joins through
``Limits.cgroups`` (it writes ``0`` to its ``cgroup.procs``) and which ``release`` empties
(``cgroup.kill``) and removes; removing a cgroup detaches its programs, and the kernel frees
programs and maps when nothing holds them. Attached with ``BPF_PROG_ATTACH`` rather than a
link, the programs outlive the daemon: what a dead daemon leaves in a guarded cgroup stays
guarded, and the next daemon removes such cgroups once they are empty.

The cgroup2 hierarchy: an existing ``cgroup2`` mount is used when the daemon sees one
(``/proc/self/mountinfo``). Without one (a cgroup-v1-only host) the guard mounts cgroup2
*detached* (``fsopen``/``fsmount``): nothing appears in the host's mount table and nothing
needs unmounting, the daemon holds the mount's file descriptor, and the child reaches its
cgroup through ``/proc/<daemon pid>/fd/<fd>/...``. Two effects on the host remain, both
those of any cgroup2 mount: from then on ``/proc/<pid>/cgroup`` shows a ``0::`` line for
every process, and a mount resets the hierarchy-wide mount options (``nsdelegate``,
``memory_recursiveprot``, ...) to its own, which is why the guard mounts only when no
cgroup2 mount exists (then nobody relies on those options) and otherwise passes the
existing mount's options.

Protocols other than TCP, UDP and ICMP (SCTP, UDP-Lite, ...) to a local address are refused
unless the port is listed. Not covered (docs/loopback-isolation.md): Unix sockets (the mount
and Landlock layers hide the host's), a host socket in the same ``SO_REUSEPORT`` group as a
scope socket (possible only for the same user), addresses that become local while a command
runs, host NAT rules that send another address back to this host. A command that can write
cgroup2 files (uid 0 with an unrestricted filesystem) could move itself out of its cgroup:
the guard relies on the filesystem rules keeping ``/sys`` read-only for the command. Root
privileges (``CAP_BPF`` or ``CAP_SYS_ADMIN``, and ``CAP_NET_ADMIN``) are required: an
unprivileged daemon reports the feature unavailable.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import ipaddress
import logging
import os
import re
import secrets
import socket
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import Final

from executor_linux import bpf
from executor_linux.bpf import R0, R1, R2, R3, R4, R5, R6, R7, R8, R9, R10, Asm, BpfObject, Reg

__all__ = [
    "DNS_PORT",
    "STATIC_LOCAL",
    "GuardedCommand",
    "LoopbackGuard",
    "local_prefixes",
    "loopback_guard",
    "loopback_guard_support",
]

log = logging.getLogger("executor.sandbox.linux")

#: Reachable on every local address: name resolution keeps working.
DNS_PORT: Final = 53
#: Always local, whatever the routing table says (``connect`` maps 0.0.0.0 and ``::`` to
#: loopback; multicast and broadcast loop back to local listeners).
STATIC_LOCAL: Final = (
    "0.0.0.0/8",
    "127.0.0.0/8",
    "224.0.0.0/4",
    "255.255.255.255/32",
    "::/128",
    "::1/128",
    "ff00::/8",
)
#: The parent, below the daemon's cgroup-v2 cgroup, of the cgroups the guard creates.
BASE_NAME: Final = "executor-net"
_COMMAND_NAME: Final = re.compile(r"^(\d+)-[0-9a-f]+$")
_STALE_AFTER: Final = 60.0
_KILL_WAIT: Final = 1.0
_MAX_LOCAL: Final = 65536  # not preallocated: costs only what is used

# Protocol numbers and the ``struct bpf_sock_addr`` / ``struct bpf_sock_tuple`` layout
# (include/uapi/linux/bpf.h; offsets checked against the UAPI header with offsetof).
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
_CAP_NET_ADMIN, _CAP_SYS_ADMIN, _CAP_BPF = 12, 21, 39
# rtnetlink (include/uapi/linux/rtnetlink.h, netlink.h)
_RTM_NEWROUTE, _RTM_GETROUTE = 24, 26
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_RTA_DST, _RTA_TABLE = 1, 15
_RT_TABLE_LOCAL = 255
#: RTN_LOCAL, RTN_BROADCAST, RTN_ANYCAST, RTN_MULTICAST: delivered to this host.
_LOCAL_TYPES: Final = frozenset({2, 3, 4, 5})
_SOL_NETLINK, _NETLINK_GET_STRICT_CHK = 270, 12
# The new mount API (same numbers on every architecture).
_FSOPEN, _FSCONFIG, _FSMOUNT = 430, 431, 432
_FSCONFIG_SET_FLAG, _FSCONFIG_CMD_CREATE = 0, 6
_FSMOUNT_CLOEXEC = 0x1
_MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV, _MOUNT_ATTR_NOEXEC = 0x2, 0x4, 0x8
#: Hierarchy-wide cgroup2 options a new mount would reset (kernel/cgroup/cgroup.c).
_ROOT_OPTIONS: Final = frozenset(
    {
        "nsdelegate",
        "favordynmods",
        "memory_localevents",
        "memory_recursiveprot",
        "memory_hugetlb_accounting",
        "pids_localevents",
    }
)


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


# --- local destinations ----------------------------------------------------------------------


def _key(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bytes:
    """The LPM trie key of ``network``: u32 prefix length, then 16 address bytes (IPv4 as
    ``::ffff:a.b.c.d``, the form the programs build for IPv4 destinations)."""
    if isinstance(network, ipaddress.IPv4Network):
        data = b"\0" * 10 + b"\xff\xff" + network.network_address.packed
        return struct.pack("=I", 96 + network.prefixlen) + data
    return struct.pack("=I", network.prefixlen) + network.network_address.packed


def _routes_of(reply: bytes, found: set[str]) -> bool:
    """Collect the local routes in one rtnetlink reply; True once the dump is done."""
    offset = 0
    while offset + 16 <= len(reply):
        length, kind = struct.unpack_from("=IH", reply, offset)
        if length < 16:
            return True
        if kind == _NLMSG_DONE:
            return True
        if kind == _NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", reply, offset + 16)
            if code:
                raise OSError(-code, f"rtnetlink route dump: {os.strerror(-code)}")
            return True
        if kind == _RTM_NEWROUTE:
            family, dst_len, _src, _tos, table, _proto, _scope, rtype = struct.unpack_from(
                "=8B", reply, offset + 16
            )
            position, end = offset + 28, offset + length
            destination = None
            while position + 4 <= end:
                size, attribute = struct.unpack_from("=HH", reply, position)
                if size < 4:
                    break
                payload = reply[position + 4 : position + size]
                if attribute == _RTA_DST:
                    destination = payload
                elif attribute == _RTA_TABLE and len(payload) == 4:
                    (table,) = struct.unpack("=I", payload)
                position += (size + 3) & ~3
            # No RTA_DST is a default route: "everything is local" would end the network.
            if table == _RT_TABLE_LOCAL and rtype in _LOCAL_TYPES and destination is not None:
                address = socket.inet_ntop(family, destination)
                found.add(f"{address}/{dst_len}")
        offset += (length + 3) & ~3
    return False


def local_prefixes() -> set[str]:
    """The prefixes this host delivers locally: ``STATIC_LOCAL`` and the kernel's ``local``
    routing table (rtnetlink, this process's network namespace)."""
    found = set(STATIC_LOCAL)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0) as sock:
        sock.settimeout(5.0)
        try:
            # The kernel then filters by table (4.20+); otherwise the loop below does.
            sock.setsockopt(_SOL_NETLINK, _NETLINK_GET_STRICT_CHK, 1)
        except OSError:
            pass
        sock.bind((0, 0))
        for sequence, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
            request = struct.pack("=8BI", family, 0, 0, 0, _RT_TABLE_LOCAL, 0, 0, 0, 0)
            header = struct.pack(
                "=IHHII",
                16 + len(request),
                _RTM_GETROUTE,
                _NLM_F_REQUEST | _NLM_F_DUMP,
                sequence,
                0,
            )
            sock.send(header + request)
            while not _routes_of(sock.recv(1 << 16), found):
                pass
    return found


# --- the programs ----------------------------------------------------------------------------


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
#: Loaded socket-address programs kept per ``local_ports`` set (a few are common).
_CACHED_PORT_SETS: Final = 16


@dataclass(eq=False)
class _Maps:
    """The daemon's two maps: local prefixes (LPM trie) and socket tags (socket storage)."""

    local: BpfObject
    tags: BpfObject
    btf: BpfObject
    #: The trie's keys now (the trie is only changed through ``sync``).
    present: set[bytes] = field(default_factory=set)

    @classmethod
    def create(cls) -> _Maps:
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
        wanted = {_key(ipaddress.ip_network(p, strict=False)) for p in prefixes}
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


# --- the cgroup2 hierarchy -------------------------------------------------------------------


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _own_cgroup(proc_cgroup: str) -> str | None:
    """The daemon's cgroup-v2 path (``0::PATH``), without the leaf ``cgroups.py`` may have
    moved it into; None when the kernel shows no v2 line (no cgroup2 was ever mounted)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            path = line[3:].removesuffix(" (deleted)")
            return path.removesuffix("/executor-daemon") or "/"
    return None


def _cgroup2_mounts(mountinfo: str) -> list[tuple[str, str, set[str]]]:
    """(mount root, mount point, super options) of every cgroup2 mount."""
    found = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if sep and len(fields) >= 5 and len(rest) >= 3 and rest[0] == "cgroup2":
            found.append((_unescape(fields[3]), _unescape(fields[4]), set(rest[2].split(","))))
    return found


def _below(path: str, root: str) -> str | None:
    """``path`` relative to the mount ``root``, or None when that mount does not show it."""
    if root == "/":
        return path.lstrip("/")
    if path == root:
        return ""
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1 :]
    return None


def _syscall(number: int, *args: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = int(libc.syscall(ctypes.c_long(number), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def _mount_detached(options: Iterable[str] = ()) -> int:
    """A cgroup2 mount attached nowhere (``fsopen``/``fsmount``): its root's fd."""
    context = _syscall(_FSOPEN, b"cgroup2", ctypes.c_uint(0x1))  # FSOPEN_CLOEXEC
    try:
        for option in sorted(options):
            _syscall(_FSCONFIG, context, _FSCONFIG_SET_FLAG, option.encode(), None, 0)
        _syscall(_FSCONFIG, context, _FSCONFIG_CMD_CREATE, None, None, 0)
        flags = _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV | _MOUNT_ATTR_NOEXEC
        return _syscall(_FSMOUNT, context, _FSMOUNT_CLOEXEC, flags)
    finally:
        os.close(context)


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """Where the guard creates cgroups: the daemon's v2 cgroup as a path both the daemon and
    the forked child can open (``/proc/<daemon pid>/fd/<fd>/...`` for a detached mount)."""

    own: str
    #: The detached mount's fd (None: an existing mount is used).
    mount_fd: int | None = None

    @property
    def base(self) -> str:
        """The parent of every cgroup the guard creates."""
        return os.path.join(self.own, BASE_NAME)


def find_hierarchy(*, private: bool = False) -> Hierarchy:
    """The daemon's v2 cgroup through an existing cgroup2 mount, else (or with ``private``)
    through a detached one (``OSError`` when it cannot be made)."""
    mounts = _cgroup2_mounts(_read("/proc/self/mountinfo"))
    own = _own_cgroup(_read("/proc/self/cgroup"))
    if not private and own is not None:
        for root, point, _options in mounts:
            relative = _below(own, root)
            if relative is not None:
                return Hierarchy(os.path.join(point, relative).rstrip("/") or "/")
    # Keep the hierarchy's options as they are if some mount shows them (see the docstring).
    options = set().union(*(o for _r, _p, o in mounts)) & _ROOT_OPTIONS if mounts else set()
    fd = _mount_detached(options)
    own = _own_cgroup(_read("/proc/self/cgroup")) or "/"
    path = os.path.join(f"/proc/{os.getpid()}/fd/{fd}", own.lstrip("/")).rstrip("/")
    return Hierarchy(path, fd)


def _remove(directory: str, wait: float = _KILL_WAIT) -> bool:
    """Kill what is left in ``directory`` and remove it; False if it is still there."""
    deadline = time.monotonic() + wait
    while True:
        try:
            os.rmdir(directory)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                log.warning("cannot remove cgroup %s: %s", directory, exc.strerror)
                return False
        try:
            with open(os.path.join(directory, "cgroup.kill"), "w", encoding="ascii") as handle:
                handle.write("1")
        except OSError:
            pass
        if time.monotonic() >= deadline:
            log.info("cgroup %s still has processes; removed later", directory)
            return False
        time.sleep(0.01)


def _sweep(base: str) -> None:
    """Remove empty guard cgroups that daemons which are gone left behind."""
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        match = _COMMAND_NAME.match(entry.name)
        if match is None or int(match.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(match.group(1)), 0)
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        try:
            if now - entry.stat().st_mtime > _STALE_AFTER:
                os.rmdir(entry.path)  # fails while processes remain: they stay guarded
        except OSError:
            continue


# --- the guard -------------------------------------------------------------------------------


@dataclass(eq=False)
class GuardedCommand:
    """One command's guard: the files its child writes ``0`` to, and the clean-up."""

    #: The cgroup the programs are attached to.
    cgroup: str
    #: Empty when the command joins ``cgroup`` anyway (its limits' v2 cgroup).
    joins: tuple[str, ...]
    _release: Callable[[], None] | None = None
    released: bool = False

    def release(self) -> None:
        """Empty and remove the guard's own cgroup (once); a no-op for a borrowed one."""
        if self.released:
            return
        self.released = True
        if self._release is not None:
            self._release()


class LoopbackGuard:
    """Attaches the loopback hooks to commands' cgroups (one per daemon)."""

    def __init__(self, *, private_mount: bool = False) -> None:
        self._private_mount = private_mount
        self._lock = threading.Lock()
        self._maps: _Maps | None = None
        self._hierarchy: Hierarchy | None = None
        self._key = secrets.token_bytes(32)
        self._pending: list[str] = []
        self._checks: OrderedDict[tuple[int, ...], list[tuple[int, BpfObject]]] = OrderedDict()

    @property
    def hierarchy(self) -> Hierarchy:
        """The cgroup2 hierarchy in use (set up on first use)."""
        with self._lock:
            return self._setup()[1]

    def _setup(self) -> tuple[_Maps, Hierarchy]:
        if self._maps is None:
            self._maps = _Maps.create()
        if self._hierarchy is None:
            hierarchy = find_hierarchy(private=self._private_mount)
            os.makedirs(hierarchy.base, 0o755, exist_ok=True)
            _sweep(hierarchy.base)
            self._hierarchy = hierarchy
        self._pending = [d for d in self._pending if not _remove(d, wait=0.0)]
        return self._maps, self._hierarchy

    def tag(self, scope: str | None) -> int:
        """The scope's tag: the same for every command of a session, never 0."""
        if scope is None:
            raw = secrets.token_bytes(8)
        else:
            raw = hashlib.blake2b(scope.encode(), key=self._key, digest_size=8).digest()
        return int.from_bytes(raw, "little") or 1

    def join(
        self, scope: str | None, local_ports: Iterable[int], joined: Iterable[str] = ()
    ) -> GuardedCommand:
        """Guard one command: ``scope`` its session (None: shares with nobody), ``local_ports``
        the host ports it may reach, ``joined`` the cgroup files its child joins anyway.

        The programs go on the v2 cgroup among ``joined`` if there is one, else on a new
        cgroup the child must join (``GuardedCommand.joins``). ``OSError`` (a
        ``bpf.VerifierError`` with the verifier's log for a refused program) when it cannot
        be done; nothing is left behind then.
        """
        ports = tuple(sorted({int(p) for p in local_ports}))
        if any(not 0 < p < 65536 for p in ports):
            raise ValueError(f"local ports must be 1-65535: {ports}")
        with self._lock:
            maps, hierarchy = self._setup()
            maps.sync(local_prefixes())
            checks = self._checks_for(maps, ports)
        tagger = maps.tagger(self.tag(scope))
        try:
            borrowed = _v2_cgroup(joined, hierarchy)
            directory = borrowed or self._create(hierarchy)
            try:
                _attach_all(directory, tagger + checks)
            except OSError:
                if borrowed is None:
                    _remove(directory)
                raise
        finally:
            for _attach, program in tagger:
                program.close()  # the attachment holds it now
        if borrowed is not None:
            return GuardedCommand(cgroup=directory, joins=())
        return GuardedCommand(
            cgroup=directory,
            joins=(os.path.join(directory, "cgroup.procs"),),
            _release=lambda: self._discard(directory),
        )

    def _checks_for(self, maps: _Maps, ports: tuple[int, ...]) -> list[tuple[int, BpfObject]]:
        """The socket-address programs for ``ports``, loaded once (under the lock)."""
        found = self._checks.get(ports)
        if found is None:
            found = self._checks[ports] = maps.checks(ports)
            while len(self._checks) > _CACHED_PORT_SETS:
                _ports, evicted = self._checks.popitem(last=False)
                for _attach, program in evicted:
                    program.close()  # attachments keep their own references
        self._checks.move_to_end(ports)
        return found

    def _create(self, hierarchy: Hierarchy) -> str:
        directory = os.path.join(hierarchy.base, f"{os.getpid()}-{secrets.token_hex(6)}")
        os.mkdir(directory, 0o755)
        return directory

    def _discard(self, directory: str) -> None:
        if not _remove(directory):
            with self._lock:
                self._pending.append(directory)


def _v2_cgroup(joined: Iterable[str], hierarchy: Hierarchy) -> str | None:
    """The cgroup-v2 directory among the join files ``joined`` (a process is in one v2 cgroup
    only, so the guard must use the one the command's limits put it in)."""
    try:
        device = os.stat(hierarchy.own).st_dev
    except OSError:
        return None
    for join in joined:
        directory = os.path.dirname(join)
        if os.path.basename(join) != "cgroup.procs":
            continue
        try:
            if os.stat(directory).st_dev == device:
                return directory
        except OSError:
            continue
    return None


def _attach_all(directory: str, programs: list[tuple[int, BpfObject]]) -> None:
    """Attach every program to ``directory``, or none of them."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    attached: list[tuple[int, BpfObject]] = []
    try:
        for attach_type, program in programs:
            bpf.attach(fd, program, attach_type)
            attached.append((attach_type, program))
    except OSError:
        for attach_type, program in attached:
            try:
                bpf.detach(fd, program, attach_type)
            except OSError:
                pass
        raise
    finally:
        os.close(fd)


# --- the probe -------------------------------------------------------------------------------


def _capabilities() -> int:
    for line in _read("/proc/self/status").splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


@cache
def loopback_guard_support() -> tuple[bool, str]:
    """Whether this daemon can isolate loopback, and if not why (read-only: maps and
    programs are created and dropped, nothing is attached or mounted)."""
    why = bpf.available()
    if why:
        return False, why
    caps = _capabilities()
    if not caps & (1 << _CAP_NET_ADMIN) or not caps & ((1 << _CAP_BPF) | (1 << _CAP_SYS_ADMIN)):
        return False, (
            "attaching cgroup BPF programs needs CAP_NET_ADMIN and CAP_BPF (or CAP_SYS_ADMIN):"
            " run the daemon as root"
        )
    own = _own_cgroup(_read("/proc/self/cgroup"))
    mounts = _cgroup2_mounts(_read("/proc/self/mountinfo"))
    visible = [
        os.path.join(point, relative)
        for root, point, _o in mounts
        if own is not None and (relative := _below(own, root)) is not None
    ]
    if visible and not os.access(visible[0], os.W_OK):
        return False, f"the daemon's cgroup-v2 cgroup {visible[0]} is not writable"
    if not visible and not caps & (1 << _CAP_SYS_ADMIN):
        return False, "no cgroup2 is mounted, and mounting one needs CAP_SYS_ADMIN"
    try:
        maps = _Maps.create()
    except OSError as exc:
        return False, f"cannot create the BPF maps: {exc}"
    try:
        for _attach, program in maps.tagger(1):
            program.close()
        for _attach, program in maps.checks(()):
            program.close()
    except OSError as exc:
        return False, f"this kernel refuses the loopback hooks: {exc}"
    finally:
        maps.close()
    return True, ""


@cache
def loopback_guard() -> LoopbackGuard:
    """This daemon's guard."""
    return LoopbackGuard()
