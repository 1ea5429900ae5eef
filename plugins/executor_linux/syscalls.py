"""Raw Linux system calls the sandbox needs, through ctypes (STDLIB ONLY).

Loaded both by the daemon (probing) and, by path, inside the launcher server's forked
children, so it must not import anything outside the standard library.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

__all__ = [
    "AT_RECURSIVE",
    "CLONE_NEWIPC",
    "CLONE_NEWNET",
    "CLONE_NEWNS",
    "CLONE_NEWPID",
    "CLONE_NEWUSER",
    "MOUNT_ATTR_RDONLY",
    "drop_capabilities",
    "load_seccomp",
    "mount",
    "mount_setattr",
    "set_no_new_privs",
    "setns",
    "syscall",
    "unshare",
]

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000

MOUNT_ATTR_RDONLY = 0x1
AT_FDCWD = -100
AT_RECURSIVE = 0x8000

PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECCOMP = 22
PR_SET_SECUREBITS = 28
SECCOMP_MODE_FILTER = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# Syscall numbers that glibc does not wrap. The Landlock and mount_setattr numbers come from
# the unified table (identical on x86_64 and aarch64).
NR_MOUNT_SETATTR = 442
NR_LANDLOCK_CREATE_RULESET = 444
NR_LANDLOCK_ADD_RULE = 445
NR_LANDLOCK_RESTRICT_SELF = 446
NR_OPENAT2 = 437
NR_SECCOMP = {"x86_64": 317, "aarch64": 277}.get(platform.machine(), -1)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _check(result: int) -> int:
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return result


def syscall(number: int, *args: object) -> int:
    """``syscall(2)``; raises ``OSError`` on failure."""
    return _check(_libc.syscall(number, *args))


def unshare(flags: int) -> None:
    """``unshare(2)``."""
    _check(_libc.unshare(flags))


def setns(fd: int, nstype: int) -> None:
    """``setns(2)``: join the namespace ``fd`` refers to (of kind ``nstype``)."""
    _check(_libc.setns(fd, nstype))


def mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    """``mount(2)``."""
    enc = os.fsencode
    _check(
        _libc.mount(
            enc(source) if source is not None else None,
            enc(target),
            enc(fstype) if fstype is not None else None,
            ctypes.c_ulong(flags),
            enc(data) if data is not None else None,
        )
    )


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def mount_setattr(
    path: str, *, set_flags: int = 0, clear_flags: int = 0, recursive: bool = False
) -> None:
    """``mount_setattr(2)`` on the mount at ``path`` (Linux 5.12+)."""
    attr = _MountAttr(set_flags, clear_flags, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    syscall(
        NR_MOUNT_SETATTR,
        AT_FDCWD,
        os.fsencode(path),
        flags,
        ctypes.byref(attr),
        ctypes.sizeof(attr),
    )


def set_no_new_privs() -> None:
    """No later ``execve`` can gain privileges (set-user-ID, file capabilities)."""
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))


def _last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as handle:
            return int(handle.read())
    except OSError:
        return 40


def drop_capabilities() -> None:
    """Empty the bounding, ambient, effective, permitted and inheritable capability sets."""
    for cap in range(_last_capability() + 1):
        result = _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
        if result < 0 and ctypes.get_errno() != 22:  # EINVAL: unknown to this kernel
            _check(result)
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = struct.pack("=Ii", _LINUX_CAPABILITY_VERSION_3, 0)
    data = bytes(24)  # two empty __user_cap_data_struct (effective, permitted, inheritable)
    _check(_libc.capset(ctypes.c_char_p(header), ctypes.c_char_p(data)))


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_seccomp(program: bytes) -> None:
    """Install a raw classic-BPF seccomp program (an array of 8-byte ``sock_filter``)."""
    if len(program) % 8:
        raise OSError(22, "seccomp program size is not a multiple of 8")
    buffer = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0))


def write_file(path: str, text: str) -> None:
    """Write ``text`` to a (proc) file in one ``write``."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
