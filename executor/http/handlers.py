"""The ``http/request`` route: buffered answers, streamed bodies, one stream table per connection.

Buffered mode answers once the whole body is read. Streaming mode answers as soon as the
headers are in, with an empty ``bodyBase64``; the body follows as ``http/request/bodyDelta``
notifications from a task the connection's ``StreamTable`` owns. The answer is written before
that task starts (``Reply.after``), so no delta can overtake it. A stream's deltas belong to
the connection that asked — not to its session — so when the connection goes away its
streams are cancelled and their sockets closed.

Each request leaves one audit line (``executor.audit``) when it is answered, or for a stream
when its body ends: the method, scheme, host, port and path — not the query, which often
carries credentials — the status, the body sizes and the duration; no header, no body.
"""

from __future__ import annotations

import asyncio
import functools
import os
import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, cast

from executor import audit
from executor.errors import ExecutorError, InternalError, InvalidParams
from executor.http.client import BodyFailure, BodyTooLarge, Exchange, HttpFailure, ResponseHead
from executor.http.params import HttpRequestParams, OutgoingRequest, prepare
from executor.http.policy import HttpPolicy
from executor.http.pools import pool_for
from executor.protocol import b64codec, jsonrpc, methods
from executor.protocol.messages import b64
from executor.routing import Reply, Route, route

if TYPE_CHECKING:
    from executor.routing import RequestContext
    from executor.session import Attachment

__all__ = ["DELTA_BYTES", "StreamTable", "http_routes"]

#: Largest decoded body delta (protocol.md §9).
DELTA_BYTES: Final = 1024 * 1024
_SCOPE_KEY: Final = "executor.http.streams"


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The system's trust store (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured), built once."""
    return ssl.create_default_context()


class StreamTable:
    """The streaming requests of one connection, by ``requestId``, and the tasks pumping them."""

    def __init__(self) -> None:
        self._active: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def reserve(self, request_id: str) -> None:
        """Claim ``request_id`` until its final delta is sent (or the request fails)."""
        if request_id in self._active:
            raise InvalidParams(
                f"http/request streamResponse requestId `{request_id}` is already active"
            )
        self._active.add(request_id)

    def release(self, request_id: str) -> None:
        """Free ``request_id`` for a new stream."""
        self._active.discard(request_id)

    def start(
        self,
        request_id: str,
        exchange: Exchange,
        client: Attachment,
        ended: Callable[[int, str | None], None] | None = None,
    ) -> None:
        """Pump the body of ``exchange`` to ``client`` (called once the answer is written);
        ``ended`` hears the bytes sent and the error, if any, when the stream is over."""
        if self._closed:
            exchange.close()
            if ended is not None:
                ended(0, "connection closed")
            return
        task = asyncio.get_running_loop().create_task(
            self._pump(request_id, exchange, client, ended), name=f"http/request {request_id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _pump(
        self,
        request_id: str,
        exchange: Exchange,
        client: Attachment,
        ended: Callable[[int, str | None], None] | None,
    ) -> None:
        seq, error, sent, finished = 0, None, 0, False
        try:
            while data := await exchange.read(DELTA_BYTES):
                seq += 1
                sent += len(data)
                client.notify(methods.HTTP_BODY_DELTA, _delta(request_id, seq, data, None))
                await _drained(client)
            finished = True
        except BodyFailure as exc:
            error, finished = exc.detail, True
        finally:
            exchange.close()
            # Free the id first: a client reacting to the final delta may reuse it at once.
            self.release(request_id)
            if ended is not None:
                ended(sent, error if finished else "connection closed")
        client.notify(methods.HTTP_BODY_DELTA, _delta(request_id, seq + 1, b"", error))

    def close(self) -> None:
        """The connection ended: stop every stream (their sockets close as the tasks unwind)."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()


async def _drained(client: Attachment) -> None:
    """Wait while the client's write buffer is over its mark (a slow reader slows the body)."""
    if client.congested:
        drained: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not drained.done():
                drained.set_result(None)

        client.on_drain(wake)
        await drained


def _delta(request_id: str, seq: int, data: bytes, error: str | None) -> dict[str, Any]:
    return {
        "requestId": request_id,
        "seq": seq,
        "deltaBase64": b64(data),
        "done": not data,
        "error": error,
    }


def _header_list(head: ResponseHead) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in head.headers]


def _head_json(head: ResponseHead) -> bytes:
    """``{"status":…,"headers":[…],"bodyBase64":"`` — the answer up to the body text."""
    wire = jsonrpc.dumps({"status": head.status, "headers": _header_list(head)})
    return wire[:-1] + b',"bodyBase64":"'


def _streams(ctx: RequestContext) -> StreamTable:
    scope = ctx.connection_scope()
    table = scope.get(_SCOPE_KEY)
    if table is None:
        table = scope[_SCOPE_KEY] = StreamTable()
    assert isinstance(table, StreamTable)
    return table


async def _open(exchange: Exchange) -> ResponseHead:
    try:
        return await exchange.open()
    except HttpFailure as exc:
        raise InternalError(f"http/request failed: {exc.detail}") from exc


async def _fetch(exchange: Exchange, limit: int) -> tuple[ResponseHead, bytes]:
    try:
        return await exchange.fetch(limit)
    except HttpFailure as exc:
        raise InternalError(f"http/request failed: {exc.detail}") from exc
    except BodyFailure as exc:
        raise InternalError(f"failed to read http/request response body: {exc.detail}") from exc
    except BodyTooLarge as exc:
        raise InternalError(
            f"http/request failed: response body exceeds {exc.limit} bytes; use streamResponse"
        ) from exc


def _target(request: OutgoingRequest) -> dict[str, Any]:
    """Where a request goes, as audit fields: no query, no credentials."""
    url = request.url
    return {
        "scheme": url.scheme,
        "host": audit.bounded(url.host, 256),
        "port": url.port,
        "path": audit.bounded(url.path),
        "requestBytes": len(request.body),
    }


async def http_request(ctx: RequestContext, params: HttpRequestParams, policy: HttpPolicy) -> Any:
    """``http/request`` under ``policy``: validate, send, then answer buffered or start a stream."""
    if not policy.enabled:
        raise InvalidParams("http/request is disabled on this executor")
    assert ctx.session is not None  # the handshake gate guarantees an attached session
    # The session's own pool: no connection ever carries another session's exchanges.
    pool = pool_for(ctx.session, policy, _tls_context)
    origin = audit.origin(ctx)
    method = audit.bounded(params.method, 64)
    if not params.stream_response:
        with audit.operation("http.request", origin, method=method) as fields:
            request = prepare(params, policy, os.environ)
            fields.update(_target(request))
            exchange = Exchange(request, pool, check_host=policy.check_host)
            try:
                head, body = await _fetch(exchange, policy.max_buffered_bytes)
            finally:
                exchange.close()
            fields.update(status=head.status, responseBytes=len(body))
        return jsonrpc.Spliced((_head_json(head), b64codec.encode(body), b'"}'))
    streams = _streams(ctx)
    streams.reserve(params.request_id)  # before validation, as the reference checks it first
    started = time.monotonic()
    described: dict[str, Any] = {"method": method, "stream": True}
    try:
        request = prepare(params, policy, os.environ)
        described.update(_target(request))
        exchange = Exchange(request, pool, check_host=policy.check_host)
        try:
            head = await _open(exchange)
        except BaseException:
            exchange.close()
            raise
    except ExecutorError as exc:
        streams.release(params.request_id)
        audit.annotate(exc, "http.request", **described, durationMs=audit.duration_ms(started))
        raise
    except BaseException:
        streams.release(params.request_id)
        raise

    def ended(sent: int, error: str | None) -> None:
        audit.record(
            "http.request",
            origin,
            **described,
            status=head.status,
            responseBytes=sent,
            error=None if error is None else audit.bounded(error),
            durationMs=audit.duration_ms(started),
        )

    # The connection is its session's Attachment; deltas go to it, never to a later one.
    client = cast("Attachment", ctx)
    result = {"status": head.status, "headers": _header_list(head), "bodyBase64": ""}
    return Reply(
        result,
        functools.partial(streams.start, params.request_id, exchange, client, ended),
    )


def http_routes(policy: HttpPolicy, refusal: str | None = None) -> list[Route]:
    """The ``http/request`` route, under the operator's ``policy``; ``refusal`` says why every
    request is refused (a policy floor that restricts the network)."""

    async def handle(ctx: RequestContext, params: HttpRequestParams) -> Any:
        if refusal is not None:
            raise InvalidParams(refusal)
        return await http_request(ctx, params, policy)

    return [route(methods.HTTP_REQUEST, HttpRequestParams, handle)]
