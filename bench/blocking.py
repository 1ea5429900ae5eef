"""A blocking WebSocket client for the per-request cases, and really masked client frames.

``BlockingClient`` drives one connection with blocking socket calls: one ``sendall`` and one
``recv_into`` per round trip, no event loop, for the cases where an event loop's own cost
per wake-up would be part of every round trip it measures (one request at a time, large and
fragmented messages). ``masked_frames`` builds the frames those cases send: masked with a
random key, as a browser's or a library's client sends them, optionally fragmented.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
import time
from typing import Any
from urllib.parse import urlsplit

# The client's JSON codec (orjson, or the standard library without it).
from bench.client import RpcFailure, _dumps, _loads, frame

__all__ = ["BlockingClient", "masked_frames"]

#: What one read asks for at least.
_READ_BYTES = 256 * 1024
_U16 = struct.Struct("!H").unpack_from
_U64 = struct.Struct("!Q").unpack_from


def masked_frames(payload: bytes, *, fragment: int | None = None, opcode: int = 0x1) -> bytes:
    """``payload`` as client frames with a random mask key, split into ``fragment``-byte frames.

    Unlike ``frame`` (zero key, which a server could skip unmasking), the payload is really
    masked, as a browser's or a library's client sends it. With ``fragment``, the first frame
    carries ``opcode`` and the rest are continuation frames (opcode 0), FIN only on the
    last. Built before a timed window: masking 16 MiB in Python takes tens of milliseconds.
    """
    key = os.urandom(4)
    size = len(payload)
    pad = (size + 3) // 4 * 4
    mask = int.from_bytes(key * (pad // 4), "big") >> (8 * (pad - size))
    masked = (int.from_bytes(payload, "big") ^ mask).to_bytes(size, "big")
    step = fragment or max(size, 1)
    if fragment is not None and fragment % 4:
        raise ValueError("fragments must be a multiple of 4 bytes (one key, masked once)")
    parts = []
    for at in range(0, max(size, 1), step):
        piece = masked[at : at + step]
        first = (0x80 if at + step >= size else 0) | (opcode if at == 0 else 0)
        parts.append(_header(first, len(piece)) + key + piece)
    return b"".join(parts)


def _header(first: int, length: int) -> bytes:
    if length < 126:
        return struct.pack("!BB", first, 0x80 | length)
    if length < 1 << 16:
        return struct.pack("!BBH", first, 0x80 | 126, length)
    return struct.pack("!BBQ", first, 0x80 | 127, length)


class BlockingClient:
    """One WebSocket connection driven by blocking calls: the leanest client Python has.

    For the per-request cases, where the client is half of every measured round trip: a
    request is one ``sendall``, its answer one ``recv_into`` (the header read in place, the
    payload sliced out only when asked for), with no event loop in between. It runs on the
    calling thread, so ``CpuMeter`` (this thread's CPU) meters it; the event loop is blocked
    while it runs, which the cases that use it do not mind.
    """

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # Truly blocking: with a Python timeout, every recv is preceded by a poll (one more
        # syscall per round trip). The kernel's own timeouts still keep a silent server from
        # hanging the run (the call fails with EAGAIN).
        self.sock.settimeout(None)
        interval = struct.pack("ll", int(timeout), int(timeout % 1 * 1e6))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, interval)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, interval)
        self._buffer = bytearray(_READ_BYTES)
        self._view = memoryview(self._buffer)
        self._start = self._end = 0
        self._next_id = 1
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET / HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        while (head := self._buffer.find(b"\r\n\r\n", 0, self._end)) < 0:
            self._fill()
        if self._buffer[9:12] != b"101":
            raise ConnectionError(f"upgrade refused: {bytes(self._buffer[:head])!r}")
        self._start = head + 4
        result = self.request("initialize", {"clientName": "bench"})
        self.session_id: str = result["sessionId"]
        self.sock.sendall(frame(_dumps({"method": "initialized", "params": {}})))

    def close(self) -> None:
        """Drop the connection."""
        self.sock.close()

    def request_frame(self, method: str, params: Any = None) -> bytes:
        """A request's frame with the next id (built ahead of a timed loop)."""
        request_id = self._next_id
        self._next_id += 1
        return frame(_dumps({"id": request_id, "method": method, "params": params}))

    def request(self, method: str, params: Any = None) -> Any:
        """Send a request, wait for its answer; the result (``RpcFailure`` on an error)."""
        self.sock.sendall(self.request_frame(method, params))
        message = _loads(self.answer())
        if "error" in message:
            raise RpcFailure(message["error"])
        return message["result"]

    def answer(self) -> bytes:
        """The payload of the next answer, skipping notifications and answering pings."""
        while True:
            opcode, start, end = self.next_frame()
            if opcode == 0x9:
                self.sock.sendall(frame(bytes(self._buffer[start:end]), 0xA))
            elif opcode == 0x8:
                raise ConnectionError("the server closed the connection")
            elif opcode in (0x1, 0x2) and not self._buffer.startswith(b'{"method"', start):
                return bytes(self._buffer[start:end])

    def roundtrips(self, frames: list[bytes]) -> list[int]:
        """Send each frame once its predecessor was answered; each round trip in ns.

        An answer is recognised in place (a text frame not starting with ``{"method"``:
        both servers put ``id`` or ``error`` first in a response); nothing is parsed. The
        usual answer, one small frame arriving alone, is taken in one ``recv_into`` and a
        few byte checks; anything else goes through ``next_frame``.
        """
        clock = time.perf_counter_ns
        sendall, recv_into, next_frame = self.sock.sendall, self.sock.recv_into, self.next_frame
        samples = []
        for data in frames:
            started = clock()
            sendall(data)
            if self._start == self._end:
                buffer = self._buffer
                count = recv_into(self._view)
                if (
                    count >= 2
                    and buffer[0] == 0x81
                    and count == 2 + buffer[1]
                    and not buffer.startswith(b'{"method"', 2)
                ):
                    samples.append(clock() - started)
                    self._start = self._end = 0
                    continue
                if not count:
                    raise ConnectionError("the server closed the connection")
                self._start, self._end = 0, count
            while True:
                opcode, start, _end = next_frame()
                if opcode == 0x1 and not self._buffer.startswith(b'{"method"', start):
                    break
                if opcode not in (0x1, 0x2):
                    raise ConnectionError(f"unexpected frame {opcode:#x} in a round trip")
            samples.append(clock() - started)
        return samples

    def next_frame(self) -> tuple[int, int, int]:
        """(opcode, start, end) of the next unfragmented frame's payload in the buffer."""
        while True:
            start, end, buffer = self._start, self._end, self._buffer
            if end - start >= 2:
                length = buffer[start + 1] & 0x7F
                head = 2
                if length == 126:
                    head = 4
                    length = _U16(buffer, start + 2)[0] if end - start >= 4 else -1
                elif length == 127:
                    head = 10
                    length = _U64(buffer, start + 2)[0] if end - start >= 10 else -1
                if length >= 0 and end - start >= head + length:
                    self._start = start + head + length
                    return buffer[start] & 0x0F, start + head, start + head + length
                if length >= 0 and start + head + length > len(buffer):
                    self._room(head + length)
            self._fill()

    def _room(self, size: int) -> None:
        """Make the unparsed bytes start the buffer, grown to hold ``size``."""
        unparsed = self._buffer[self._start : self._end]
        if len(self._buffer) < size:
            self._buffer = bytearray(size + _READ_BYTES)
            self._view = memoryview(self._buffer)
        self._buffer[: len(unparsed)] = unparsed
        self._start, self._end = 0, len(unparsed)

    def _fill(self) -> None:
        if self._start == self._end:
            self._start = self._end = 0
        elif len(self._buffer) - self._end < _READ_BYTES // 4:
            self._room(self._end - self._start)
        count = self.sock.recv_into(self._view[self._end :])
        if not count:
            raise ConnectionError("the server closed the connection")
        self._end += count
