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

    monkeypatch.setattr(os, "dup", no_descriptors)
    answer = os.urandom(4 * MiB).hex().encode()

    async def test() -> None:
        messages, _flow = await _exchange(answer)
        assert messages == [b"[" + answer + b"]", b'"after"']

    run(test)


class _Transport:
    """What ``SocketWriter`` uses of a transport, recording it."""

    def __init__(self, buffered: int = 0) -> None:
        self.buffered = buffered
        self.written: list[bytes] = []
        self.closed = False

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


def test_one_buffer_writes_keep_order_and_flow_control_when_the_socket_is_full() -> None:
    """``write_bytes`` (the answer path): what the socket does not take waits, in order, with
    the same pause and resume as ``write``; the transport is closed once all of it is out."""

    async def test() -> None:
        ours, peer = socket.socketpair()
        ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        ours.setblocking(False)
        peer.setblocking(False)
        flow: list[str] = []
        transport = _Transport()
        writer = writes.SocketWriter(
            asyncio.get_running_loop(),
            ours.fileno(),
            transport,  # type: ignore[arg-type]
            high_water=64 * 1024,
            paused=lambda: flow.append("paused"),
            resumed=lambda: flow.append("resumed"),
        )
        chunks = [os.urandom(size) for size in (100_000, 10, 50_000, 1)]
        for chunk in chunks:
            writer.write_bytes(chunk)
        assert writer.pending
        assert flow == ["paused"]
        writer.close_when_written()
        assert not transport.closed
        received = bytearray()
        while len(received) < sum(map(len, chunks)):
            await asyncio.sleep(0.001)
            try:
                received += peer.recv(1 << 20)
            except BlockingIOError:
                pass
        await asyncio.sleep(0.01)
        assert bytes(received) == b"".join(chunks)
        assert flow == ["paused", "resumed"]
        assert (transport.closed, writer.pending) == (True, False)
        assert transport.written == []
        ours.close()
        peer.close()

    run(test)


def test_while_the_transport_holds_bytes_it_writes_the_rest_too() -> None:
    """The upgrade response still in the transport's buffer: answers go after it, through it."""

    async def test() -> None:
        ours, peer = socket.socketpair()
        transport = _Transport(buffered=10)
        writer = writes.SocketWriter(
            asyncio.get_running_loop(),
            ours.fileno(),
            transport,  # type: ignore[arg-type]
            high_water=MiB,
            paused=lambda: None,
            resumed=lambda: None,
        )
        writer.write_bytes(b"one")
        writer.write([b"two", b"three"])
        assert transport.written == [b"one", b"twothree"]
        transport.buffered = 0
        writer.write_bytes(b"four")
        assert peer.recv(100) == b"four"
        ours.close()
        peer.close()

    run(test)
