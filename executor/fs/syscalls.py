"""The two Linux system calls the standard library does not expose: ``openat2`` and ``statx``.

``openat2(2)`` resolves a whole path in the kernel under constraints (``RESOLVE_BENEATH``,
``RESOLVE_NO_SYMLINKS``, ``RESOLVE_NO_MAGICLINKS``); the sandboxed resolver uses it as its
fast path. ``statx(2)`` is the only way to learn a file's birth time on Linux. Both are
called through ``ctypes``; where a call is unavailable (another OS, an old kernel, a seccomp
filter answering ``ENOSYS``/``EPERM``) the callers fall back to portable code.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import sys
from typing import Final

__all__ = [
    "DISABLE_OPENAT2_ENV",
    "RESOLVE_BENEATH",
    "RESOLVE_NO_MAGICLINKS",
    "RESOLVE_NO_SYMLINKS",
    "birth_time_ns",
    "openat2",
    "openat2_supported",
]

RESOLVE_NO_XDEV: Final = 0x01
RESOLVE_NO_MAGICLINKS: Final = 0x02
RESOLVE_NO_SYMLINKS: Final = 0x04
RESOLVE_BENEATH: Final = 0x08

# openat2 has the same number on every architecture with the unified syscall table (5.6+).
_OPENAT2_MACHINES: Final = frozenset(
    {"x86_64", "amd64", "aarch64", "arm64", "riscv64", "ppc64le", "s390x", "i686", "armv7l"}
)
_SYS_OPENAT2: Final = 437
_STATX_BTIME: Final = 0x800
_AT_STATX_SYNC_AS_STAT: Final = 0x0000
_AT_SYMLINK_NOFOLLOW: Final = 0x100
_AT_EMPTY_PATH: Final = 0x1000
# struct statx: stx_mask at 0, stx_btime (struct statx_timestamp {s64 sec; u32 nsec}) at 80.
_STATX_SIZE: Final = 256
_BTIME_OFFSET: Final = 80


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - a Linux without a loadable libc
        return None


_LIBC: Final = _load_libc()


def openat2(dir_fd: int, path: str, flags: int, resolve: int, mode: int = 0) -> int:
    """``openat2(dir_fd, path, {flags, mode, resolve})``; raises ``OSError`` like ``os.open``."""
    if _LIBC is None or platform.machine().lower() not in _OPENAT2_MACHINES:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    result = _LIBC.syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return int(result)


#: Set (to anything but ``0``) to make the resolver use its portable walk only (tests, or a
#: host where ``openat2`` misbehaves).
DISABLE_OPENAT2_ENV: Final = "EXECUTOR_FS_NO_OPENAT2"


@functools.cache
def openat2_supported() -> bool:
    """Whether ``openat2`` works here (probed once: kernel ≥ 5.6 and not filtered)."""
    if os.environ.get(DISABLE_OPENAT2_ENV, "0") not in ("", "0"):
        return False
    try:
        fd = openat2(-100, "/", os.O_PATH | os.O_DIRECTORY, RESOLVE_NO_MAGICLINKS)
    except OSError:
        return False
    os.close(fd)
    return True


def birth_time_ns(dir_fd: int, name: str, *, follow_symlinks: bool) -> int | None:
    """The birth time of ``name`` in ``dir_fd`` in ns, or None where the filesystem has none."""
    statx = getattr(_LIBC, "statx", None)
    if statx is None:
        return None
    buffer = ctypes.create_string_buffer(_STATX_SIZE)
    flags = _AT_STATX_SYNC_AS_STAT | (0 if follow_symlinks else _AT_SYMLINK_NOFOLLOW)
    if not name:
        flags |= _AT_EMPTY_PATH
    result = statx(
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(name)),
        ctypes.c_int(flags),
        ctypes.c_uint(_STATX_BTIME),
        buffer,
    )
    if result != 0:
        return None
    mask = int.from_bytes(buffer.raw[0:4], sys.byteorder)
    if not mask & _STATX_BTIME:
        return None
    seconds = int.from_bytes(
        buffer.raw[_BTIME_OFFSET : _BTIME_OFFSET + 8], sys.byteorder, signed=True
    )
    nanos = int.from_bytes(buffer.raw[_BTIME_OFFSET + 8 : _BTIME_OFFSET + 12], sys.byteorder)
    return seconds * 1_000_000_000 + nanos
