"""Tunnels: two connections whose bytes are relayed to each other until both ends close.

``open_tunnel`` first passes on what either side sent during the handshake, then relays by
``splice`` (Linux, ``splice.py``) or else through asyncio transports: each chunk goes from
one socket's ``buffer_updated`` straight to the other's ``write`` — no task, no queue —
with the transports' own flow control (a side whose write buffer passes its high-water
mark pauses the other side's reading until it drains). Either way EOF one way is passed on
as ``shutdown(SHUT_WR)``, both sockets close once both ways ended, and an error on one
side resets the other, so a truncated stream never looks complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Final, Protocol, cast

from executor.netproxy.conn import LINGER_RESET, Conn
from executor.netproxy.splice import PipePool, SpliceTunnel

__all__ = ["Dialer", "TransportTunnel", "Tunnel", "open_tunnel", "relay_connection"]

#: Bytes one read takes from a socket.
READ_SIZE: Final = 256 * 1024
#: A transport's write buffer at which the other side pauses reading (it resumes at a
#: quarter): one read's worth. 1 MiB measured no faster, and a stalled reader costs this
#: much (plus one read) per tunnel.
WRITE_HIGH: Final = 256 * 1024


class Dialer(Protocol):
    """What a protocol handler (HTTP, SOCKS5) asks of the server."""

    async def open(self, host: str, port: int, protocol: str) -> Conn:
        """A connection to ``host:port`` if the policy allows it, the decision reported;
        ``Refused`` or ``Unreachable`` otherwise."""

    def refuse(self, host: str, port: int, protocol: str, reason: str) -> None:
        """Report a request refused before any destination was considered."""

    def reject(self, reason: str) -> None:
        """Count (and log) a connection dropped for what it sent: not a proxy request,
        too slow, too large."""

    async def tunnel(self, client: Conn, upstream: Conn) -> None:
        """Relay ``client`` and ``upstream`` to each other from now on (they are the
        tunnel's: the handler must not touch them again)."""


class Tunnel(Protocol):
    """A running tunnel."""

    @property
    def relayed(self) -> tuple[int, int]:
        """Bytes relayed each way (client to upstream, upstream to client)."""

    def close(self) -> None:
        """Cut both connections now."""


async def open_tunnel(
    client: Conn,
    upstream: Conn,
    *,
    pool: PipePool | None,
    on_closed: Callable[[Tunnel], None],
) -> Tunnel:
    """Relay ``client`` and ``upstream`` (spliced when ``pool`` is given); what either
    sent already but was not consumed goes first."""
    await upstream.send(client.take())
    await client.send(upstream.take())
    if pool is not None:
        return SpliceTunnel(client.sock, upstream.sock, pool, on_closed)
    tunnel = TransportTunnel(on_closed)
    await tunnel.start(client, upstream)
    return tunnel


class _Half(asyncio.BufferedProtocol):
    """One socket of a ``TransportTunnel``."""

    def __init__(self, tunnel: TransportTunnel) -> None:
        self.tunnel = tunnel
        self.transport: asyncio.Transport | None = None
        self.peer: _Half | None = None
        self.relayed = 0
        self.ended = False
        self.lost = False
        self.early = bytearray()  # arrived before the tunnel was live
        self._view = memoryview(bytearray(READ_SIZE))

    def itself(self) -> _Half:
        """A protocol factory that returns this protocol."""
        return self

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=WRITE_HIGH)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        self.relayed += nbytes
        peer = self.peer
        if not self.tunnel.live or peer is None or peer.transport is None:
            self.early += self._view[:nbytes]  # passed on, in order, when the tunnel starts
            return
        transport = peer.transport
        transport.write(self._view[:nbytes])
        if transport.get_write_buffer_size():
            # The transport kept a view of what it could not send (3.12+): a fresh buffer.
            self._view = memoryview(bytearray(READ_SIZE))

    def eof_received(self) -> bool:
        self.ended = True
        if self.tunnel.live:
            self.tunnel.pass_eof(self)
        return True  # the other way may still carry data

    def pause_writing(self) -> None:
        peer = self.peer
        if self.tunnel.live and peer is not None and peer.transport is not None and not peer.ended:
            peer.transport.pause_reading()

    def resume_writing(self) -> None:
        peer = self.peer
        if self.tunnel.live and peer is not None and peer.transport is not None and not peer.ended:
            peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.tunnel.lost(self, exc)


class TransportTunnel:
    """A tunnel over asyncio transports (where there is no ``splice``)."""

    def __init__(self, on_closed: Callable[[Tunnel], None]) -> None:
        self._on_closed = on_closed
        self._halves = (_Half(self), _Half(self))
        #: Both transports exist and early bytes were passed on: relay directly.
        self.live = False
        self._done = False

    @property
    def relayed(self) -> tuple[int, int]:
        """Bytes relayed each way (client to upstream, upstream to client)."""
        return self._halves[0].relayed, self._halves[1].relayed

    async def start(self, client: Conn, upstream: Conn) -> None:
        """Wrap both sockets in transports and join them."""
        loop = asyncio.get_running_loop()
        a, b = self._halves
        a.peer, b.peer = b, a
        try:
            for half, conn in ((a, client), (b, upstream)):
                await loop.connect_accepted_socket(half.itself, sock=conn.sock)
        except BaseException:
            self.close()
            client.close()
            upstream.close()
            raise
        self.live = True
        for half, other in ((a, b), (b, a)):
            if half.early and other.transport is not None and not other.lost:
                other.transport.write(bytes(half.early))
            half.early.clear()
        for half in (a, b):
            if half.ended:
                self.pass_eof(half)

    def pass_eof(self, half: _Half) -> None:
        """``half`` ended: shut the other side's sending down, or close both if it ended
        too."""
        peer = half.peer
        if peer is None or peer.transport is None or peer.transport.is_closing():
            return
        if peer.ended:
            self.close(graceful=True)
        else:
            peer.transport.write_eof()

    def lost(self, half: _Half, exc: Exception | None) -> None:
        """One socket is gone: end the other (with a reset if this one failed)."""
        peer = half.peer
        if peer is not None and peer.transport is not None and not peer.lost:
            if exc is None:
                peer.transport.close()
            else:
                sock = peer.transport.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
                peer.transport.abort()
        if all(each.lost or each.transport is None for each in self._halves):
            self._finish()

    def close(self, *, graceful: bool = False) -> None:
        """Cut both connections now (``graceful``: after what is queued is sent)."""
        for half in self._halves:
            if half.transport is not None:
                if graceful:
                    half.transport.close()
                else:
                    half.transport.abort()
        if all(half.transport is None for half in self._halves):
            self._finish()

    def _finish(self) -> None:
        if not self._done:
            self._done = True
            self._on_closed(self)


async def relay_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, port: int
) -> None:
    """Relay one accepted stream connection to ``host:port`` until both ends closed (a
    session's ``local_ports`` relay): EOF passed on each way, a reset on one side resets
    the other; when ``host:port`` cannot be reached the client is reset."""
    try:
        up_reader, up_writer = await asyncio.open_connection(host, port)
    except OSError:
        _reset_stream(writer)
        return

    async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(READ_SIZE):
                sink.write(data)
                await sink.drain()
            if sink.can_write_eof() and not sink.is_closing():
                sink.write_eof()
        except OSError:
            _reset_stream(sink)

    try:
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
    finally:
        writer.close()
        up_writer.close()


def _reset_stream(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
    writer.transport.abort()
