"""Raw HTTP and WebSocket over a plain socket, for tests that must misbehave on purpose.

A library client always answers pings, never sends oversized frames, never sends invalid
UTF-8 and adds headers of its own; these helpers do exactly what a test tells them and
nothing else, so the daemon's handling of broken or hostile peers can be observed.
"""

from __future__ import annotations

import base64
import json
import os
import select
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "OP_BINARY",
    "OP_CLOSE",
    "OP_CONT",
    "OP_PING",
    "OP_PONG",
    "OP_TEXT",
    "HttpAnswer",
    "RawWebSocket",
    "client_frame",
    "http_request",
    "raw_http",
]

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    return parts.hostname, parts.port


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpAnswer:
    """A parsed HTTP response: status, lower-cased headers, body."""

    status: int
    headers: dict[str, str]
    body: bytes


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        part = sock.recv(65536)
        if not part:
            break
        data += part
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split(" ")[1]), headers


def http_request(
    url: str, method: str, path: str, headers: dict[str, str] | None = None, timeout: float = 5.0
) -> HttpAnswer:
    """Send one HTTP/1.1 request and read the whole answer (the daemon closes after it)."""
    host, port = _address(url)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        head, rest = _read_head(sock)
        status, parsed = _parse_head(head)
        body = rest
        while part := sock.recv(65536):
            body += part
    if method == "HEAD":
        return HttpAnswer(status=status, headers=parsed, body=body)
    length = int(parsed.get("content-length", len(body)))
    return HttpAnswer(status=status, headers=parsed, body=body[:length])


def raw_http(url: str, data: bytes, *, chunk: int = 0, timeout: float = 5.0) -> HttpAnswer:
    """Send ``data`` as it is (in writes of ``chunk`` bytes, 0: one write); read the answer.

    For requests a well-behaved client would not send: no ``Host``, ``HTTP/1.0``, oversized
    heads, and heads dribbled in small writes (TCP_NODELAY, so each write is its own segment).
    """
    host, port = _address(url)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        step = chunk or len(data)
        try:
            for start in range(0, len(data), step):
                sock.sendall(data[start : start + step])
                if select.select([sock], [], [], 0)[0]:
                    break  # answered already: stop writing, as a client reading replies would
        except OSError:
            pass  # the daemon may answer and close before it has read everything
        head, rest = _read_head(sock)
        status, parsed = _parse_head(head)
        body = rest
        if status == 101:
            return HttpAnswer(status=status, headers=parsed, body=b"")  # now a WebSocket
        try:
            while part := sock.recv(65536):
                body += part
        except ConnectionResetError:
            pass  # unread request bytes make the daemon's close a reset
    length = int(parsed.get("content-length", len(body)))
    return HttpAnswer(status=status, headers=parsed, body=body[:length])


def upgrade_headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Headers of a valid WebSocket upgrade request (plus ``extra``)."""
    key = base64.b64encode(os.urandom(16)).decode()
    return {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": key,
        "Sec-WebSocket-Version": "13",
        **(extra or {}),
    }


class RawWebSocket:
    """A client WebSocket that sends and receives raw frames and never answers pings itself."""

    def __init__(self, url: str, *, headers: dict[str, str] | None = None, timeout: float = 10.0):
        host, port = _address(url)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        lines = ["GET / HTTP/1.1", f"Host: {host}:{port}"]
        lines += [f"{n}: {v}" for n, v in upgrade_headers(headers).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        head, self._buffer = _read_head(self.sock)
        self.status, self.headers = _parse_head(head)

    # --- sending ----------------------------------------------------------------------------

    def send_frame(
        self, opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0, masked: bool = True
    ) -> None:
        """Send one frame, masked as clients must unless ``masked`` is False."""
        self.send_raw(client_frame(opcode, payload, fin=fin, rsv=rsv, masked=masked))

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are (several frames in one write arrive in one read)."""
        self.sock.sendall(data)

    def send_text(self, text: str | bytes) -> None:
        """One text message in one frame (bytes are sent as they are, valid UTF-8 or not)."""
        self.send_frame(OP_TEXT, text.encode() if isinstance(text, str) else text)

    def send_json(self, message: dict[str, Any]) -> None:
        """One JSON object as a text message."""
        self.send_text(json.dumps(message))

    # --- receiving --------------------------------------------------------------------------

    def _read_exact(self, size: int, deadline: float) -> bytes:
        while len(self._buffer) < size:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            part = self.sock.recv(max(65536, size - len(self._buffer)))
            if not part:
                raise ConnectionError("connection closed by the daemon")
            self._buffer += part
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def recv_frame(self, timeout: float = 10.0) -> tuple[int, bytes]:
        """The next frame from the daemon as ``(opcode, payload)``; pings are NOT answered."""
        deadline = time.monotonic() + timeout
        first, second = self._read_exact(2, deadline)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self._read_exact(2, deadline))
        elif length == 127:
            (length,) = struct.unpack("!Q", self._read_exact(8, deadline))
        assert not second & 0x80, "a server must not mask its frames"
        return first & 0x0F, self._read_exact(length, deadline)

    def recv_json(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next data message as JSON, answering pings on the way."""
        deadline = time.monotonic() + timeout
        while True:
            opcode, payload = self.recv_frame(max(0.01, deadline - time.monotonic()))
            if opcode == OP_PING:
                self.send_frame(OP_PONG, payload)
                continue
            if opcode in (OP_TEXT, OP_BINARY):
                value: dict[str, Any] = json.loads(payload)
                return value
            raise ConnectionError(f"unexpected frame opcode {opcode}")

    def request(self, message: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
        """Send a request and return the next data message (tests send one at a time)."""
        self.send_json(message)
        return self.recv_json(timeout)

    def wait_closed(self, timeout: float = 10.0) -> float:
        """Read (and drop) frames until the daemon ends the TCP connection; seconds waited."""
        start = time.monotonic()
        deadline = start + timeout
        try:
            while True:
                self.recv_frame(max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            raise
        except (ConnectionError, OSError):
            return time.monotonic() - start

    def close(self) -> None:
        """Drop the socket without a closing handshake."""
        self.sock.close()

    def __enter__(self) -> RawWebSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def client_frame(
    opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0, masked: bool = True
) -> bytes:
    """The bytes of one client frame; ``rsv`` is OR-ed into the first byte (0x40, 0x20, 0x10)."""
    first = (0x80 if fin else 0) | rsv | opcode
    mask_bit = 0x80 if masked else 0
    length = len(payload)
    if length < 126:
        header = struct.pack("!BB", first, mask_bit | length)
    elif length < 1 << 16:
        header = struct.pack("!BBH", first, mask_bit | 126, length)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, length)
    if not masked:
        return header + payload
    mask = os.urandom(4)
    return header + mask + _mask(payload, mask)


def _mask(payload: bytes, mask: bytes) -> bytes:
    if not payload:
        return payload
    # XOR with the mask repeated over the payload, done as one big integer operation.
    repeated = (mask * (len(payload) // 4 + 1))[: len(payload)]
    value = int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")
    return value.to_bytes(len(payload), "big")
