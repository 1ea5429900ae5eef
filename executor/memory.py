"""Give memory freed by ended sessions back to the operating system; where large buffers live.

Output floods allocate many 64-128 KiB buffers (pipe reads, base64, frames) from the C heap.
Once a session and its retained output are gone, Python has freed them, but glibc keeps the
free pages of a fragmented heap mapped: measured, a daemon that served 200 flooding sessions
stayed at 220 MiB with every Python object of those sessions freed (idle: 33 MiB).
``malloc_trim(0)`` hands those pages back (the same daemon: 33 MiB again). Tuning glibc
instead (``M_MMAP_THRESHOLD``, ``M_TRIM_THRESHOLD``, one arena) was measured and did not help:
the free pages lie between live allocations, where only a trim's ``madvise`` reaches them.

A trim walks the whole heap (11-70 ms measured on that 220 MiB heap, well under 1 ms on an
idle one), so requests are coalesced: a trim runs a moment after a request, at most one every
``interval`` seconds, and requests made until it runs share it (a burst of expiring sessions
costs one trim).

The module also decides where large buffers live, for speed rather than reclaiming: with
``keep_large_buffers`` the heap serves and keeps buffers of up to 64 MiB instead of mapping
each afresh (the trims above still return what is free), and ``huge_buffer`` gives the
largest ones (a whole file's base64, a large inbound frame) a mapping of their own in huge
pages, unmapped when released.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["MemoryReclaimer", "huge_buffer", "keep_large_buffers", "release_free_memory"]

log = logging.getLogger("executor.memory")


def _load_malloc_trim() -> Callable[[int], int] | None:
    # glibc only: musl and macOS have no malloc_trim (their allocators return memory anyway).
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_malloc_trim = _load_malloc_trim()

#: ``mallopt`` parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: See ``keep_large_buffers``.
LARGE_BUFFER_BYTES = 64 * 1024 * 1024


def keep_large_buffers(limit: int = LARGE_BUFFER_BYTES) -> bool:
    """Serve allocations of up to ``limit`` bytes from the heap, and keep up to ``limit``
    bytes of free heap for the next ones; False where glibc's ``mallopt`` is missing.

    By default glibc maps every allocation above a (moving) threshold of at most 32 MiB
    afresh and unmaps it when freed: a large message's parsed text and decoded bytes
    (a 16 MiB ``fs/writeFile``: ~30 MB) were faulted in page by page each time, ~4,000
    faults per 16 MiB (measured: 221 -> 130 ms per such message). The retained free heap
    is bounded by ``limit`` (glibc's own dynamic ceiling is 64 MiB too), and the trims of
    ``MemoryReclaimer`` still hand it back when sessions and processes end.
    """
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, limit) and mallopt(_M_TRIM_THRESHOLD, limit))


def release_free_memory() -> bool:
    """Return the C heap's free pages to the system; False where that is not possible."""
    if _malloc_trim is None:
        return False
    _malloc_trim(0)
    return True


class _Scheduler(Protocol):
    def call_later(self, delay: float, callback: Callable[[], None]) -> object:
        """Run ``callback`` after ``delay`` seconds (``asyncio`` loops fit)."""


class MemoryReclaimer:
    """Coalesced ``release_free_memory`` calls after large frees (session expiry, reaping)."""

    def __init__(
        self,
        loop: _Scheduler,
        *,
        delay: float = 0.2,
        interval: float = 2.0,
        release: Callable[[], bool] = release_free_memory,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._loop = loop
        self._delay = delay
        self._interval = interval
        self._release = release
        self._clock = clock
        self._pending = False
        self._last = float("-inf")
        #: Trims done so far (for tests and diagnostics).
        self.count = 0

    def request(self) -> None:
        """Something large was freed: trim soon, once for a whole burst of requests."""
        if self._pending:
            return
        self._pending = True
        wait = max(self._delay, self._last + self._interval - self._clock())
        self._loop.call_later(wait, self._run)

    def _run(self) -> None:
        self._pending = False
        started = self._clock()
        self._last = started
        if self._release():
            self.count += 1
            took = 1000 * (self._clock() - started)
            log.debug("returned free heap pages to the system in %.1f ms", took)


def huge_buffer(size: int) -> mmap.mmap:
    """A private anonymous mapping of ``size`` bytes (> 0), backed by huge pages where it can be.

    For buffers of many MiB (a whole file's base64, a large inbound frame): filling 90 MB of
    fresh heap takes ~22,000 page faults (~100 ms on a VM), in 2 MiB pages ~45. The memory
    goes back to the system as soon as the mapping is released, with no trim.
    """
    buffer = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        try:
            buffer.madvise(advice)
        except OSError:  # no transparent huge pages here: small pages, as malloc's
            pass
    return buffer
