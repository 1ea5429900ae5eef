"""A thin Landlock layer: the three system calls, rights per ABI, path and port rules (STDLIB ONLY).

Why our own and not the PyPI ``landlock`` package: that package knows filesystem rights only
(no TCP rules of ABI 4, no signal/abstract-socket scoping of ABI 6), leaks ruleset
descriptors, mis-reports errors after an earlier failed call and costs ~27 ms to import.
This module is small, has no dependencies and is loaded inside the launcher's children.

Downgrade is explicit: ``Ruleset.for_abi`` keeps only what the running kernel knows, and the
caller reports what was actually enforced (``enforced_summary``); nothing is silently lost.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterable

from executor_linux import syscalls

__all__ = [
    "ACCESS_FS_READ",
    "FS_RIGHTS_BY_ABI",
    "Ruleset",
    "abi_version",
    "fs_rights",
]

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5 (deliberately not handled: terminals need their ioctls)

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

_V1 = (1 << 13) - 1
#: Filesystem rights the sandbox handles, per ABI (IOCTL_DEV left out on purpose).
FS_RIGHTS_BY_ABI = {1: _V1, 2: _V1 | REFER, 3: _V1 | REFER | TRUNCATE}
#: Rights that make sense on a file (others are EINVAL on a non-directory).
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE
ACCESS_FS_READ = EXECUTE | READ_FILE | READ_DIR

_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2


def abi_version() -> int:
    """The kernel's Landlock ABI, 0 when Landlock is unavailable or disabled."""
    try:
        return int(
            syscalls.syscall(syscalls.NR_LANDLOCK_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
        )
    except OSError:
        return 0


def fs_rights(abi: int) -> int:
    """Filesystem rights handled at ``abi``."""
    return FS_RIGHTS_BY_ABI[min(abi, 3)] if abi >= 1 else 0


class Ruleset:
    """A Landlock ruleset being built; ``restrict_self()`` enforces it on this thread."""

    def __init__(self, fs: int, net: int = 0, scoped: int = 0) -> None:
        self.fs, self.net, self.scoped = fs, net, scoped
        if scoped:
            size = 24
        elif net:
            size = 16
        else:
            size = 8
        attr = struct.pack("=QQQ", fs, net, scoped)[:size]
        buffer = ctypes.create_string_buffer(attr, size)
        self.fd = syscalls.syscall(syscalls.NR_LANDLOCK_CREATE_RULESET, buffer, size, 0)

    def allow_path(self, path: str, rights: int) -> None:
        """Grant ``rights`` on ``path`` and below (file rights only, if it is not a directory)."""
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            if not os.path.isdir(f"/proc/self/fd/{fd}"):
                rights &= FILE_RIGHTS
            rights &= self.fs
            if not rights:
                return
            attr = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd), 12)
            syscalls.syscall(syscalls.NR_LANDLOCK_ADD_RULE, self.fd, _RULE_PATH_BENEATH, attr, 0)
        finally:
            os.close(fd)

    def allow_port(self, port: int, rights: int) -> None:
        """Grant TCP ``rights`` (bind/connect) on ``port``."""
        attr = ctypes.create_string_buffer(struct.pack("=QQ", rights & self.net, port), 16)
        syscalls.syscall(syscalls.NR_LANDLOCK_ADD_RULE, self.fd, _RULE_NET_PORT, attr, 0)

    def restrict_self(self) -> None:
        """Enforce the ruleset on the calling thread (needs no_new_privs or CAP_SYS_ADMIN)."""
        try:
            syscalls.syscall(syscalls.NR_LANDLOCK_RESTRICT_SELF, self.fd, 0)
        finally:
            os.close(self.fd)

    def close(self) -> None:
        """Release the ruleset without enforcing it."""
        os.close(self.fd)


def apply(fs: int, net: int, scoped: int, paths: Iterable[tuple[str, int]]) -> None:
    """Build and enforce a ruleset: handled ``fs``/``net``/``scoped``, with ``paths`` granted."""
    ruleset = Ruleset(fs, net, scoped)
    try:
        for path, rights in paths:
            ruleset.allow_path(path, rights)
    except BaseException:
        ruleset.close()
        raise
    ruleset.restrict_self()
