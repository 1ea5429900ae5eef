"""File handles of ``fs/open``: client-chosen ids, owned by one connection.

A handle is reserved (id checked, cap counted) in the event loop the moment its ``fs/open``
is dispatched, and every later operation on it takes its *turn*: operations on one handle
run one after the other in arrival order, as the reference (one request at a time) runs them,
so a ``fs/readBlock`` or ``fs/close`` pipelined right behind an open sees the opened file.

The descriptor is attached by the worker thread that opened the file and closed exactly once:
by ``fs/close``, a failed read, or the end of the connection, and never while a worker thread
still uses it (the last user closes it). Nothing leaks if the connection goes away while a
file is being opened: the late descriptor is closed on arrival.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Final

from executor.errors import InvalidRequest, NotFound
from executor.fs.files import write_all
from executor.protocol.fs_messages import OpenMode

__all__ = ["DEFAULT_MAX_HANDLES", "Handle", "HandleTable", "unknown_handle"]

#: The reference's cap on open handles per connection.
DEFAULT_MAX_HANDLES: Final = 128


def unknown_handle(handle_id: str) -> NotFound:
    """The reference's wording for a handle that is not open on this connection."""
    return NotFound(f"unknown file handle `{handle_id}`")


class Handle:
    """One open file; its descriptor is closed when closed *and* no thread is using it."""

    def __init__(self, handle_id: str, mode: OpenMode) -> None:
        self.handle_id = handle_id
        self.mode = mode
        self._tail: asyncio.Future[None] | None = None
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._users = 0
        self._closed = False

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for every operation on this handle that arrived earlier, then run.

        The place in line is taken when this is entered, before anything is awaited.
        """
        previous = self._tail
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._tail = mine
        try:
            if previous is not None and not previous.done():
                await asyncio.wait([previous])  # never cancels ``previous``
            yield
        finally:
            mine.set_result(None)
            if self._tail is mine:
                self._tail = None

    @property
    def closed(self) -> bool:
        """Closed (or about to be, once its last user is done)."""
        return self._closed

    def attach(self, fd: int) -> None:
        """Give the handle its descriptor (closed at once if the handle was closed meanwhile)."""
        with self._lock:
            if not self._closed:
                self._fd = fd
                return
        os.close(fd)

    def close(self) -> None:
        """Close the handle; idempotent."""
        with self._lock:
            self._closed = True
            fd = self._take_idle_fd()
        if fd is not None:
            os.close(fd)

    def _take_idle_fd(self) -> int | None:
        if self._users or self._fd is None:
            return None
        fd, self._fd = self._fd, None
        return fd

    @contextmanager
    def use(self) -> Iterator[int]:
        """The descriptor, held open for the duration (any thread)."""
        with self._lock:
            if self._closed or self._fd is None:
                raise unknown_handle(self.handle_id)
            self._users += 1
            fd = self._fd
        try:
            yield fd
        finally:
            self._release()

    def _release(self) -> None:
        with self._lock:
            self._users -= 1
            idle = self._take_idle_fd() if self._closed else None
        if idle is not None:
            os.close(idle)

    def read(self, length: int, offset: int) -> bytes:
        """Positional read of up to ``length`` bytes."""
        with self.use() as fd:
            try:
                return os.pread(fd, length, offset)
            except OverflowError:
                # Offsets beyond the signed 64-bit range: what the kernel says for them.
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL)) from None

    def write(self, data: bytes, offset: int) -> None:
        """Positional write of all of ``data``."""
        with self.use() as fd:
            write_all(fd, data, offset)


class HandleTable:
    """The open handles of one connection (lives in the connection's scope)."""

    def __init__(self, limit: int = DEFAULT_MAX_HANDLES) -> None:
        self.limit = limit
        self._handles: dict[str, Handle] = {}

    def __len__(self) -> int:
        return len(self._handles)

    def reserve(self, handle_id: str, mode: OpenMode) -> Handle:
        """Claim ``handle_id`` for a file about to be opened."""
        if handle_id in self._handles:
            raise InvalidRequest(f"file handle `{handle_id}` already exists")
        if len(self._handles) >= self.limit:
            raise InvalidRequest(f"at most {self.limit} file handles may be open per connection")
        handle = self._handles[handle_id] = Handle(handle_id, mode)
        return handle

    def get(self, handle_id: str) -> Handle:
        """The handle called ``handle_id`` (``-32004`` if there is none)."""
        handle = self._handles.get(handle_id)
        if handle is None:
            raise unknown_handle(handle_id)
        return handle

    def discard(self, handle: Handle) -> None:
        """Close ``handle`` and forget it (if it is still the one under its id)."""
        self.forget(handle)
        handle.close()

    def forget(self, handle: Handle) -> None:
        """Take ``handle`` out of the table (later requests do not see it); it stays open."""
        if self._handles.get(handle.handle_id) is handle:
            del self._handles[handle.handle_id]

    def pop(self, handle_id: str) -> Handle | None:
        """Take ``handle_id`` out of the table, if it is there."""
        return self._handles.pop(handle_id, None)

    def close(self) -> None:
        """The connection ended: close everything."""
        handles, self._handles = self._handles, {}
        for handle in handles.values():
            handle.close()
