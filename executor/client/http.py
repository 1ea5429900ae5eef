"""``http/request``: HTTP(S) requests the executor makes from its own host (``env.http``).

A buffered request returns the whole response at once. A streamed one returns after the
headers; its body follows as ``http/request/bodyDelta`` notifications, numbered from 1, and
ends with a delta marked ``done`` (and an ``error`` when the body failed half-way).

A stream belongs to its connection: the server does not retain a body, so nothing can be
fetched again after a dropped connection. A streamed body therefore fails at once when its
transport closes (``HttpBodyError``, ``connection_lost``), without waiting for the session to
be resumed. A request still waiting for its answer when the transport closes gets
``OutcomeUnknown``, as every request that may change something does: the server may have
sent it.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from executor.client.errors import ClientError, HttpBodyError
from executor.client.events import Changes
from executor.protocol import b64codec, methods

if TYPE_CHECKING:
    from executor.client.recovery import Link
    from executor.client.rpc import RpcConnection

__all__ = ["BodyStream", "Http", "HttpBodyError", "HttpResponse", "StreamedResponse"]

#: What ``headers=`` may be: a mapping, or (name, value) pairs in order (duplicates kept),
#: or wire header objects (``{"name", "value", "valueEnvVar"}``).
Headers = Mapping[str, str] | Iterable[tuple[str, str] | Mapping[str, str]]


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A whole response."""

    status: int
    #: (name, value) pairs as the server sent them: lowercase names, in order, duplicates kept.
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or ``None``."""
        return _header(self.headers, name)


class BodyStream:
    """The body deltas of one streamed request, in ``seq`` order, until ``done``."""

    def __init__(self, request_id: str, url: str, rpc: RpcConnection) -> None:
        self.request_id = request_id
        self.url = url
        #: The connection the body arrives on (it dies with it).
        self.rpc = rpc
        self.done = False
        self.error: HttpBodyError | None = None
        #: The reader stopped early: deltas still arriving are dropped.
        self.abandoned = False
        self._next = 1
        self._pending: dict[int, tuple[bytes, bool, str | None]] = {}
        self._blocks: deque[bytes] = deque()
        self._changes = Changes()

    @property
    def finished(self) -> bool:
        """No more deltas will be taken."""
        return self.done or self.error is not None

    def offer(self, params: Mapping[str, Any]) -> None:
        """One ``http/request/bodyDelta``; held until every lower seq has been taken."""
        if self.finished:
            return
        seq = int(params["seq"])
        if seq < self._next:
            return
        data = b64codec.decode(params.get("deltaBase64") or "")
        error = params.get("error")
        self._pending.setdefault(seq, (data, bool(params.get("done")), error))
        while (delta := self._pending.pop(self._next, None)) is not None:
            self._next += 1
            data, done, error = delta
            if data and not self.abandoned:
                self._blocks.append(data)
            if done:
                if error:
                    self.error = HttpBodyError(self.url, str(error))
                else:
                    self.done = True
                self._pending.clear()
                break
        self._changes.notify()

    def lose(self, reason: str) -> None:
        """The connection ended (``reason``): the rest of the body will never come."""
        if self.finished:
            return
        self.error = HttpBodyError(
            self.url,
            f"{reason}; a streamed body is not retained by the executor and cannot be resumed",
            connection_lost=True,
        )
        self._pending.clear()
        self._changes.notify()

    async def next_block(self) -> bytes | None:
        """The next block of the body; ``None`` at its end; the error, raised."""
        while True:
            if self._blocks:
                return self._blocks.popleft()
            if self.done or self.abandoned:
                return None
            if self.error is not None:
                raise self.error
            await self._changes.wait()

    def abandon(self) -> None:
        """Drop what arrived and what is still to come (the reader ends)."""
        self.abandoned = True
        self._blocks.clear()
        self._changes.notify()


class StreamedResponse:
    """A response whose body is streamed: ``status`` and ``headers`` now, the body as an
    async iterator of byte blocks (``body``) or all at once (``read()``).

    Use it with ``async with`` (or call ``aclose()``) when not reading the body to its end:
    the executor goes on sending it, and the client drops what arrives."""

    def __init__(
        self, stream: BodyStream, status: int, headers: tuple[tuple[str, str], ...]
    ) -> None:
        self._stream = stream
        self.status = status
        #: (name, value) pairs: lowercase names, in order, duplicates kept.
        self.headers = headers
        self.request_id = stream.request_id
        #: The body, block by block (each at most 1 MiB), until its end. Raises
        #: ``HttpBodyError`` if it does not arrive whole. One consumer.
        self.body: AsyncIterator[bytes] = self._blocks()

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or ``None``."""
        return _header(self.headers, name)

    async def _blocks(self) -> AsyncIterator[bytes]:
        while (block := await self._stream.next_block()) is not None:
            yield block

    async def read(self) -> bytes:
        """The rest of the body."""
        return b"".join([block async for block in self.body])

    async def aclose(self) -> None:
        """Stop reading: the body ends here, and what is still to come is dropped."""
        self._stream.abandon()

    async def __aenter__(self) -> StreamedResponse:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<StreamedResponse {self.status} {self._stream.url}>"


class Http:
    """HTTP(S) requests made by the executor, from its host (``env.http``)."""

    def __init__(self, link: Link) -> None:
        self._link = link

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Headers | None = None,
        body: bytes | None = None,
        timeout_ms: int | None = None,
        follow_redirects: bool = True,
    ) -> HttpResponse:
        """Send one request and return the whole response (any status: a 404 is a
        response, not an error; a failure to get one is a ``ServerError``).

        ``headers``: a mapping or (name, value) pairs (a wire header object with
        ``valueEnvVar`` too); ``timeout_ms``: for the whole exchange; ``follow_redirects``:
        ``False`` returns a 3xx as it is. Cut off by a dropped connection, it raises
        ``OutcomeUnknown`` (the executor may have sent it)."""
        params = _params(method, url, headers, body, timeout_ms, follow_redirects, stream=False)
        result = await self._link.call(methods.HTTP_REQUEST, params, idempotent=False)
        status, response_headers = _head(result)
        return HttpResponse(
            status, response_headers, b64codec.decode(result.get("bodyBase64") or "")
        )

    async def stream(
        self,
        method: str,
        url: str,
        *,
        headers: Headers | None = None,
        body: bytes | None = None,
        timeout_ms: int | None = None,
        follow_redirects: bool = True,
    ) -> StreamedResponse:
        """Send one request and return once its headers are in; the body streams
        (``StreamedResponse.body``). Same options as ``request``. The body fails at once,
        with ``HttpBodyError``, if the connection drops while it streams."""
        params = _params(method, url, headers, body, timeout_ms, follow_redirects, stream=True)
        stream, result = await self._link.start_http_stream(params, url)
        status, response_headers = _head(result)
        return StreamedResponse(stream, status, response_headers)


def _params(
    method: str,
    url: str,
    headers: Headers | None,
    body: bytes | None,
    timeout_ms: int | None,
    follow_redirects: bool,
    *,
    stream: bool,
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "method": method,
        "url": url,
        "headers": _wire_headers(headers),
        "bodyBase64": None if body is None else b64codec.encode(body).decode(),
        "timeoutMs": timeout_ms,
        "redirectPolicy": "follow" if follow_redirects else "stop",
        "requestId": f"client-http-{uuid.uuid4().hex}",
        "streamResponse": stream,
    }
    return params


def _wire_headers(headers: Headers | None) -> list[dict[str, str]]:
    if headers is None:
        return []
    items: Iterable[Any] = headers.items() if isinstance(headers, Mapping) else headers
    wire: list[dict[str, str]] = []
    for item in items:
        if isinstance(item, Mapping):
            wire.append({str(key): str(value) for key, value in item.items()})
        else:
            name, value = item
            wire.append({"name": str(name), "value": str(value)})
    return wire


def _head(result: Any) -> tuple[int, tuple[tuple[str, str], ...]]:
    if not isinstance(result, dict):
        raise ClientError(f"http/request: unexpected answer {result!r}")
    headers = tuple(
        (str(header["name"]), str(header["value"])) for header in result.get("headers") or ()
    )
    return int(result["status"]), headers


def _header(headers: tuple[tuple[str, str], ...], name: str) -> str | None:
    wanted = name.lower()
    return next((value for key, value in headers if key.lower() == wanted), None)
