"""One HTTP/1.1 connection: h11 frames and parses, this module only moves bytes.

h11 (the sans-I/O HTTP/1.1 library httpx's stack is built on) writes every request's framing
from its own headers and refuses a body that disagrees with them, parses responses strictly
(chunked encoding, Content-Length, what a HEAD or a 304 may carry), and says when a
connection may carry another exchange. What is left here is the event-loop side: feed
received bytes to h11, write what it produces, wait for the next event, and keep a
connection for reuse only when h11 says both sides are done *and* nothing arrived that
nobody asked for — not during the response, not while idle.
"""

from __future__ import annotations

import asyncio
import select
from typing import Final, cast

import h11

__all__ = ["Connection", "ConnectionLost", "WireError"]

#: Largest response head (status line and headers) accepted (h11's default is 16 KiB; large
#: cookies and CSP headers exceed it; httpx allows this much).
MAX_HEAD_BYTES: Final = 100 * 1024
#: Bytes taken from the socket at once: what the kernel has, up to this; the buffer starts
#: small and grows while reads fill it (a large body).
RECEIVE_BYTES: Final = 1024 * 1024
_FIRST_BUFFER: Final = 16 * 1024
#: Received but unread bytes past which the socket stops being read (a slow consumer).
HIGH_WATER: Final = 1024 * 1024


class WireError(Exception):
    """The exchange failed on the wire: a protocol violation, a reset, an early close."""


class ConnectionLost(WireError):
    """The server closed the connection before sending any of a response (on a pooled
    connection: it closed it while idle, and the request may go out on another)."""


class Connection(asyncio.BufferedProtocol):
    """An asyncio protocol driving one ``h11.Connection`` (client role).

    Buffered: the socket is read into one buffer of its own (h11 copies from it), so a
    large body costs no allocation per read.
    """

    def __init__(self) -> None:
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self._buffer = memoryview(bytearray(_FIRST_BUFFER))
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._idle = False
        self._spoiled = False
        self._paused = False
        self._unread = 0
        self._poller: select.poll | None = None

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport. Idle until a request is sent: a server that speaks first
        spoils the connection."""
        # A stream transport (asyncio's, or another loop's that is no subclass of it).
        self._transport = cast("asyncio.Transport", transport)
        self._idle = True

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the transport puts what it reads."""
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        """Hand bytes to h11; bytes while idle spoil the connection (nothing was asked)."""
        if self._idle or self._eof:
            self._spoil()
            return
        self._h11.receive_data(self._buffer[:nbytes])  # type: ignore[arg-type]
        self._unread += nbytes
        if nbytes == len(self._buffer) < RECEIVE_BYTES:
            self._buffer = memoryview(bytearray(len(self._buffer) * 4))
        if self._unread > HIGH_WATER and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        """The server closed its side: h11 decides whether that ended a body or broke one."""
        self._end()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """The connection is gone (reset, closed by either side)."""
        self._end()
        self._spoiled = True

    # --- the exchange ----------------------------------------------------------------------

    @property
    def usable(self) -> bool:
        """Idle, open, and nothing arrived since its last response — not even bytes the
        event loop has not read yet (the socket is asked)."""
        if not self._idle or self._spoiled or self._eof or self._transport is None:
            return False
        if self._poller is None:
            sock = self._transport.get_extra_info("socket")
            if sock is None:
                return False
            self._poller = select.poll()  # kept: made and registered once per connection
            self._poller.register(sock.fileno(), select.POLLIN)
        return not self._poller.poll(0)

    async def send(
        self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> h11.Response:
        """Send a request and return the final response head (1xx responses skipped).

        ``ConnectionLost`` if the server closed the connection without answering;
        ``WireError`` for anything else that goes wrong on the wire.
        """
        self._idle = False
        try:
            self._write(h11.Request(method=method, target=target, headers=headers))
            if body:
                self._write(h11.Data(data=body))
            self._write(h11.EndOfMessage())
        except h11.LocalProtocolError as exc:
            raise WireError(str(exc)) from exc
        while True:
            event = await self._next_event()
            if isinstance(event, h11.Response):
                return event
            if isinstance(event, h11.ConnectionClosed):
                raise ConnectionLost("the server closed the connection without answering")
            if not isinstance(event, h11.InformationalResponse):
                raise WireError(f"unexpected {type(event).__name__} before the response")

    async def receive(self) -> bytes:
        """The next piece of the response body (a fresh ``bytearray``, not copied again),
        b"" at its end. ``WireError`` if it breaks off (cut short, bad chunking)."""
        while True:
            event = await self._next_event()
            if isinstance(event, h11.Data):
                return event.data
            if isinstance(event, h11.EndOfMessage):
                return b""
            if event is h11.PAUSED:  # a protocol switch (CONNECT): the body is not HTTP
                self._spoiled = True
                return b""
            if isinstance(event, h11.ConnectionClosed):
                return b""

    def finish(self) -> bool:
        """After a body was read to its end: whether the connection may carry another
        exchange. h11 must agree (both sides done, keep-alive), and no byte beyond the
        response may have arrived — a second answer on the wire means its framing is in
        doubt, and whoever sent next on it would read that answer as theirs."""
        h = self._h11
        if (
            self._spoiled
            or self._eof
            or h.our_state is not h11.DONE
            or h.their_state is not h11.DONE
            or h.trailing_data[0]
        ):
            return False
        h.start_next_cycle()
        self._idle, self._unread = True, 0
        if len(self._buffer) > _FIRST_BUFFER:  # an idle connection holds no large buffer
            self._buffer = memoryview(bytearray(_FIRST_BUFFER))
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()  # so that a close (or stray bytes) is noticed
        return True

    def close(self) -> None:
        """Drop the connection at once (no TLS goodbye: nothing more is said on it)."""
        self._spoiled = True
        if self._transport is not None:
            self._transport.abort()

    # --- inside ----------------------------------------------------------------------------

    def _write(self, event: h11.Event) -> None:
        data = self._h11.send(event)
        if data and self._transport is not None:
            # The body is in memory already: the transport writes it out while the response
            # is awaited (a server may answer before it has read everything).
            self._transport.write(data)

    async def _next_event(self) -> h11.Event | type[h11.PAUSED]:
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._spoiled = True
                raise WireError(str(exc)) from exc
            if event is not h11.NEED_DATA:
                return cast("h11.Event | type[h11.PAUSED]", event)
            if self._eof or self._spoiled:  # closed while idle: h11 never saw it end
                raise ConnectionLost("the connection was closed")
            self._unread = 0
            if self._paused and self._transport is not None:
                self._paused = False
                self._transport.resume_reading()
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def _end(self) -> None:
        if not self._eof:
            self._eof = True
            if not self._idle:
                self._h11.receive_data(b"")
        self._wake()

    def _spoil(self) -> None:
        self._spoiled = True
        if self._transport is not None:
            self._transport.abort()
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
