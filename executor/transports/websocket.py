"""WebSocket transport: HTTP routing, the upgrade, frames, keepalive; one message = one JSON object.

A thin ``asyncio.Protocol`` around websockets' sans-I/O frame protocol. It knows nothing of
JSON-RPC: complete messages go to the ``Connection`` it was created with, and the connection
hands back encoded messages to send. Flow control runs both ways: the connection can pause
reading, and the socket's write buffer pausing is reported to the connection as congestion.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol as TypingProtocol

from websockets.frames import Opcode
from websockets.protocol import Protocol, Side, State

from executor.transports import handshake

__all__ = ["ConnectionCallbacks", "WebSocketOptions", "WebSocketProtocol", "serve_websocket"]

log = logging.getLogger("executor.websocket")


@dataclass(frozen=True, slots=True, kw_only=True)
class WebSocketOptions:
    """Limits and timers of the WebSocket listener (defaults follow the reference)."""

    max_frame_bytes: int = 16 * 1024 * 1024
    max_message_bytes: int = 64 * 1024 * 1024 - 1
    ping_interval: float = 10.0
    ping_timeout: float = 10.0
    close_timeout: float = 2.0
    handshake_timeout: float = 10.0
    write_high_water: int = 1024 * 1024


class ConnectionCallbacks(TypingProtocol):
    """What the transport drives: the JSON-RPC connection."""

    def message_received(self, data: bytes) -> None:
        """One complete inbound message."""

    def writing_paused(self) -> None:
        """The socket's write buffer is above its high-water mark."""

    def writing_resumed(self) -> None:
        """The socket's write buffer drained."""

    def connection_lost(self) -> None:
        """The transport is gone."""


ConnectionFactory = Callable[["WebSocketProtocol"], ConnectionCallbacks]


class WebSocketProtocol(asyncio.Protocol):
    """One TCP connection: HTTP head first, then WebSocket frames."""

    def __init__(self, make_connection: ConnectionFactory, options: WebSocketOptions) -> None:
        self._make_connection = make_connection
        self._options = options
        self._transport: asyncio.Transport | None = None
        self._head = bytearray()
        self._ws: Protocol | None = None
        self._connection: ConnectionCallbacks | None = None
        self._fragments: list[bytes] = []
        self._fragment_text = False
        self._timer: asyncio.TimerHandle | None = None
        self._keepalive: asyncio.TimerHandle | None = None
        self._awaiting_pong = False
        self._closing = False
        self.peer = "unknown"

    # --- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.peer = f"{peer[0]}:{peer[1]}" if ":" not in peer[0] else f"[{peer[0]}]:{peer[1]}"
        transport.set_write_buffer_limits(high=self._options.write_high_water)
        self._arm(self._options.handshake_timeout, self._abort)

    def data_received(self, data: bytes) -> None:
        if self._ws is None:
            self._receive_head(data)
        else:
            self._receive_frames(data)

    def eof_received(self) -> bool | None:
        if self._ws is not None:
            self._ws.receive_eof()
            self._flush()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self._keepalive is not None:
            self._keepalive.cancel()
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.connection_lost()

    def pause_writing(self) -> None:
        if self._connection is not None:
            self._connection.writing_paused()

    def resume_writing(self) -> None:
        if self._connection is not None:
            self._connection.writing_resumed()

    # --- what the connection calls ------------------------------------------------------------

    def send_message(self, data: bytes) -> None:
        """Send one text message."""
        if self._ws is None or self._ws.state is not State.OPEN:
            return
        self._ws.send_text(data)
        self._flush()

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Start the closing handshake; the TCP connection ends after ``close_timeout``."""
        if self._ws is None or self._ws.state is not State.OPEN:
            self._abort()
            return
        self._ws.send_close(code, reason)
        self._flush()

    def pause_reading(self) -> None:
        """Stop reading from the socket (inbound backpressure)."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        """Read from the socket again."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    # --- HTTP -------------------------------------------------------------------------------

    def _receive_head(self, data: bytes) -> None:
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            if len(self._head) > handshake.MAX_HEAD_BYTES:
                self._respond(handshake.Response(431, "Request Header Fields Too Large"))
            return
        head, rest = bytes(self._head[:end]), bytes(self._head[end + 4 :])
        self._head.clear()
        try:
            request = handshake.parse_head(head)
        except handshake.HandshakeError as exc:
            self._respond(handshake.Response(400, "Bad Request", body=str(exc).encode()))
            return
        decision = handshake.route(request)
        if isinstance(decision, handshake.Response):
            self._respond(decision, head_only=request.method == "HEAD")
            return
        self._accept(decision, rest)

    def _respond(self, response: handshake.Response, *, head_only: bool = False) -> None:
        assert self._transport is not None
        payload = response.encode()
        if head_only and response.body:
            payload = payload[: len(payload) - len(response.body)]
        self._transport.write(payload)
        self._transport.close()
        self._cancel_timer()

    def _accept(self, upgrade: handshake.Upgrade, rest: bytes) -> None:
        assert self._transport is not None
        self._transport.write(upgrade.encode())
        options = self._options
        self._ws = Protocol(
            Side.SERVER,
            state=State.OPEN,
            max_size=(options.max_message_bytes, options.max_frame_bytes),
            logger=logging.getLogger("executor.websocket.protocol"),
        )
        self._connection = self._make_connection(self)
        self._cancel_timer()
        self._schedule_ping(options.ping_interval)
        if rest:
            self._receive_frames(rest)

    # --- frames -----------------------------------------------------------------------------

    def _receive_frames(self, data: bytes) -> None:
        assert self._ws is not None
        self._ws.receive_data(data)
        for frame in self._ws.events_received():
            self._on_frame(frame)
        self._flush()

    def _on_frame(self, frame: Any) -> None:
        opcode = frame.opcode
        if opcode is Opcode.TEXT or opcode is Opcode.BINARY:
            self._fragments = [frame.data]
            self._fragment_text = opcode is Opcode.TEXT
        elif opcode is Opcode.CONT:
            self._fragments.append(frame.data)
        elif opcode is Opcode.PONG:
            if self._awaiting_pong:
                self._awaiting_pong = False
                self._schedule_ping(self._options.ping_interval)
            return
        else:  # PING is answered and CLOSE handled by the sans-I/O protocol
            return
        if not frame.fin:
            return
        message = self._fragments[0] if len(self._fragments) == 1 else b"".join(self._fragments)
        self._fragments = []
        if self._fragment_text and not _valid_utf8(message):
            self.close(1007, "invalid UTF-8 in a text message")
            return
        if self._connection is not None and not self._closing:
            self._connection.message_received(bytes(message))

    def _flush(self) -> None:
        ws, transport = self._ws, self._transport
        if ws is None or transport is None:
            return
        for chunk in ws.data_to_send():
            if chunk:
                transport.write(chunk)
            elif transport.can_write_eof():
                transport.write_eof()
        if ws.close_expected() and not self._closing:
            self._closing = True
            self._arm(self._options.close_timeout, self._abort)
        if ws.state is State.CLOSED:
            transport.close()

    # --- timers -----------------------------------------------------------------------------

    def _arm(self, delay: float, callback: Callable[[], None]) -> None:
        self._cancel_timer()
        self._timer = asyncio.get_running_loop().call_later(delay, callback)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule_ping(self, delay: float) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
        self._keepalive = asyncio.get_running_loop().call_later(delay, self._ping)

    def _ping(self) -> None:
        """Keepalive: a dead peer is noticed after ``ping_interval + ping_timeout`` at most."""
        if self._ws is None or self._ws.state is not State.OPEN:
            return
        if self._awaiting_pong:
            log.info("connection %s: no pong within %ss; dropping it", self.peer, self._options.ping_timeout)
            self._abort()
            return
        self._awaiting_pong = True
        self._ws.send_ping(b"keepalive")
        self._flush()
        self._schedule_ping(self._options.ping_timeout)

    def _abort(self) -> None:
        self._cancel_timer()
        if self._keepalive is not None:
            self._keepalive.cancel()
        if self._transport is not None:
            self._transport.abort()


def _valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


async def serve_websocket(
    host: str, port: int, make_connection: ConnectionFactory, options: WebSocketOptions
) -> asyncio.Server:
    """Listen on ``host:port``; each accepted socket gets a ``WebSocketProtocol``."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(
        lambda: WebSocketProtocol(make_connection, options), host, port, reuse_address=True
    )
