"""The cgroup-v2 hierarchy the loopback guard creates command cgroups in (daemon side).

An existing ``cgroup2`` mount the daemon sees is used; without one the hierarchy is mounted
*detached* (``fsopen``/``fsmount``), reached through ``/proc/<daemon pid>/fd/<fd>``
(``loopback_guard.py`` says what that does to the host).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from executor_linux.cgroup_removal import read_text as read
from executor_linux.cgroup_removal import remove, sweep
from executor_linux.cgroups import inside

__all__ = [
    "BASE_NAME",
    "Hierarchy",
    "cgroup2_mounts",
    "find_hierarchy",
    "own_cgroup",
    "read",
    "remove",
    "sweep",
]

log = logging.getLogger("executor.sandbox.linux")

#: The parent, below the daemon's cgroup-v2 cgroup, of the cgroups the guard creates.
BASE_NAME: Final = "executor-net"
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


def _unescape(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def own_cgroup(proc_cgroup: str) -> str | None:
    """The daemon's cgroup-v2 path (``0::PATH``), without the leaf ``cgroups.py`` may have
    moved it into; None when the kernel shows no v2 line (no cgroup2 was ever mounted)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            path = line[3:].removesuffix(" (deleted)")
            return path.removesuffix("/executor-daemon") or "/"
    return None


def cgroup2_mounts(mountinfo: str) -> list[tuple[str, str, set[str]]]:
    """(mount root, mount point, super options) of every cgroup2 mount."""
    found = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if sep and len(fields) >= 5 and len(rest) >= 3 and rest[0] == "cgroup2":
            found.append((_unescape(fields[3]), _unescape(fields[4]), set(rest[2].split(","))))
    return found


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
    mounts = cgroup2_mounts(read("/proc/self/mountinfo"))
    own = own_cgroup(read("/proc/self/cgroup"))
    if not private and own is not None:
        for root, point, _options in mounts:
            relative = inside(own, root)
            if relative is not None:
                return Hierarchy(os.path.join(point, relative).rstrip("/") or "/")
    # Keep the hierarchy's options as they are if some mount shows them (see the docstring).
    options = set().union(*(o for _r, _p, o in mounts)) & _ROOT_OPTIONS if mounts else set()
    fd = _mount_detached(options)
    own = own_cgroup(read("/proc/self/cgroup")) or "/"
    path = os.path.join(f"/proc/{os.getpid()}/fd/{fd}", own.lstrip("/")).rstrip("/")
    return Hierarchy(path, fd)
