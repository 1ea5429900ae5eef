"""The parent's end of a command's stdin: buffered non-blocking writes, once per ``writeId``."""

from __future__ import annotations

import asyncio
import os

from executor.protocol.messages import WriteStatus
from executor.write_ids import AcceptedWriteIds

__all__ = ["Stdin"]


class Stdin:
    """What ``process/write`` writes to: a pipe, or the terminal's master side.

    Writes never block the loop: what the pipe does not take now waits in a buffer that an
    event-loop writer drains. A write that fails (the reader is gone) closes stdin for good.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        #: The descriptor, None before ``attach`` and after ``close``.
        self.fd: int | None = None
        self._pending = bytearray()
        self._broken = False
        #: Close once what is buffered is written (``process/write`` ``closeStdin``).
        self._closing = False
        self._write_ids = AcceptedWriteIds()

    def attach(self, fd: int | None) -> None:
        """Write to ``fd`` from now on (None: the command has no stdin to write to)."""
        self.fd = fd
        if fd is not None:
            os.set_blocking(fd, False)

    def write(
        self, data: bytes, write_id: str, *, exited: bool, close: bool = False
    ) -> WriteStatus:
        """Queue ``data``, once per ``write_id``; ``close``: then close the pipe, once
        everything queued is written.

        A repeated id (a client retrying after a reconnect) is ``accepted`` again, even once
        stdin has closed since, and writes nothing: it was accepted the first time.
        """
        if write_id in self._write_ids:
            return WriteStatus.ACCEPTED
        if self.fd is None or self._broken or self._closing or exited:
            return WriteStatus.STDIN_CLOSED
        self._write_ids.remember(write_id)
        was_empty = not self._pending
        self._pending += data
        self._closing = close
        if was_empty:
            self._flush()
        return WriteStatus.ACCEPTED

    def _flush(self) -> None:
        fd = self.fd
        if fd is None:
            return
        while self._pending:
            try:
                written = os.write(fd, self._pending)
            except BlockingIOError:
                self._loop.add_writer(fd, self._flush)
                return
            except OSError:
                self._broken = True
                self._pending.clear()
                break
            del self._pending[:written]
        self._loop.remove_writer(fd)
        if self._closing:
            self.close()

    def close(self, *, still_reading: bool = False) -> None:
        """No more writes; drop what is buffered.

        ``still_reading``: the descriptor is also the output source (a terminal's master),
        so it stays open for reading and is closed with the reader.
        """
        fd, self.fd = self.fd, None
        self._pending.clear()
        if fd is None:
            return
        self._loop.remove_writer(fd)
        if still_reading:
            self.fd = fd
            self._broken = True
            return
        os.close(fd)
