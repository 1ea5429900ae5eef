"""One HTTP exchange: send, follow redirects, read the body — under one deadline.

Everything runs on the event loop. ``wire`` is one connection (h11 frames and parses),
``egress`` decides where connections may go, ``pools`` whose connections they are. What is
the reference's is here: the redirect rules, which headers are sent and in what order, and
the error texts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import h11

from executor.http.params import OutgoingRequest
from executor.http.pools import Origin, SessionPool
from executor.http.url import UnsupportedScheme, Url, UrlError
from executor.http.wire import Connection, ConnectionLost, WireError

__all__ = ["BodyFailure", "BodyTooLarge", "Exchange", "HttpFailure", "ResponseHead"]

#: reqwest's default: ten redirects are followed; the eleventh 3xx is an error.
MAX_REDIRECTS: Final = 10
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
#: Dropped from a redirected request that leaves the origin (scheme, host, port), with the
#: headers whose value came from the executor's environment.
_SENSITIVE: Final = frozenset(
    {"authorization", "cookie", "cookie2", "proxy-authorization", "www-authenticate"}
)
#: Describe a body that a redirect to GET no longer has.
_BODY_HEADERS: Final = frozenset(
    {"content-length", "content-type", "content-encoding", "transfer-encoding"}
)
#: Methods whose body has no defined meaning (RFC 9110 §9.3): a server may leave it unread
#: and take it for the next request. Sent with a body, they close the connection after.
_BODILESS: Final = frozenset({"GET", "HEAD", "DELETE", "OPTIONS", "TRACE", "CONNECT"})


class HttpFailure(Exception):
    """The request failed before a response head arrived; ``detail`` is the reference's text."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class BodyFailure(Exception):
    """The response body could not be read to its end (cut short, bad chunking, deadline)."""

    detail: Final = "error decoding response body"


class BodyTooLarge(Exception):
    """A buffered body outgrew its limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseHead:
    """Status and headers (lowercase names, wire order, duplicates kept)."""

    status: int
    headers: tuple[tuple[str, str], ...]


class Exchange:
    """One request and its response body: ``open`` (or ``fetch``) once, ``read`` until b"",
    then ``close`` — always: an exchange left open holds its connection.

    ``check_host`` vets every redirect hop by name before it is sent (it raises to refuse
    one); ``egress`` vets the address each new connection goes to. The deadline starts at
    ``open`` and covers everything up to the end of the body.
    """

    def __init__(
        self, request: OutgoingRequest, pool: SessionPool, *, check_host: Callable[[str], None]
    ) -> None:
        self.request = request
        self._pool = pool
        self._check_host = check_host
        self._url = request.url
        self._deadline: float | None = None
        self._connection: Connection | None = None
        self._origin: Origin = ("", "", 0)
        #: What a read returned beyond the size asked for.
        self._pending = b""

    async def open(self) -> ResponseHead:
        """Send the request (following redirects) and return the final response's head."""
        self._start()
        if self._deadline is None:  # no timer to arm (most requests): no timeout scope
            return await self._open()
        try:
            async with asyncio.timeout_at(self._deadline):
                return await self._open()
        except TimeoutError:
            raise self._failure() from None

    async def read(self, size: int) -> bytes:
        """Up to ``size`` bytes of body; b"" at its end. ``BodyFailure`` if it breaks off or
        the deadline passes."""
        if self._pending:
            data, self._pending = self._pending[:size], self._pending[size:]
            return data
        connection = self._connection
        if connection is None:
            return b""
        try:
            async with asyncio.timeout_at(self._deadline):
                data = await connection.receive()
        except (TimeoutError, WireError) as exc:
            self.close()
            raise BodyFailure from exc
        if not data:
            self._finish()
        elif len(data) > size:
            data, self._pending = data[:size], data[size:]
        return data

    async def fetch(self, limit: int) -> tuple[ResponseHead, bytes]:
        """``open`` and the whole body (buffered mode).

        ``BodyTooLarge`` past ``limit`` bytes; ``HttpFailure``/``BodyFailure`` as above.
        """
        head = await self.open()
        connection = self._connection
        assert connection is not None
        try:
            if self._deadline is None:
                body = await _read_body(connection, limit)
            else:
                async with asyncio.timeout_at(self._deadline):
                    body = await _read_body(connection, limit)
        except (TimeoutError, WireError) as exc:
            raise BodyFailure from exc
        self._finish()
        return head, body

    def close(self) -> None:
        """Release the connection: back to the session's pool if the body was read to its
        end (``read`` returned b""), closed otherwise."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def _finish(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool.release(self._origin, connection)

    def _start(self) -> None:
        timeout = self.request.timeout
        if timeout == 0:
            # What the reference answers for a zero deadline, before any connection attempt.
            raise HttpFailure("route-aware request timed out")
        if timeout is not None:
            self._deadline = asyncio.get_running_loop().time() + timeout

    def _failure(self) -> HttpFailure:
        return HttpFailure(f"error sending request for url ({self._url.display()})")

    async def _open(self) -> ResponseHead:
        request = self.request
        url, method, body = request.url, request.method, request.body
        headers = list(request.headers)
        hops = 0
        while True:
            response = await self._send(url, method, headers, body)
            target = self._redirect_target(url, response) if request.follow_redirects else None
            if target is None:
                return _head(response)
            if hops == MAX_REDIRECTS:
                raise HttpFailure("too many redirects")
            hops += 1
            self._check_host(target.host)
            self.close()  # the redirect's body is not read: its connection is not reused
            method, body, headers = _redirected(
                response.status_code, url, target, method, body, headers, request.secret_headers
            )
            url = target

    async def _send(
        self, url: Url, method: str, headers: list[tuple[str, bytes]], body: bytes
    ) -> h11.Response:
        self._url, self._origin = url, (url.scheme, url.hostname, url.port)
        wire = _wire_headers(url, method, headers, body)
        target = url.target.encode("ascii")
        while True:
            try:
                self._connection, reused = await self._pool.open(self._origin)
            except WireError as exc:
                raise self._failure() from exc
            try:
                return await self._connection.send(method.encode("ascii"), target, wire, body)
            except WireError as exc:
                self.close()
                if reused and isinstance(exc, ConnectionLost):
                    continue  # the server closed it while idle: nothing was answered
                raise self._failure() from exc

    def _redirect_target(self, url: Url, response: h11.Response) -> Url | None:
        if response.status_code not in _REDIRECTS:
            return None
        location = next((value for name, value in response.headers if name == b"location"), None)
        if location is None:
            return None
        try:
            target = url.join(location.decode("utf-8", "replace"))
        except UnsupportedScheme as exc:
            raise HttpFailure(
                f"redirect target uses unsupported URL scheme: {exc.scheme}"
            ) from None
        except UrlError:
            return None  # an unusable Location: the 3xx itself is the answer, as in the reference
        return target


async def _read_body(connection: Connection, limit: int) -> bytes:
    """The rest of the response body; ``BodyTooLarge`` past ``limit`` bytes."""
    first = await connection.receive()
    if not first:
        return b""
    if len(first) > limit:
        raise BodyTooLarge(limit)
    data = await connection.receive()
    if not data:  # the commonest case, a body in one piece: no copy into a bytearray
        return bytes(first)
    body = bytearray(first)
    while data:
        body += data
        if len(body) > limit:
            raise BodyTooLarge(limit)
        data = await connection.receive()
    return bytes(body)


def _wire_headers(
    url: Url, method: str, headers: list[tuple[str, bytes]], body: bytes
) -> list[tuple[bytes, bytes]]:
    """The head in the reference's order: the caller's headers, then the defaults (h11
    writes ``host`` first whatever its place here)."""
    wire = [(name.encode("ascii"), value) for name, value in headers]
    names = {name for name, _ in headers}
    if "accept" not in names:
        wire.append((b"accept", b"*/*"))
    wire.append((b"host", url.authority.encode("ascii")))
    if body:
        if "content-length" not in names:
            wire.append((b"content-length", b"%d" % len(body)))
        if method.upper() in _BODILESS:
            # Whether the server read the body or took it for a request is in doubt: the
            # connection is not used again (h11 closes it after the response).
            wire.append((b"connection", b"close"))
    return wire


def _redirected(
    status: int,
    previous: Url,
    target: Url,
    method: str,
    body: bytes,
    headers: list[tuple[str, bytes]],
    secret: frozenset[str],
) -> tuple[str, bytes, list[tuple[str, bytes]]]:
    """Method, body and headers of the next hop (reqwest's rules, which browsers share)."""
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        method, body = "GET", b""
        headers = [(n, v) for n, v in headers if n not in _BODY_HEADERS]
    if target.origin() != previous.origin():
        headers = [(n, v) for n, v in headers if n not in _SENSITIVE and n not in secret]
    headers = [(n, v) for n, v in headers if n != "referer"]
    if not (previous.scheme == "https" and target.scheme == "http"):
        headers.append(("referer", previous.referer().encode("ascii")))
    return method, body, headers


def _head(response: h11.Response) -> ResponseHead:
    return ResponseHead(
        status=response.status_code,
        headers=tuple(
            (name.decode("latin-1").lower(), value.decode("latin-1"))
            for name, value in response.headers.raw_items()
        ),
    )
