"""Per-command cgroups below the daemon's own (daemon side).

Each sandboxed command gets ``<daemon's cgroup>/executor/<daemon pid>-<random>`` in every
hierarchy that carries a controller its limits need: ``pids`` (``pids.max``: tasks of the
whole tree) and ``memory`` (cgroup v2 ``memory.max`` with ``memory.swap.max = 0``; v1
``memory.limit_in_bytes`` and, when swap is accounted, ``memory.memsw.limit_in_bytes``, so
the cap covers RAM and swap together). The forked child joins them before anything else
(``rlimits.enter``: ``tasks`` on v1, which moves it without waiting for an RCU grace period);
``release`` kills whatever is left in them (``cgroup.kill`` on v2) and removes them
(``cgroup_removal.py``).

Both layouts are found from ``/proc/self/cgroup`` and ``/proc/self/mountinfo``: a controller
bound to a v1 hierarchy is used there (hybrid hosts mount ``pids`` and ``memory`` as v1
beside an empty cgroup2), otherwise the unified hierarchy when the daemon's cgroup offers
it. On v2, controllers reach a child only through the parent's ``cgroup.subtree_control``,
and a cgroup with processes of its own cannot enable them ("no internal processes"): a
daemon in a delegated cgroup (systemd ``Delegate=yes``) moves itself and its launcher into
``<its cgroup>/executor-daemon`` first, as systemd's delegation rules ask.

Probing is read-only (``executor doctor`` must not rearrange anything); the first command
does the set-up. Any failure leaves that command to the rlimit fallback, never unlimited
silently: the enforcement report says what applied.

In the daemon the next launch's set is made ahead (``spare_cgroups.py``).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import secrets
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Final

from executor.sandbox import ResourceLimits
from executor_linux.cgroup_removal import read_text as _read
from executor_linux.cgroup_removal import remove, sweep
from executor_linux.cgroup_removal import write_text as _write
from executor_linux.probe import switched_off
from executor_linux.spare_cgroups import SpareCgroups

__all__ = [
    "CgroupSupport",
    "CommandCgroup",
    "CommandCgroups",
    "Hierarchy",
    "cgroup_support",
    "command_cgroups",
    "discover",
    "inside",
]

log = logging.getLogger("executor.sandbox.linux")

#: The controllers limits use, and the limit each one enforces.
CONTROLLERS: Final = {"pids": "processes", "memory": "memory"}
#: The directory below the daemon's cgroup that holds every command's cgroup.
BASE_NAME: Final = "executor"
#: Where a v2 daemon moves itself so that its cgroup may hand controllers down.
DAEMON_LEAF: Final = "executor-daemon"
#: How the (single-threaded) child joins. Moving a process through ``cgroup.procs`` write-
#: locks a global percpu rwsem and waits for an RCU grace period (~10 ms here, on every
#: launch); v1's ``tasks`` moves the calling thread alone, without that lock. v2 has no such
#: file for ordinary cgroups (``cgroup.threads`` is for threaded ones).
_JOIN: Final = {1: "tasks", 2: "cgroup.procs"}


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """One cgroup hierarchy: its version and the daemon's cgroup directory in it."""

    version: int
    own: str

    @property
    def base(self) -> str:
        """The parent of every command cgroup of this daemon."""
        return os.path.join(self.own, BASE_NAME)


@dataclass(frozen=True, slots=True)
class CgroupSupport:
    """For each controller: the hierarchy that can enforce it here, or why none can."""

    hierarchies: Mapping[str, Hierarchy] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)

    def describe(self, controller: str) -> str:
        """One line for ``executor doctor``."""
        hierarchy = self.hierarchies.get(controller)
        if hierarchy is None:
            return self.reasons.get(controller, "unavailable")
        return f"cgroup v{hierarchy.version}, below {hierarchy.base}"


# --- discovery (pure given the texts) --------------------------------------------------------


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """(fstype, mount root, mount point, super options) of every cgroup mount."""
    found = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        if not sep:
            continue
        fields, rest = head.split(), tail.split()
        if len(fields) < 5 or len(rest) < 3 or rest[0] not in ("cgroup", "cgroup2"):
            continue
        options = set(rest[2].split(","))
        found.append((rest[0], _unescape(fields[3]), _unescape(fields[4]), options))
    return found


def inside(path: str, root: str) -> str | None:
    """``path`` relative to the mount ``root``, or None when the mount does not show it."""
    if root == "/":
        return path.lstrip("/")
    if path == root:
        return ""
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1 :]
    return None


def discover(
    proc_cgroup: str, mountinfo: str, controllers_of: Mapping[str, str] | None = None
) -> CgroupSupport:
    """Where each controller lives for this process.

    ``controllers_of`` maps a v2 directory to the text of its ``cgroup.controllers`` (tests);
    by default the file is read.
    """
    v1_paths: dict[str, str] = {}
    v2_path: str | None = None
    for line in proc_cgroup.splitlines():
        number, _, rest = line.partition(":")
        names, _, path = rest.partition(":")
        if number == "0" and names == "":
            v2_path = path
        else:
            for name in names.split(","):
                v1_paths[name] = path
    hierarchies: dict[str, Hierarchy] = {}
    reasons: dict[str, str] = {}
    mounts = _mounts(mountinfo)
    for controller in CONTROLLERS:
        for fstype, root, point, options in mounts:
            if fstype != "cgroup" or controller not in options or controller not in v1_paths:
                continue
            relative = inside(v1_paths[controller], root)
            if relative is not None:
                hierarchies[controller] = Hierarchy(1, os.path.join(point, relative).rstrip("/"))
                break
    unified = None
    if v2_path is not None:
        for fstype, root, point, _options in mounts:
            relative = inside(v2_path, root) if fstype == "cgroup2" else None
            if relative is not None:
                unified = os.path.join(point, relative).rstrip("/") or "/"
                break
    offered: set[str] = set()
    if unified is not None:
        text = (
            controllers_of.get(unified, "")
            if controllers_of is not None
            else _read(os.path.join(unified, "cgroup.controllers"))
        )
        offered = set(text.split())
    for controller in CONTROLLERS:
        if controller in hierarchies:
            continue
        if unified is not None and controller in offered:
            hierarchies[controller] = Hierarchy(2, unified)
        elif unified is not None:
            reasons[controller] = (
                f"the daemon's cgroup v2 ({unified}) does not offer the {controller} controller"
                " (delegate one to the daemon, e.g. systemd Delegate=yes)"
            )
        else:
            reasons[controller] = f"no {controller} controller is mounted for this process"
    return CgroupSupport(hierarchies, reasons)


def _writable(hierarchy: Hierarchy) -> str:
    """Empty when the daemon may create command cgroups in ``hierarchy``, else why not."""
    target = hierarchy.base if os.path.isdir(hierarchy.base) else hierarchy.own
    if not os.access(target, os.W_OK):
        return (
            f"{target} is not writable here (a read-only mount, or another user's: run the"
            " daemon as root or in a cgroup delegated to it)"
        )
    if hierarchy.version == 2 and not os.path.isdir(hierarchy.base):
        control = os.path.join(hierarchy.own, "cgroup.subtree_control")
        if not os.access(control, os.W_OK):
            return f"{control} is not writable by this user"
    return ""


@cache
def cgroup_support() -> CgroupSupport:
    """What this host offers the daemon (probed once, without changing anything)."""
    reason = switched_off("cgroups")
    if reason:
        return CgroupSupport({}, dict.fromkeys(CONTROLLERS, reason))
    found = discover(_read("/proc/self/cgroup"), _read("/proc/self/mountinfo"))
    hierarchies = dict(found.hierarchies)
    reasons = dict(found.reasons)
    for controller, hierarchy in found.hierarchies.items():
        why = _writable(hierarchy)
        if why:
            del hierarchies[controller]
            reasons[controller] = why
    return CgroupSupport(hierarchies, reasons)


# --- per command -----------------------------------------------------------------------------


@dataclass(eq=False)
class CommandCgroup:
    """The cgroups of one command: the child joins through ``joins``; ``release`` removes
    them."""

    owner: CommandCgroups
    #: Controller -> the command's directory for it (v2: one directory for all).
    directories: dict[str, str]
    #: The files the child writes "0" to, to join: v1 ``tasks``, v2 ``cgroup.procs``.
    joins: tuple[str, ...] = ()
    released: bool = False

    @property
    def controllers(self) -> frozenset[str]:
        """The controllers this command is limited by."""
        return frozenset(self.directories)

    def release(self) -> None:
        """Kill what is left in the cgroups, then remove them (once)."""
        if self.released:
            return
        self.released = True
        self.owner.remove(_unique(self.directories.values()))


def _unique(paths: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(paths))


class CommandCgroups:
    """Creates and removes the command cgroups of one daemon."""

    def __init__(self, support: CgroupSupport, *, spares: bool = True) -> None:
        self.support = support
        self._lock = threading.Lock()
        self._ready: dict[str, bool] = {}
        #: Directories whose removal failed (a process still leaving); retried later.
        self._pending: list[str] = []
        #: The set made ahead for the next launch (only ever with a running event loop).
        self._spares = SpareCgroups(self._make) if spares else None

    def create(self, limits: ResourceLimits) -> CommandCgroup | None:
        """The command cgroups ``limits`` can use here (None: none); ``OSError`` on failure,
        with nothing left behind. A spare made ahead for the same limits is used if there is
        one, and another one made on the event loop's next turn."""
        if not self._wanted(limits):
            return None
        if self._spares is None:
            return self._make(limits)
        group = self._spares.take(limits)
        if group is None:
            group = self._make(limits)
        self._spares.refill_later(limits)
        return group

    def _wanted(self, limits: ResourceLimits) -> dict[str, Hierarchy]:
        return {
            controller: hierarchy
            for controller, hierarchy in self.support.hierarchies.items()
            if getattr(limits, CONTROLLERS[controller]) is not None
        }

    def drop_spare(self) -> None:
        """Remove the spare cgroups (also done at exit)."""
        if self._spares is not None:
            self._spares.drop()

    def _make(self, limits: ResourceLimits) -> CommandCgroup | None:
        wanted = self._wanted(limits)
        if not wanted:
            return None
        name = f"{os.getpid()}-{secrets.token_hex(6)}"
        created: list[str] = []
        directories: dict[str, str] = {}
        joins: list[str] = []
        try:
            for controller, hierarchy in wanted.items():
                directory = os.path.join(hierarchy.base, name)
                if directory not in created:
                    self._prepare(hierarchy)
                    os.mkdir(directory, 0o755)
                    created.append(directory)
                    joins.append(os.path.join(directory, _JOIN[hierarchy.version]))
                _apply(controller, hierarchy.version, directory, limits)
                directories[controller] = directory
        except OSError:
            self.remove(created)
            raise
        return CommandCgroup(self, directories, tuple(joins))

    def _prepare(self, hierarchy: Hierarchy) -> None:
        """Once per hierarchy: the base directory (and v2 delegation), stale cgroups swept."""
        with self._lock:
            self._retry_pending()
            if self._ready.get(hierarchy.base):
                return
            if hierarchy.version == 2:
                offered = self.support.hierarchies.items()
                _delegate(hierarchy, sorted(c for c, h in offered if h == hierarchy))
            else:
                os.makedirs(hierarchy.base, 0o755, exist_ok=True)
            sweep(hierarchy.base)
            self._ready[hierarchy.base] = True

    def remove(self, directories: Iterable[str]) -> None:
        """Kill every process left in ``directories`` and remove them."""
        for directory in directories:
            if not remove(directory):
                with self._lock:
                    self._pending.append(directory)

    def _retry_pending(self) -> None:
        self._pending = [d for d in self._pending if not remove(d, wait=0.0)]


def _apply(controller: str, version: int, directory: str, limits: ResourceLimits) -> None:
    if controller == "pids":
        _write(os.path.join(directory, "pids.max"), str(limits.processes))
        return
    memory = str(limits.memory)
    if version == 2:
        _write(os.path.join(directory, "memory.max"), memory)
        swap = os.path.join(directory, "memory.swap.max")
        if os.path.exists(swap):  # absent without swap accounting: there is no swap to cap
            _write(swap, "0")
        return
    _write(os.path.join(directory, "memory.limit_in_bytes"), memory)
    memsw = os.path.join(directory, "memory.memsw.limit_in_bytes")
    if os.path.exists(memsw):
        _write(memsw, memory)


def _delegate(hierarchy: Hierarchy, controllers: list[str]) -> None:
    """Make ``controllers`` reach the command cgroups below ``hierarchy.base`` (cgroup v2)."""
    enable = " ".join(f"+{c}" for c in controllers)
    own_control = os.path.join(hierarchy.own, "cgroup.subtree_control")
    if not set(controllers) <= set(_read(own_control).split()):
        try:
            _write(own_control, enable)
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                raise
            # Processes of our own live here: move them into a leaf, then hand controllers down.
            _move_ourselves(hierarchy.own)
            _write(own_control, enable)
    os.makedirs(hierarchy.base, 0o755, exist_ok=True)
    base_control = os.path.join(hierarchy.base, "cgroup.subtree_control")
    if not set(controllers) <= set(_read(base_control).split()):
        _write(base_control, enable)


def _move_ourselves(own: str) -> None:
    """Move this daemon and its descendants (the launcher servers) out of ``own`` into a leaf.

    Other processes are never moved: if any remain, enabling controllers fails and commands
    fall back to rlimits.
    """
    leaf = os.path.join(own, DAEMON_LEAF)
    os.makedirs(leaf, 0o755, exist_ok=True)
    ours = _descendants_and_self()
    for text in _read(os.path.join(own, "cgroup.procs")).split():
        pid = int(text)
        if pid in ours:
            try:
                _write(os.path.join(leaf, "cgroup.procs"), str(pid))
            except ProcessLookupError:
                continue


def _descendants_and_self() -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read(f"/proc/{entry}/stat")
            fields = stat[stat.rfind(")") + 2 :].split()
            if len(fields) > 1:
                parents[int(entry)] = int(fields[1])
    ours = {os.getpid()}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in ours and pid not in ours:
                ours.add(pid)
                grew = True
    return ours


@cache
def command_cgroups() -> CommandCgroups:
    """This daemon's command cgroups."""
    return CommandCgroups(cgroup_support())
