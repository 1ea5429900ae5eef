"""WebSocket transport: HTTP routing, the upgrade, frames, keepalive; one message = one JSON object.

A thin ``asyncio.Protocol`` around the sans-I/O frame reader of ``frames.py`` (the HTTP head
is parsed and routed by ``handshake.py``). It knows nothing of JSON-RPC: complete messages go
to the ``Connection`` it was created with, and the connection hands back encoded messages to
send. Flow control runs both ways: the connection can pause reading, and the socket's write
buffer pausing is reported to the connection as congestion.

Outgoing messages are queued and written once per event-loop iteration (a read's answers:
at its end, and every ``FLUSH_EVERY``), so a burst of answers (a pipelining client) or of
notifications costs one ``writev`` instead of one ``send`` per message; the queue is flushed
before anything that depends on ordering (close). What the socket does not take at once
waits in the protocol's own queue as it was written — a large answer is never joined or
copied into the transport's buffer — and the connection's flow control follows that queue.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol as TypingProtocol
from typing import cast

from executor.audit.refusals import RefusalLog
from executor.transports import handshake
from executor.transports.auth import Authenticator
from executor.transports.frames import (
    CLOSE,
    PING,
    PONG,
    SMALL_TEXT_HEADERS,
    Close,
    Event,
    FrameError,
    FrameReader,
    Message,
    Ping,
    Pong,
    close_payload,
    frame_header,
)
from executor.transports.writes import JOIN_LIMIT, SocketWriter, coalesce

__all__ = ["ConnectionCallbacks", "WebSocketOptions", "WebSocketProtocol", "serve_websocket"]

log = logging.getLogger("executor.websocket")
#: The refusal log of protocols created without one of their own.
_REFUSALS = RefusalLog(log)

_TEXT_OPCODE = 0x1
#: Queued messages written at once, without waiting for the flush: a pipelining client works
#: on the first answers while the rest are made (`rpc.status`: 1.35x one write per read).
FLUSH_EVERY = 32


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
    #: ``--ws-auth``: what upgrades must carry (None: no authentication).
    auth: Authenticator | None = None


class ConnectionCallbacks(TypingProtocol):
    """What the transport drives: the JSON-RPC connection."""

    def message_received(self, data: bytes | memoryview) -> None:
        """One complete inbound message."""

    def writing_paused(self) -> None:
        """The socket's write buffer is above its high-water mark."""

    def writing_resumed(self) -> None:
        """The socket's write buffer drained."""

    def connection_lost(self) -> None:
        """The transport is gone."""


ConnectionFactory = Callable[["WebSocketProtocol"], ConnectionCallbacks]


class _State(enum.Enum):
    HTTP = "http"  # reading the request head
    OPEN = "open"  # exchanging messages
    CLOSING = "closing"  # our close frame is out; waiting for the peer's
    CLOSED = "closed"


# Bound once: an enum member looked up on its class costs ~0.14 µs in Python 3.11 (the
# metaclass's attribute lookup), and each message compares the state a few times.
_HTTP, _OPEN, _CLOSING, _CLOSED = _State.HTTP, _State.OPEN, _State.CLOSING, _State.CLOSED


class WebSocketProtocol(asyncio.Protocol):
    """One TCP connection: HTTP head first, then WebSocket frames."""

    def __init__(
        self,
        make_connection: ConnectionFactory,
        options: WebSocketOptions,
        refusals: RefusalLog | None = None,
    ) -> None:
        self._make_connection = make_connection
        self._options = options
        #: Shared by every connection of a listener: the limits hold across connections.
        self._refusals = refusals if refusals is not None else _REFUSALS
        self._transport: asyncio.Transport | None = None
        self._fd = -1
        self._loop = asyncio.get_running_loop()
        self._head = bytearray()
        self._state = _HTTP
        self._reader = FrameReader(
            max_frame=options.max_frame_bytes, max_message=options.max_message_bytes
        )
        self._connection: ConnectionCallbacks | None = None
        self._outbox: list[bytes | bytearray | memoryview] = []
        #: Whether the outbox holds a payload of at least ``JOIN_LIMIT`` bytes.
        self._outbox_large = False
        self._flush_scheduled = False
        #: Writes the socket once it is open (None: no socket of its own, the transport does).
        self._writer: SocketWriter | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._keepalive: asyncio.TimerHandle | None = None
        self._awaiting_pong = False
        self.peer = "unknown"

    # --- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (asyncio's, or another loop's that is no subclass of it).
        self._transport = cast("asyncio.Transport", transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._fd = sock.fileno() if sock is not None else -1
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.peer = f"{peer[0]}:{peer[1]}" if ":" not in peer[0] else f"[{peer[0]}]:{peer[1]}"
        self._transport.set_write_buffer_limits(high=self._options.write_high_water)
        if self._fd >= 0:
            self._writer = SocketWriter(
                self._loop,
                self._fd,
                self._transport,
                high_water=self._options.write_high_water,
                paused=self.pause_writing,
                resumed=self.resume_writing,
            )
        self._arm(self._options.handshake_timeout, self._abort)

    def data_received(self, data: bytes) -> None:
        state = self._state
        if state is _OPEN or state is _CLOSING:
            # What this read produces is answered at its end (and as it goes: FLUSH_EVERY),
            # not a loop iteration later: pipelined clients get their batch back sooner.
            # Marked as scheduled meanwhile: no flush is scheduled for a later iteration.
            self._flush_scheduled = True
            try:
                events = self._reader.feed(data)
                # The commonest read, one message (a request), straight to the connection.
                if len(events) == 1 and type(event := events[0]) is Message:
                    connection = self._connection
                    if state is _OPEN and connection is not None:
                        connection.message_received(event.data)
                else:
                    self._handle(events)
            except FrameError as exc:
                self._protocol_error(exc)
            finally:
                if self._outbox:
                    self._flush()
                else:
                    self._flush_scheduled = False
        elif state is _HTTP:
            self._receive_head(data)

    def eof_received(self) -> bool | None:
        return None  # the peer is gone: let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        self._state = _CLOSED
        if self._writer is not None:
            self._writer.stop()
            self._writer = None
        self._fd = -1  # the descriptor number may be reused from now on
        self._outbox.clear()
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
        """Queue one text message; it is written at the end of this loop iteration."""
        if self._state is not _OPEN:
            return
        size = len(data)
        if size >= 126:
            self._queue(_TEXT_OPCODE, data)
            return
        # The commonest case (a small answer) inline: its header is prebuilt.
        outbox = self._outbox
        outbox.append(SMALL_TEXT_HEADERS[size])
        outbox.append(data)
        self._flush_soon()

    def send_message_parts(self, parts: list[bytes | bytearray | memoryview]) -> None:
        """Queue one text message given as parts (large answers are not joined first)."""
        if self._state is not _OPEN:
            return
        size = 0
        for part in parts:
            length = len(part)
            size += length
            if length >= JOIN_LIMIT:
                self._outbox_large = True
        outbox = self._outbox
        outbox.append(frame_header(_TEXT_OPCODE, size))
        outbox.extend(parts)
        self._flush_soon()

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Start the closing handshake; the TCP connection ends after ``close_timeout``."""
        if self._state is not _OPEN:
            if self._state is _HTTP:
                self._abort()
            return
        self._state = _CLOSING
        self._queue(CLOSE, close_payload(code, reason))
        self._flush()
        self._arm(self._options.close_timeout, self._abort)

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
        buffer = self._head
        searched = max(0, len(buffer) - 3)  # a terminator may straddle the previous read
        buffer += data
        end = buffer.find(b"\r\n\r\n", searched)
        # One rule however the head arrives (one read or many): a head longer than the
        # limit, blank line included, is refused; an unfinished one as soon as it must be.
        if (end + 4 if end >= 0 else len(buffer) + 1) > handshake.MAX_HEAD_BYTES:
            self._respond(handshake.Response(431, "Request Header Fields Too Large"))
            return
        if end < 0:
            return
        head, rest = bytes(buffer[:end]), bytes(buffer[end + 4 :])
        buffer.clear()
        try:
            request = handshake.parse_head(head)
        except handshake.HandshakeError as exc:
            self._respond(handshake.Response(400, "Bad Request", body=str(exc).encode()))
            return
        decision = handshake.route(request, self._options.auth)
        if isinstance(decision, handshake.Response):
            self._respond(decision, head_only=request.method == "HEAD")
            return
        self._accept(decision, rest)

    def _respond(self, response: handshake.Response, *, head_only: bool = False) -> None:
        assert self._transport is not None
        if response.status >= 400:
            self._log_refusal(response)
        payload = response.encode()
        if head_only and response.body:
            payload = payload[: len(payload) - len(response.body)]
        self._state = _CLOSED
        self._transport.write(payload)
        self._transport.close()
        self._cancel_timer()

    def _log_refusal(self, response: handshake.Response) -> None:
        status = response.status
        detail = response.body.decode(errors="replace")  # our own text, never the peer's
        if status == 401:  # a wrong or missing credential: worth a warning
            message = "refused a WebSocket upgrade from %s: %s"
            self._refusals.refused("http 401", logging.WARNING, message, self.peer, detail)
            return
        self._refusals.refused(
            f"http {status}",
            logging.INFO,
            "refused a request from %s: %d %s%s",
            self.peer,
            status,
            response.reason,
            f" ({detail})" if detail else "",
        )

    def _accept(self, upgrade: handshake.Upgrade, rest: bytes) -> None:
        assert self._transport is not None
        self._transport.write(upgrade.encode())
        self._state = _OPEN
        self._connection = self._make_connection(self)
        self._cancel_timer()
        self._schedule_ping(self._options.ping_interval)
        if rest:
            self._receive_frames(rest)

    # --- frames -----------------------------------------------------------------------------

    def _receive_frames(self, data: bytes) -> None:
        """Handle the frames in ``data`` (``data_received`` does the same, inline)."""
        try:
            events = self._reader.feed(data)
        except FrameError as exc:
            self._protocol_error(exc)
            return
        self._handle(events)

    def _protocol_error(self, exc: FrameError) -> None:
        # The frames before the bad one are valid, whether they came in an earlier read
        # or in this one: handle them (their answers go out before our close frame).
        self._handle(exc.events)
        if self._state is not _CLOSED:  # not already closed by a Close among them
            self._refusals.refused(
                f"protocol {exc.code}",
                logging.INFO,
                "connection %s: protocol error: %s",
                self.peer,
                exc.reason,
            )
            self._fail(exc.code, exc.reason)

    def _handle(self, events: list[Event]) -> None:
        connection = self._connection  # set when the connection opens, dropped as it closes
        for event in events:
            if type(event) is Message:
                # Data after our close frame is discarded (RFC 6455 §1.4).
                if self._state is _OPEN and connection is not None:
                    connection.message_received(event.data)
            elif type(event) is Ping:
                if self._state is _OPEN:
                    self._queue(PONG, event.payload)
            elif type(event) is Pong:
                self._on_pong()
            else:
                assert isinstance(event, Close)
                self._on_close(event)
                return

    def _on_pong(self) -> None:
        if self._awaiting_pong:
            self._awaiting_pong = False
            self._schedule_ping(self._options.ping_interval)

    def _on_close(self, frame: Close) -> None:
        if self._state is _OPEN:
            # Echo the peer's code (RFC 6455 §5.5.1), then end TCP once it is written.
            self._state = _CLOSING
            payload = b"" if frame.code is None else close_payload(frame.code)
            self._queue(CLOSE, payload)
            self._flush()
        self._state = _CLOSED
        self._close_transport()
        self._cancel_timer()

    def _fail(self, code: int, reason: str) -> None:
        """Fail the connection (RFC 6455 §7.1.7): send our close frame, then end TCP at once."""
        if self._state is _OPEN:
            self._queue(CLOSE, close_payload(code, reason))
            self._flush()
        self._state = _CLOSED
        self._cancel_timer()
        self._close_transport()  # written data is still flushed before the socket closes

    # --- writing ----------------------------------------------------------------------------

    def _queue(self, opcode: int, payload: bytes) -> None:
        outbox = self._outbox
        size = len(payload)
        outbox.append(frame_header(opcode, size))
        outbox.append(payload)
        if size >= JOIN_LIMIT:
            self._outbox_large = True
        self._flush_soon()

    def _flush_soon(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        elif len(self._outbox) >= 2 * FLUSH_EVERY:  # a header and a payload each, mostly
            self._flush()
            self._flush_scheduled = True  # the scheduled flush, or the read's, takes the rest

    def _flush(self) -> None:
        self._flush_scheduled = False
        outbox, transport = self._outbox, self._transport
        if not outbox or transport is None or transport.is_closing():
            outbox.clear()
            self._outbox_large = False
            return
        writer = self._writer
        if writer is None:  # no socket of our own: the transport writes (and buffers)
            data = b"".join(outbox)
            outbox.clear()
            self._outbox_large = False
            transport.write(data)
        elif self._outbox_large:  # large payloads are written as they are, not joined
            parts = coalesce(outbox)
            outbox.clear()
            self._outbox_large = False
            writer.write(parts)  # uncopied, whatever the socket does not take at once
        else:
            data = b"".join(outbox)
            outbox.clear()
            writer.write_bytes(data)

    def _close_transport(self) -> None:
        """Close the transport once everything queued is written."""
        if self._writer is not None:
            self._writer.close_when_written()
        elif self._transport is not None:
            self._transport.close()

    # --- timers -----------------------------------------------------------------------------

    def _arm(self, delay: float, callback: Callable[[], None]) -> None:
        self._cancel_timer()
        self._timer = self._loop.call_later(delay, callback)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule_ping(self, delay: float) -> None:
        if self._keepalive is not None:
            self._keepalive.cancel()
        self._keepalive = self._loop.call_later(delay, self._ping)

    def _ping(self) -> None:
        """Keepalive: a dead peer is noticed after ``ping_interval + ping_timeout`` at most."""
        if self._state is not _OPEN:
            return
        if self._awaiting_pong:
            log.info(
                "connection %s: no pong within %ss; dropping it",
                self.peer,
                self._options.ping_timeout,
            )
            self._abort()
            return
        self._awaiting_pong = True
        self._queue(PING, b"keepalive")
        self._schedule_ping(self._options.ping_timeout)

    def _abort(self) -> None:
        self._cancel_timer()
        if self._keepalive is not None:
            self._keepalive.cancel()
        self._state = _CLOSED
        if self._transport is not None:
            self._transport.abort()


async def serve_websocket(
    host: str, port: int, make_connection: ConnectionFactory, options: WebSocketOptions
) -> asyncio.Server:
    """Listen on ``host:port``; each accepted socket gets a ``WebSocketProtocol``."""
    loop = asyncio.get_running_loop()
    refusals = RefusalLog(log)
    return await loop.create_server(
        lambda: WebSocketProtocol(make_connection, options, refusals),
        host,
        port,
        reuse_address=True,
    )
