"""Writing a socket's outgoing buffers without copying them: ``SocketWriter``.

A transport of Python 3.11's asyncio copies whatever a socket does not take at once: it
joins the buffers, then appends them to a ``bytearray`` (a 90 MB ``fs/readFile`` answer:
two more copies, ~0.5 s of page faults). Here the buffers go out with one ``writev``; what
the socket does not take waits, as it was given (a view of what is left of a partly written
one), until the socket is writable again. That is watched on a duplicate of the socket's
descriptor, made only while anything waits: asyncio lets no one else watch the descriptor
its transport owns. The writer pauses its producer above a high-water mark and resumes it
below a quarter of it, as a transport's flow control does.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
from collections.abc import Callable

__all__ = ["Buffer", "SocketWriter", "coalesce"]

Buffer = bytes | bytearray | memoryview

#: Payloads at least this large are written as their own buffer rather than copied into a
#: joined one (the copy would cost more than the extra iovec).
JOIN_LIMIT = 16 * 1024
#: At most this many buffers in one ``writev`` (Linux's ``IOV_MAX``).
_IOV_MAX = 1024


class SocketWriter:
    """The outgoing side of one connected, non-blocking socket (see the module docstring).

    ``transport`` owns the socket: it is closed through it once everything is written
    (``close_when_written``), aborted when writing fails, and it buffers (copying) in the
    one case the writer cannot watch the socket itself (no descriptor left to duplicate).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fd: int,
        transport: asyncio.Transport,
        *,
        high_water: int,
        paused: Callable[[], None],
        resumed: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._fd = fd
        self._transport = transport
        self._high_water = high_water
        self._paused_callback = paused
        self._resumed_callback = resumed
        self._pending: collections.deque[Buffer] = collections.deque()
        self._pending_bytes = 0
        self._watch_fd = -1
        self._paused = False
        self._close_when_written = False

    @property
    def pending(self) -> bool:
        """Whether anything waits for the socket."""
        return bool(self._pending)

    def write(self, parts: list[Buffer]) -> None:
        """Write ``parts`` in order, after anything still waiting."""
        if self._pending:
            self._enqueue(parts)
            return
        if self._transport.get_write_buffer_size():
            # The transport still holds bytes (the upgrade response, or what it took when
            # no descriptor was left to watch): it writes, and buffers, in order.
            self._transport.write(b"".join(parts))
            return
        sent = _writev(self._fd, parts)
        if sent < 0:
            self._failed()
        elif len(parts) > 1 or sent < len(parts[0]):  # else all of it went out
            self._enqueue(parts, sent)

    def write_bytes(self, data: bytes) -> None:
        """``write([data])`` for the commonest case, one small buffer (e.g. an answer).

        One ``write`` and no list: this is on the way from a request to its answer.
        """
        if self._pending:
            self._enqueue([data])
            return
        if self._transport.get_write_buffer_size():  # as in ``write``
            self._transport.write(data)
            return
        try:
            sent = os.write(self._fd, data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._failed()
            return
        if sent < len(data):
            self._enqueue([data], sent)

    def close_when_written(self) -> None:
        """Close the transport now, or once what waits is written."""
        if self._pending:
            self._close_when_written = True
        else:
            self._transport.close()

    def stop(self) -> None:
        """The connection is gone: drop what waits, stop watching the socket."""
        self._pending.clear()
        self._pending_bytes = 0
        self._stop_watching()

    def _enqueue(self, parts: list[Buffer], sent: int = 0) -> None:
        """Queue ``parts`` less the first ``sent`` bytes; watch the socket; pause producers."""
        pending = self._pending
        for part in parts:
            size = len(part)
            if sent >= size:
                sent -= size
                continue
            pending.append(memoryview(part)[sent:] if sent else part)
            self._pending_bytes += size - sent
            sent = 0
        if not pending:
            return
        if self._watch_fd < 0:
            try:
                self._watch_fd = os.dup(self._fd)
            except OSError:  # out of descriptors: the transport buffers it (a copy), in order
                self._transport.write(b"".join(pending))
                self.stop()
                return
            self._loop.add_writer(self._watch_fd, self._write_ready)
        if self._pending_bytes > self._high_water and not self._paused:
            self._paused = True
            self._paused_callback()

    def _write_ready(self) -> None:
        """The socket takes more: write what waits (at most ``_IOV_MAX`` buffers a call)."""
        pending = self._pending
        while pending:
            parts = list(itertools.islice(pending, _IOV_MAX))
            sent = _writev(self._watch_fd, parts)
            if sent < 0:
                self._failed()
                return
            self._pending_bytes -= sent
            for part in parts:
                size = len(part)
                if sent < size:
                    if sent:
                        pending[0] = memoryview(part)[sent:]
                    break
                sent -= size
                pending.popleft()
            else:
                continue  # every buffer went out: there may be more
            break  # the socket is full
        if self._paused and self._pending_bytes <= self._high_water // 4:
            self._paused = False
            self._resumed_callback()
        if not pending:
            self._stop_watching()
            if self._close_when_written:
                self._transport.close()

    def _failed(self) -> None:
        """Writing failed (the peer is gone): drop what waits; the transport ends."""
        self.stop()
        self._transport.abort()

    def _stop_watching(self) -> None:
        if self._watch_fd >= 0:
            self._loop.remove_writer(self._watch_fd)
            os.close(self._watch_fd)
            self._watch_fd = -1


def coalesce(parts: list[Buffer]) -> list[Buffer]:
    """Join small neighbours so the kernel gets few, large buffers; big payloads stay as is."""
    out: list[Buffer] = []
    small: list[Buffer] = []
    for part in parts:
        if len(part) >= JOIN_LIMIT:
            if small:
                out.append(b"".join(small))
                small = []
            out.append(part)
        else:
            small.append(part)
    if small:
        out.append(b"".join(small))
    return out


def _writev(fd: int, parts: list[Buffer]) -> int:
    """Write ``parts`` to the non-blocking ``fd`` in one ``writev``: bytes taken, -1 on error."""
    try:
        return os.writev(fd, parts)
    except (BlockingIOError, InterruptedError):
        return 0
    except OSError:
        return -1
