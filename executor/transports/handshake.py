"""HTTP/1.1 request head parsing and routing for the WebSocket listener (pure).

Routing follows the reference exactly:

* any request with an ``Origin`` header -> 403 (guards against browsers and DNS rebinding);
* ``GET``/``HEAD /readyz`` -> 200, other methods there -> 405 with ``allow: GET,HEAD``;
* ``GET /`` with a valid upgrade -> 101 (or 401 when authentication is on and the bearer
  token is missing or wrong: see ``auth``); without upgrade headers -> 400;
* any other path -> 404.

Stricter than the reference, as RFC 6455 §4.2.1 asks of an upgrade ("an HTTP/1.1 or higher
GET request" with a ``Host`` header): ``HTTP/1.0`` gets 400 (the reference answers 426,
which RFC 9110 reserves for asking the client to switch protocols, naming the protocol in an
``Upgrade`` header; §4.2.2 of RFC 6455 names 400 for a handshake that is not valid), and so
does an upgrade without exactly one non-empty ``Host``. ``/readyz`` stays lenient: probes
may speak HTTP/1.0 and omit ``Host``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass, field
from typing import Final

from executor.transports.auth import Authenticator

__all__ = [
    "MAX_HEAD_BYTES",
    "HandshakeError",
    "HttpRequest",
    "Response",
    "Upgrade",
    "parse_head",
    "route",
]

#: Longest request head, blank line included, accepted; a longer one gets 431, however it
#: arrives (in one read or in many).
MAX_HEAD_BYTES: Final = 16 * 1024
_GUID: Final = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
_VERSION: Final = re.compile(r"HTTP/1\.[0-9]")


class HandshakeError(ValueError):
    """The request head is not valid HTTP/1.1."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """A parsed request head; header names are lower-cased, repeated values joined.

    ``first`` keeps each header's first value, for headers where only that one counts
    (``Authorization``, as the reference reads it).
    """

    method: str
    target: str
    headers: dict[str, str] = field(default_factory=dict)
    first: dict[str, str] = field(default_factory=dict)
    #: The request line's HTTP version, ``HTTP/1.<digit>``.
    version: str = "HTTP/1.1"

    @property
    def path(self) -> str:
        """The target without its query string."""
        return self.target.split("?", 1)[0]


@dataclass(frozen=True, slots=True)
class Response:
    """A plain HTTP response that ends the exchange."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    def encode(self) -> bytes:
        """The response as bytes on the wire (the connection closes after it)."""
        lines = [f"HTTP/1.1 {self.status} {self.reason}"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        lines += [f"content-length: {len(self.body)}", "connection: close", "", ""]
        return "\r\n".join(lines).encode("latin-1") + self.body


@dataclass(frozen=True, slots=True)
class Upgrade:
    """Accept the WebSocket upgrade with this response head."""

    accept: str

    def encode(self) -> bytes:
        """The 101 response head."""
        return (
            "HTTP/1.1 101 Switching Protocols\r\n"
            "upgrade: websocket\r\n"
            "connection: Upgrade\r\n"
            f"sec-websocket-accept: {self.accept}\r\n\r\n"
        ).encode("latin-1")


def parse_head(head: bytes) -> HttpRequest:
    """Parse a request head (everything before the blank line)."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes everything
        raise HandshakeError("request head is not text") from exc
    request_line, *header_lines = text.split("\r\n")
    parts = request_line.split(" ")
    # HTTP-version = "HTTP/" DIGIT "." DIGIT (RFC 9112 §2.3); only major version 1 is spoken.
    if len(parts) != 3 or not _VERSION.fullmatch(parts[2]):
        raise HandshakeError("malformed request line")
    headers: dict[str, str] = {}
    first: dict[str, str] = {}
    for line in header_lines:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise HandshakeError("malformed header line")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
        first.setdefault(key, value)
    return HttpRequest(parts[0], parts[1], headers, first, parts[2])


def _tokens(value: str) -> set[str]:
    return {token.strip().lower() for token in value.split(",")}


def _plain(
    status: int, reason: str, body: str = "", headers: tuple[tuple[str, str], ...] = ()
) -> Response:
    extra = (("content-type", "text/plain; charset=utf-8"),) if body else ()
    return Response(status, reason, headers + extra, body.encode())


def accept_key(key: str) -> str:
    """``Sec-WebSocket-Accept`` for ``Sec-WebSocket-Key``."""
    digest = hashlib.sha1((key + _GUID).encode("ascii")).digest()
    return base64.b64encode(digest).decode("ascii")


def route(request: HttpRequest, auth: Authenticator | None = None) -> Response | Upgrade:
    """Decide what to answer to ``request``; with ``auth``, upgrades need its approval."""
    if "origin" in request.headers:
        return Response(403, "Forbidden")
    if request.path == "/readyz":
        if request.method in ("GET", "HEAD"):
            return Response(200, "OK")
        return Response(405, "Method Not Allowed", (("allow", "GET,HEAD"),))
    if request.path != "/":
        return Response(404, "Not Found")
    if request.method != "GET":
        return Response(405, "Method Not Allowed", (("allow", "GET"),))
    return _upgrade(request, auth)


def _upgrade(request: HttpRequest, auth: Authenticator | None) -> Response | Upgrade:
    headers = request.headers
    if "upgrade" not in _tokens(headers.get("connection", "")):
        return _plain(400, "Bad Request", "Connection header did not include 'upgrade'")
    if "websocket" not in _tokens(headers.get("upgrade", "")):
        return _plain(400, "Bad Request", "Upgrade header did not include 'websocket'")
    if headers.get("sec-websocket-version", "").strip() != "13":
        return _plain(
            426,
            "Upgrade Required",
            "unsupported WebSocket version",
            (("sec-websocket-version", "13"),),
        )
    key = headers.get("sec-websocket-key", "").strip()
    try:
        valid = len(base64.b64decode(key, validate=True)) == 16
    except (binascii.Error, ValueError):
        valid = False
    if not valid:
        return _plain(400, "Bad Request", "invalid Sec-WebSocket-Key header")
    # Checked after the reference's own checks, so their answers stay the reference's.
    if request.version == "HTTP/1.0":
        return _plain(400, "Bad Request", "WebSocket upgrade requires HTTP/1.1 or higher")
    if not request.first.get("host"):
        return _plain(400, "Bad Request", "missing Host header")
    if headers["host"] != request.first["host"]:
        return _plain(400, "Bad Request", "more than one Host header")
    if auth is not None and (refusal := auth.refusal(request.first.get("authorization"))):
        return _plain(401, "Unauthorized", refusal)
    return Upgrade(accept_key(key))
