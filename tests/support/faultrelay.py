"""A TCP relay between a client and a daemon that the test breaks on purpose.

It runs on the test's own event loop, so a test can drop the connection at an exact point
of its own progress (after the 100th line, while a start is in flight, in the middle of the
catch-up that follows a reconnect):

* ``drop("fin")``: close both sides cleanly (each peer sees end-of-stream, no WebSocket
  close frame); ``drop("rst")``: abort both sides with a TCP reset; ``drop("midframe")``:
  cut the daemon-to-client stream inside a WebSocket frame, then reset both sides.
* ``pause()``/``resume()``: stop forwarding, in one direction or both (bytes are held, not
  lost).
* ``arm_cut(frame, min_payload=...)``: the next connection is cut in the middle of a
  daemon-to-client frame (frame 1 answers ``initialize``; on a resume, the big frame after
  it is the answer to the catch-up's ``process/read``).
* ``refusing``: new connections are reset at once (the daemon looks unreachable).
* ``connections``: how many connections were accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Literal
from urllib.parse import urlsplit

DropMode = Literal["fin", "rst", "midframe"]
Direction = Literal["both", "down", "up"]


class FrameTracker:
    """Follows WebSocket frame boundaries in the daemon-to-client stream (unmasked)."""

    def __init__(self) -> None:
        self.frames_started = 0
        self._header = bytearray()
        self._payload_left = 0
        self._frame_payload = 0
        #: The HTTP upgrade response comes first; frames start after its blank line.
        self._http = bytearray()
        self._in_http = True

    def _header_length(self) -> int | None:
        if len(self._header) < 2:
            return None
        size = self._header[1] & 0x7F
        masked = 4 if self._header[1] & 0x80 else 0
        return 2 + {126: 2, 127: 8}.get(size, 0) + masked

    def _payload_length(self) -> int:
        size = self._header[1] & 0x7F
        if size == 126:
            return int(struct.unpack(">H", self._header[2:4])[0])
        if size == 127:
            return int(struct.unpack(">Q", self._header[2:10])[0])
        return size

    def feed(self, data: bytes, cut: tuple[int, int] | None) -> int | None:
        """Consume ``data``; return an index to cut it at, strictly inside the payload of
        the first frame numbered at least ``cut[0]`` with a payload of at least ``cut[1]``
        bytes, or ``None`` (past a returned index nothing matters: the connection is dropped
        there)."""
        i = 0
        if self._in_http:
            self._http += data
            end = self._http.find(b"\r\n\r\n")
            if end < 0:
                return None
            self._in_http = False
            i = len(data) - (len(self._http) - end - 4)
            self._http.clear()
        while i < len(data):
            if self._payload_left:
                take = min(self._payload_left, len(data) - i)
                wanted = (
                    cut is not None
                    and self.frames_started >= cut[0]
                    and self._frame_payload >= cut[1]
                )
                if wanted and self._payload_left >= 2:
                    return i + max(1, min(take, self._payload_left - 1) // 2)
                self._payload_left -= take
                i += take
                continue
            if not self._header:
                self.frames_started += 1
            self._header.append(data[i])
            i += 1
            length = self._header_length()
            if length is not None and len(self._header) == length:
                self._payload_left = self._frame_payload = self._payload_length()
                self._header.clear()
        return None


class _Pair:
    def __init__(
        self,
        relay: FaultRelay,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        cut: tuple[int, int] | None,
    ) -> None:
        self.relay = relay
        self.client_reader, self.client_writer = client
        self.up_reader, self.up_writer = upstream
        self.tracker = FrameTracker()
        self.cut = cut
        self.cut_done = asyncio.Event()
        self.down_bytes = 0
        self.up_bytes = 0
        self.closed = False
        self.tasks = [
            asyncio.create_task(self._pump_up()),
            asyncio.create_task(self._pump_down()),
        ]

    async def _pump_up(self) -> None:
        try:
            while data := await self.client_reader.read(65536):
                await self.relay.flowing_up.wait()
                if self.closed:
                    return
                self.up_writer.write(data)
                self.up_bytes += len(data)
                self.relay.up_bytes += len(data)
                await self.up_writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self.close("fin")

    async def _pump_down(self) -> None:
        try:
            while data := await self.up_reader.read(65536):
                await self.relay.flowing_down.wait()
                if self.closed:
                    return
                at = self.tracker.feed(data, self.cut)
                if at is not None:
                    self.client_writer.write(data[:at])
                    self.down_bytes += at
                    with contextlib.suppress(ConnectionError, OSError):
                        await self.client_writer.drain()
                    self.cut_done.set()
                    self.close("rst")
                    return
                self.client_writer.write(data)
                self.down_bytes += len(data)
                self.relay.down_bytes += len(data)
                await self.client_writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self.close("fin")

    def close(self, mode: Literal["fin", "rst"], *, keep_upstream: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        self.relay.active.discard(self)
        writers = [self.client_writer]
        if keep_upstream:
            self.relay.half_open.append(self.up_writer)
        else:
            writers.append(self.up_writer)
        for writer in writers:
            if mode == "rst":
                _reset(writer)
            else:
                with contextlib.suppress(Exception):
                    writer.close()
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(Exception):
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultRelay:
    """Relays ``127.0.0.1:<port>`` to the daemon at ``upstream`` (a ws:// URL)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        assert parts.hostname is not None and parts.port is not None
        self.upstream = (parts.hostname, parts.port)
        self.connections = 0
        self.active: set[_Pair] = set()
        self.refusing = False
        self.flowing_up = asyncio.Event()
        self.flowing_down = asyncio.Event()
        self.flowing_up.set()
        self.flowing_down.set()
        self.up_bytes = 0
        self.down_bytes = 0
        #: Daemon sides of connections dropped with ``keep_upstream``.
        self.half_open: list[asyncio.StreamWriter] = []
        self._armed: list[tuple[int, int]] = []
        self._pairs: list[_Pair] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> FaultRelay:
        """Listen on a free loopback port."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        """The relay's ws:// URL."""
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"ws://127.0.0.1:{port}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.refusing:
            _reset(writer)
            return
        try:
            upstream = await asyncio.open_connection(*self.upstream)
        except OSError:
            _reset(writer)
            return
        cut = self._armed.pop(0) if self._armed else None
        pair = _Pair(self, (reader, writer), upstream, cut)
        self.active.add(pair)
        self._pairs.append(pair)

    def arm_cut(self, frame: int = 1, *, min_payload: int = 0) -> None:
        """Cut the next new connection inside its first daemon-to-client frame numbered
        ``frame`` or later with a payload of ``min_payload`` bytes or more."""
        self._armed.append((frame, min_payload))

    async def drop(
        self, mode: DropMode = "rst", *, timeout: float = 5.0, keep_upstream: bool = False
    ) -> int:
        """Drop every active connection; returns how many there were. ``midframe`` waits
        (up to ``timeout``) for the daemon to send something to cut, then resets anyway.
        ``keep_upstream`` drops only the client's side: the daemon goes on seeing a live
        connection (its session stays attached) until ``release_upstreams``."""
        pairs = list(self.active)
        if keep_upstream:
            for pair in pairs:
                pair.close("rst" if mode == "rst" else "fin", keep_upstream=True)
            await asyncio.sleep(0)
            return len(pairs)
        if mode == "midframe":
            for pair in pairs:
                pair.cut = (0, 0)
            waits = [asyncio.create_task(pair.cut_done.wait()) for pair in pairs]
            if waits:
                await asyncio.wait(waits, timeout=timeout)
                for waiter in waits:
                    waiter.cancel()
            for pair in pairs:
                pair.close("rst")
        else:
            for pair in pairs:
                pair.close(mode)
        await asyncio.sleep(0)
        return len(pairs)

    def release_upstreams(self) -> None:
        """Close the daemon sides that ``drop(keep_upstream=True)`` left open."""
        writers, self.half_open = self.half_open, []
        for writer in writers:
            with contextlib.suppress(Exception):
                writer.close()

    def pause(self, direction: Direction = "both") -> None:
        """Hold the bytes going ``down`` (to the client), ``up`` (to the daemon) or both."""
        if direction in ("both", "up"):
            self.flowing_up.clear()
        if direction in ("both", "down"):
            self.flowing_down.clear()

    def resume(self) -> None:
        """Forward again."""
        self.flowing_up.set()
        self.flowing_down.set()

    async def wait_connections(self, count: int, timeout: float = 10.0) -> None:
        """Wait until ``count`` connections have been accepted in all."""
        async with asyncio.timeout(timeout):
            while self.connections < count:
                await asyncio.sleep(0.01)

    async def close(self) -> None:
        """Stop listening and close every connection."""
        self.resume()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self.release_upstreams()
        for pair in list(self._pairs):
            pair.close("fin")
        tasks = [task for pair in self._pairs for task in pair.tasks]
        await asyncio.gather(*tasks, return_exceptions=True)
        for pair in self._pairs:
            for writer in (pair.client_writer, pair.up_writer):
                with contextlib.suppress(Exception):
                    await writer.wait_closed()

    async def __aenter__(self) -> FaultRelay:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
