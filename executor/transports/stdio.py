"""stdio transport: newline-delimited JSON on stdin/stdout, exactly one connection.

stdout carries protocol messages only (logs go to stderr). Empty lines are ignored, ``\\r\\n``
is accepted, a message may arrive in several reads and several messages in one. EOF on stdin
ends the connection, and with it the daemon.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["StdioTransport", "open_stdio"]

#: Longest accepted line, the same bound as a WebSocket message.
MAX_LINE_BYTES = 64 * 1024 * 1024


class _Reader(asyncio.Protocol):
    def __init__(self, owner: StdioTransport) -> None:
        self.owner = owner

    def data_received(self, data: bytes) -> None:
        self.owner.feed(data)

    def eof_received(self) -> bool | None:
        self.owner.end()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.end()


class _Writer(asyncio.Protocol):
    def __init__(self, owner: StdioTransport) -> None:
        self.owner = owner

    def pause_writing(self) -> None:
        if self.owner.connection is not None:
            self.owner.connection.writing_paused()

    def resume_writing(self) -> None:
        if self.owner.connection is not None:
            self.owner.connection.writing_resumed()

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.end()


class StdioTransport:
    """A ``MessageTransport`` over the process's stdin and stdout."""

    peer = "stdio"

    def __init__(self, on_end: Callable[[], None]) -> None:
        self.connection: Any = None
        self._on_end = on_end
        self._buffer = bytearray()
        self._discarding = False
        self._reader: asyncio.ReadTransport | None = None
        self._writer: asyncio.WriteTransport | None = None
        self._ended = False
        self._file_reader: asyncio.Task[None] | None = None
        self._outbox: list[bytes] = []
        self._flush_scheduled = False

    def feed(self, data: bytes) -> None:
        """Split inbound bytes into lines and deliver each complete one."""
        self._buffer += data
        while (end := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            if self._discarding:
                self._discarding = False
                continue
            self._deliver(line)
        if len(self._buffer) > MAX_LINE_BYTES:
            self._buffer.clear()
            self._discarding = True
            if self.connection is not None:
                self.connection.message_rejected("message longer than the 64 MiB line limit")

    def _deliver(self, line: bytes) -> None:
        line = line.rstrip(b"\r")
        if line.strip() and self.connection is not None:
            self.connection.message_received(line)

    def end(self) -> None:
        """stdin or stdout closed: the one connection ends."""
        if self._ended:
            return
        self._ended = True
        if self._buffer.strip() and self.connection is not None:
            self._deliver(bytes(self._buffer))
        if self.connection is not None:
            self.connection.connection_lost()
        self._on_end()

    def send_message(self, data: bytes) -> None:
        """Queue one message line; queued lines are written once per loop iteration."""
        if self._writer is None or self._writer.is_closing():
            return
        self._outbox.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def send_message_parts(self, parts: list[bytes | bytearray | memoryview]) -> None:
        """Queue one message line given as parts."""
        self.send_message(b"".join(parts))

    def _flush(self) -> None:
        self._flush_scheduled = False
        lines, self._outbox = self._outbox, []
        if lines and self._writer is not None and not self._writer.is_closing():
            lines.append(b"")
            self._writer.write(b"\n".join(lines))

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Stop reading; stdout is flushed and closed by the event loop."""
        if self._reader is not None:
            self._reader.close()

    def pause_reading(self) -> None:
        """Stop reading stdin for now."""
        if self._reader is not None:
            self._reader.pause_reading()

    def resume_reading(self) -> None:
        """Read stdin again."""
        if self._reader is not None:
            self._reader.resume_reading()


async def open_stdio(transport: StdioTransport) -> None:
    """Connect ``transport`` to this process's stdin and stdout."""
    loop = asyncio.get_running_loop()
    # A private duplicate of stdout: nothing else in the process may write protocol bytes.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    writer, _ = await loop.connect_write_pipe(lambda: _Writer(transport), out)
    transport._writer = writer
    stdin_mode = os.fstat(sys.stdin.fileno()).st_mode
    if stat.S_ISREG(stdin_mode):
        # Keep a reference: the loop holds tasks only weakly.
        transport._file_reader = loop.create_task(_read_file(transport))
        return
    reader, _ = await loop.connect_read_pipe(
        lambda: _Reader(transport), os.fdopen(os.dup(sys.stdin.fileno()), "rb", buffering=0)
    )
    transport._reader = reader


async def _read_file(transport: StdioTransport) -> None:
    """stdin is a regular file (not pollable): read it in a thread."""
    fd = sys.stdin.fileno()
    while data := await asyncio.to_thread(os.read, fd, 1 << 20):
        transport.feed(data)
    transport.end()
