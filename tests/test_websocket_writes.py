"""The WebSocket transport's own write queue, in process: a real socket, a client that does
not read, a connection that records flow control.

What the socket does not take waits in the protocol's ``SocketWriter`` as it was written; the
connection is paused above the high-water mark and resumed once the queue drains below a
quarter of it; the bytes arrive whole and in order; a failed ``dup`` (no descriptors left)
falls back to the transport's own buffer.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import struct
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from executor.transports import writes
from executor.transports.websocket import WebSocketOptions, WebSocketProtocol, serve_websocket
from tests.support.rawws import client_frame

MiB = 1024 * 1024
TEXT = 0x1


class Recorder:
    """The connection side: answers a ``big`` message with a large message given as parts."""

    def __init__(self, protocol: WebSocketProtocol, answer: bytes) -> None:
        self.protocol = protocol
        self.answer = answer
        self.flow: list[str] = []

    def message_received(self, data: bytes | memoryview) -> None:
        self.protocol.send_message_parts([b"[", self.answer, b"]"])
        self.protocol.send_message(b'"after"')

    def writing_paused(self) -> None:
        self.flow.append("paused")

    def writing_resumed(self) -> None:
        self.flow.append("resumed")

    def connection_lost(self) -> None:
        self.flow.append("lost")


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(30):
            await test()

    asyncio.run(bounded())


async def _exchange(answer: bytes) -> tuple[list[bytes], list[str]]:
    """Send one message, let the answer pile up unread, then read every frame."""
    recorders: list[Recorder] = []

    def make(protocol: WebSocketProtocol) -> Recorder:
        recorders.append(Recorder(protocol, answer))
        return recorders[-1]

    server = await serve_websocket("127.0.0.1", 0, make, WebSocketOptions(write_high_water=MiB))
    port = server.sockets[0].getsockname()[1]
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # the kernel holds little
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    await reader.readuntil(b"\r\n\r\n")
    writer.write(client_frame(TEXT, b"big"))
    await asyncio.sleep(0.3)  # the answer fills the socket; the rest waits in the queue
    messages = []
    for _ in range(2):
        first, second = await reader.readexactly(2)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", await reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", await reader.readexactly(8))
        assert first == 0x81
        messages.append(await reader.readexactly(length))
    await asyncio.sleep(0.05)
    flow = recorders[0].flow
    writer.close()
    server.close()
    await server.wait_closed()
    return messages, flow


def test_a_large_answer_waits_whole_and_pauses_then_resumes_the_connection() -> None:
    """16 MiB to a client that reads nothing for a while: paused, then all of it, in order."""
    answer = os.urandom(8 * MiB).hex().encode()

    async def test() -> None:
        messages, flow = await _exchange(answer)
        assert messages == [b"[" + answer + b"]", b'"after"']
        assert flow == ["paused", "resumed"]

    run(test)


def test_without_a_descriptor_to_spare_the_transport_buffers_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``dup`` failing (EMFILE) costs a copy, not the connection or the order."""

    def no_descriptors(fd: int) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(writes.os, "dup", no_descriptors)
    answer = os.urandom(4 * MiB).hex().encode()

    async def test() -> None:
        messages, _flow = await _exchange(answer)
        assert messages == [b"[" + answer + b"]", b'"after"']

    run(test)
