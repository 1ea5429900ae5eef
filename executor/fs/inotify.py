"""inotify(7) through ``ctypes``: one non-blocking descriptor, read by the asyncio loop.

The standard library has no inotify. This is the whole of what ``fs/watchMissing`` needs:
``inotify_init1``, ``inotify_add_watch``, ``inotify_rm_watch`` and a parser for what
``read(2)`` returns, with the descriptor registered by ``loop.add_reader`` — the kernel wakes
the loop, nothing polls. docs/watch-missing.md says why this and not a library.

Where inotify is missing (macOS, Windows, a libc without the symbols) ``AVAILABLE`` is false
and ``Inotify`` cannot be built; the watch service then answers ``watching: false``.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
import struct
import sys
from collections.abc import Callable
from typing import Final, NamedTuple

__all__ = [
    "AVAILABLE",
    "IN_ATTRIB",
    "IN_CREATE",
    "IN_DELETE",
    "IN_DELETE_SELF",
    "IN_DONT_FOLLOW",
    "IN_IGNORED",
    "IN_MODIFY",
    "IN_MOVED_FROM",
    "IN_MOVED_TO",
    "IN_MOVE_SELF",
    "IN_ONLYDIR",
    "IN_Q_OVERFLOW",
    "IN_UNMOUNT",
    "Event",
    "Inotify",
    "parse_events",
]

IN_MODIFY: Final = 0x00000002
IN_ATTRIB: Final = 0x00000004
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_DELETE_SELF: Final = 0x00000400
IN_MOVE_SELF: Final = 0x00000800
IN_UNMOUNT: Final = 0x00002000
IN_Q_OVERFLOW: Final = 0x00004000
IN_IGNORED: Final = 0x00008000
IN_ONLYDIR: Final = 0x01000000
IN_DONT_FOLLOW: Final = 0x02000000

_IN_NONBLOCK: Final = os.O_NONBLOCK
_IN_CLOEXEC: Final = os.O_CLOEXEC
# struct inotify_event { int wd; uint32_t mask, cookie, len; char name[len]; }
_HEADER: Final = struct.Struct("iIII")
# Room for many events per read; the kernel never splits one event across reads.
_READ_SIZE: Final = 64 * 1024
_READS_PER_WAKEUP: Final = 16


class Event(NamedTuple):
    """One inotify event: the watch it belongs to, what happened, and the child's name."""

    wd: int
    mask: int
    #: The name inside the watched directory (``b""`` for events on the directory itself).
    name: bytes


def parse_events(data: bytes) -> list[Event]:
    """The events in one ``read(2)`` of an inotify descriptor."""
    events = []
    offset, end, unpack = 0, len(data), _HEADER.unpack_from
    size = _HEADER.size
    while offset + size <= end:
        wd, mask, _cookie, length = unpack(data, offset)
        offset += size
        name = data[offset : offset + length].rstrip(b"\0")
        offset += length
        events.append(Event(wd, mask, name))
    return events


def _load() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - a Linux without a loadable libc
        return None
    if not all(
        hasattr(libc, f) for f in ("inotify_init1", "inotify_add_watch", "inotify_rm_watch")
    ):
        return None  # pragma: no cover - a libc without inotify
    libc.inotify_init1.argtypes = (ctypes.c_int,)
    libc.inotify_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
    libc.inotify_rm_watch.argtypes = (ctypes.c_int, ctypes.c_int)
    return libc


_LIBC: Final = _load()
#: Whether this host has inotify (Linux).
AVAILABLE: Final = _LIBC is not None


def _failed(path: str | None = None) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, os.strerror(code), path) if path else OSError(code, os.strerror(code))


class Inotify:
    """One inotify instance whose events are delivered, in batches, on the running loop."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, on_events: Callable[[list[Event]], None]
    ) -> None:
        if _LIBC is None:
            raise OSError(errno.ENOSYS, "inotify is not available on this host")
        fd = _LIBC.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise _failed()
        self.fd: int = fd
        self._loop = loop
        self._on_events = on_events
        loop.add_reader(fd, self._readable)

    def add_watch(self, path: str, mask: int) -> int:
        """Watch ``path`` for ``mask``; the same inode always gets the same descriptor back."""
        assert _LIBC is not None
        wd = int(_LIBC.inotify_add_watch(self.fd, os.fsencode(path), mask))
        if wd < 0:
            raise _failed(path)
        return wd

    def rm_watch(self, wd: int) -> None:
        """Stop watching ``wd``; one the kernel already dropped (directory gone) is fine."""
        assert _LIBC is not None
        if _LIBC.inotify_rm_watch(self.fd, wd) < 0 and ctypes.get_errno() != errno.EINVAL:
            raise _failed()

    def close(self) -> None:
        """Stop reading and close the descriptor (every watch ends with it)."""
        if self.fd < 0:
            return
        self._loop.remove_reader(self.fd)
        os.close(self.fd)
        self.fd = -1

    def _readable(self) -> None:
        # Drain what is queued (a burst must not overflow the kernel's queue while the loop
        # turns), but a bounded amount per wake-up so other callbacks still get their turn.
        for _ in range(_READS_PER_WAKEUP):
            if self.fd < 0:
                return  # closed by a callback of the previous batch
            try:
                data = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                return
            self._on_events(parse_events(data))
