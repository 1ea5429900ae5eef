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
(The programs and maps: ``loopback_programs.py``; the local prefixes: ``local_addresses.py``;
the cgroup2 hierarchy: ``cgroup2.py``.) Five programs are attached to the command's cgroup
(``BPF_F_ALLOW_MULTI``: whatever the cgroup's ancestors run still runs, and every program
must allow):

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

import hashlib
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from typing import Final

from executor_linux import bpf
from executor_linux.bpf import BpfObject
from executor_linux.cgroup2 import (
    Hierarchy,
    cgroup2_mounts,
    find_hierarchy,
    own_cgroup,
    read,
    remove,
    sweep,
)
from executor_linux.cgroups import inside
from executor_linux.local_addresses import local_prefixes
from executor_linux.loopback_programs import GuardMaps

__all__ = ["GuardedCommand", "LoopbackGuard", "loopback_guard", "loopback_guard_support"]

#: Loaded socket-address programs kept per ``local_ports`` set (a few are common).
_CACHED_PORT_SETS: Final = 16
_CAP_NET_ADMIN, _CAP_SYS_ADMIN, _CAP_BPF = 12, 21, 39


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
        self._maps: GuardMaps | None = None
        self._hierarchy: Hierarchy | None = None
        self._key = secrets.token_bytes(32)
        self._pending: list[str] = []
        self._checks: OrderedDict[tuple[int, ...], list[tuple[int, BpfObject]]] = OrderedDict()

    @property
    def hierarchy(self) -> Hierarchy:
        """The cgroup2 hierarchy in use (set up on first use)."""
        with self._lock:
            return self._setup()[1]

    def _setup(self) -> tuple[GuardMaps, Hierarchy]:
        if self._maps is None:
            self._maps = GuardMaps.create()
        if self._hierarchy is None:
            hierarchy = find_hierarchy(private=self._private_mount)
            os.makedirs(hierarchy.base, 0o755, exist_ok=True)
            sweep(hierarchy.base)
            self._hierarchy = hierarchy
        self._pending = [d for d in self._pending if not remove(d, wait=0.0)]
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
        tagger = maps.tagger(self.tag(scope))
        try:
            # Under the lock: the cached checks must not be evicted (closed) mid-attach.
            with self._lock:
                maps.sync(local_prefixes())
                checks = self._checks_for(maps, ports)
                borrowed = _v2_cgroup(joined, hierarchy)
                directory = borrowed or self._create(hierarchy)
                try:
                    _attach_all(directory, tagger + checks)
                except OSError:
                    if borrowed is None:
                        remove(directory)
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

    def _checks_for(self, maps: GuardMaps, ports: tuple[int, ...]) -> list[tuple[int, BpfObject]]:
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
        if not remove(directory):
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
    for line in read("/proc/self/status").splitlines():
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
    own = own_cgroup(read("/proc/self/cgroup"))
    mounts = cgroup2_mounts(read("/proc/self/mountinfo"))
    visible = [
        os.path.join(point, relative)
        for root, point, _o in mounts
        if own is not None and (relative := inside(own, root)) is not None
    ]
    if visible and not os.access(visible[0], os.W_OK):
        return False, f"the daemon's cgroup-v2 cgroup {visible[0]} is not writable"
    if not visible and not caps & (1 << _CAP_SYS_ADMIN):
        return False, "no cgroup2 is mounted, and mounting one needs CAP_SYS_ADMIN"
    try:
        maps = GuardMaps.create()
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
