"""One client connection: envelopes in, handshake gate, handlers, answers and notifications out.

Transport-agnostic: a transport calls ``message_received`` with each complete message and
``connection_lost`` at the end, and reports write-buffer pressure; the connection calls the
transport's ``send_message``, ``close``, ``pause_reading`` and ``resume_reading``.

Ordering on one connection is well defined: messages go out in the order they are produced.
Synchronous methods are answered inline, so their answers keep arrival order; ``async``
methods (long polls, spawns, file I/O) run concurrently and answer when done. A process's
notifications never precede its ``process/start`` response and always follow seq order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from executor import audit
from executor.audit.refusals import RefusalLog
from executor.errors import ExecutorError, InvalidRequest, MethodNotFound
from executor.protocol import jsonrpc, methods
from executor.protocol.connection import HandshakeState, Phase
from executor.protocol.decode import decode, decode_unit
from executor.protocol.messages import InitializeParams
from executor.routing import Reply, Route
from executor.session import Session, SessionRegistry

__all__ = ["Connection", "ConnectionHost", "MessageTransport"]

_READY = Phase.READY
# The request path's module attributes, bound once (each request looks them up).
_parse_fields = jsonrpc.parse_fields
_Request = jsonrpc.Request
_new_tuple = tuple.__new__
_Spliced = jsonrpc.Spliced
_encode_result = jsonrpc.encode_result

log = logging.getLogger("executor.connection")
#: Refused requests and bad messages of every connection, on the audit logger: a burst per
#: method and code, then a count (a client refusing to behave cannot fill the log).
_REFUSALS = RefusalLog(audit.log)


class MessageTransport(Protocol):
    """What a connection needs from its transport."""

    peer: str

    def send_message(self, data: bytes) -> None:
        """Send one encoded message."""

    def send_message_parts(self, parts: list[bytes | bytearray | memoryview]) -> None:
        """Send one encoded message given as parts, without joining them first."""

    def close(self, code: int = 1000, reason: str = "") -> None:
        """End the transport."""

    def pause_reading(self) -> None:
        """Stop delivering inbound messages for now."""

    def resume_reading(self) -> None:
        """Deliver inbound messages again."""


class ConnectionHost(Protocol):
    """What a connection needs from the daemon that accepted it."""

    @property
    def routes(self) -> Mapping[str, Route]:
        """Every routed method (the handshake is the connection's own)."""

    @property
    def sessions(self) -> SessionRegistry:
        """Where ``initialize`` creates or resumes the connection's session."""

    @property
    def environment_wire(self) -> dict[str, Any]:
        """``environmentInfo`` of the ``initialize`` answer."""

    @property
    def max_inflight_requests(self) -> int:
        """Concurrent ``async`` requests before the connection stops reading (backpressure)."""

    def connection_closed(self, connection: Connection) -> None:
        """The connection ended; forget it."""


class Connection:
    """The JSON-RPC side of one client connection."""

    def __init__(
        self, host: ConnectionHost, transport: MessageTransport, *, parse_error_prefix: str
    ) -> None:
        self.host = host
        self.transport = transport
        #: Who is on the other end (``RequestContext.peer``), as the transport names it.
        self.peer = transport.peer
        self.session: Session | None = None
        self.handshake = HandshakeState()
        self._parse_error_prefix = parse_error_prefix
        self._tasks: set[asyncio.Task[None]] = set()
        self._write_paused = False
        self._read_paused = False
        self._drain_callbacks: list[Callable[[], None]] = []
        self._closed = False
        self._scope: dict[str, Any] = {}
        #: The daemon's route table (built once, before connections are accepted).
        self._routes = host.routes
        log.info("connection %s opened", transport.peer)

    # --- inbound ----------------------------------------------------------------------------

    def message_received(self, data: bytes | memoryview | str) -> None:
        """Handle one complete inbound message."""
        if self._closed:
            return
        message = _parse_fields(data)
        if type(message) is tuple:  # a well-formed request: (id, method, params)
            # (mypy does not narrow a union by ``type(...) is tuple``: the envelopes are tuples)
            request_id, method, params = message  # type: ignore[misc]
            route = self._routes.get(method)
            # Fast path for the commonest requests (liveness probes, environment/info):
            # a synchronous method without params on a ready connection is answered here,
            # without the general dispatch's layers; the answer is identical.
            if (
                route is not None
                and route.params is None
                and not route.is_async
                and self.handshake.phase is _READY
                and (params is None or params == {})
            ):
                try:
                    result = route.handler(self, None)
                except Exception as exc:
                    self._failed(_new_tuple(_Request, message), exc)
                    return
                kind = type(result)
                if kind is Reply or kind is _Spliced:
                    self._respond(_new_tuple(_Request, message), result)
                elif not self._closed:
                    self.transport.send_message(_encode_result(request_id, result))
                return
            self._request(_new_tuple(_Request, message))
        elif type(message) is _Request:  # one the general classification read
            self._request(message)
        elif type(message) is jsonrpc.Notification:
            self._notification(message)
        elif type(message) is jsonrpc.ClientResponse:
            self._out_of_band(
                InvalidRequest(
                    "unexpected response from the client: this executor sends no requests"
                )
            )
        else:
            assert isinstance(message, jsonrpc.Malformed)
            self._out_of_band(InvalidRequest(self._parse_error_prefix + message.detail))

    def message_rejected(self, reason: str) -> None:
        """The transport dropped a message it could not take (e.g. too long)."""
        self._out_of_band(InvalidRequest(self._parse_error_prefix + reason))

    def _request(self, request: jsonrpc.Request) -> None:
        if request.method == methods.INITIALIZE:
            self._answer(request, self._initialize, InitializeParams, None)
            return
        route = self.host.routes.get(request.method)
        if route is None:
            self._error(request, MethodNotFound(request.method))
            return
        self._answer(request, route.handler, route.params, route)

    def _answer(
        self,
        request: jsonrpc.Request,
        handler: Callable[..., Any],
        params_type: type | None,
        route: Route | None,
    ) -> None:
        try:
            if params_type is None:
                decode_unit(request.params)
                params: Any = None
            else:
                params = decode(params_type, request.params)
            if route is not None and self.handshake.phase is not _READY:
                self.handshake.check_method(request.method)
            if route is None or not route.is_async:
                self._respond(request, handler(self, params))
                return
        except Exception as exc:
            self._failed(request, exc)
            return
        self._spawn_task(request, handler(self, params), route)

    def _failed(self, request: jsonrpc.Request, exc: Exception) -> None:
        """A handler raised: its own error, or an internal one (logged) for a bug."""
        if isinstance(exc, ExecutorError):
            self._error(request, exc)
        else:
            log.exception("%s failed", request.method, exc_info=exc)
            self._error(request, _internal(request.method))

    def _spawn_task(self, request: jsonrpc.Request, work: Any, route: Route) -> None:
        task = asyncio.get_running_loop().create_task(self._run(request, work))
        task.survives_disconnect = route.survives_disconnect  # type: ignore[attr-defined]
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        if len(self._tasks) >= self.host.max_inflight_requests and not self._read_paused:
            self._read_paused = True
            self.transport.pause_reading()

    async def _run(self, request: jsonrpc.Request, work: Any) -> None:
        try:
            result = await work
        except Exception as exc:  # CancelledError is a BaseException: it propagates
            self._failed(request, exc)
        else:
            self._respond(request, result)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._read_paused and len(self._tasks) < self.host.max_inflight_requests // 2:
            self._read_paused = False
            if not self._write_paused:
                self.transport.resume_reading()

    def _notification(self, note: jsonrpc.Notification) -> None:
        if note.method != methods.INITIALIZED:
            # The reference drops the connection here; we say why and keep it.
            self._out_of_band(MethodNotFound(note.method), f"unknown notification `{note.method}`")
            return
        if not self.handshake.initialized_received():
            self._out_of_band(InvalidRequest("initialized must follow a successful initialize"))

    # --- handshake --------------------------------------------------------------------------

    def _initialize(self, _ctx: Connection, params: InitializeParams) -> Any:
        self.handshake.check_initialize()
        registry = self.host.sessions
        if params.resume_session_id is not None:
            session = registry.resume(params.resume_session_id, self)
            log.info("connection %s resumed session %s", self.transport.peer, session.id)
        else:
            session = registry.create(self)
            log.info(
                "connection %s created session %s (%s)",
                self.transport.peer,
                session.id,
                params.client_name,
            )
        self.session = session
        self.handshake.initialize_succeeded()
        return {"sessionId": session.id, "environmentInfo": self.host.environment_wire}

    def connection_scope(self) -> dict[str, Any]:
        """Per-connection state that services keep (file handles, HTTP streams).

        Values with a ``close()`` method are closed when the connection ends.
        """
        return self._scope

    # --- outbound ---------------------------------------------------------------------------

    def _respond(self, request: jsonrpc.Request, result: Any) -> None:
        if type(result) is Reply:
            self._send(jsonrpc.encode_result(request.id, result.result))
            try:
                result.after()
            except Exception:
                # The answer is out; a second one for the same id would break the client.
                log.exception("%s failed after its answer was sent", request.method)
        elif type(result) is jsonrpc.Spliced:
            if not self._closed:
                self.transport.send_message_parts(jsonrpc.encode_result_parts(request.id, result))
        else:
            self._send(jsonrpc.encode_result(request.id, result))

    def _error(self, request: jsonrpc.Request, exc: ExecutorError) -> None:
        # The method is the peer's text: a routed one names the rate limit's key, others share one.
        known = request.method == methods.INITIALIZE or request.method in self.host.routes
        _REFUSALS.refused(
            f"{request.method if known else 'unrouted'} {exc.code}",
            logging.INFO,
            "refused",
            audit={
                "event": "refused",
                **self._origin(),
                "method": audit.bounded(request.method, 128),
                "code": exc.code,
                "error": audit.bounded(exc.message),
                **(exc.audit or {}),
            },
        )
        self._send(jsonrpc.encode_error(request.id, exc.code, exc.message, exc.data))

    def _out_of_band(self, exc: ExecutorError, message: str | None = None) -> None:
        text = message or exc.message
        _REFUSALS.refused(
            f"bad message {exc.code}",
            logging.INFO,
            "bad message",
            audit={
                "event": "refused",
                **self._origin(),
                "code": exc.code,
                "error": audit.bounded(text),
            },
        )
        self._send(jsonrpc.encode_error(jsonrpc.MALFORMED_ID, exc.code, text))

    def _origin(self) -> dict[str, str]:
        if self.session is None:
            return {"peer": self.peer}
        return {"session": self.session.id, "peer": self.peer}

    def _send(self, data: bytes) -> None:
        if not self._closed:
            self.transport.send_message(data)

    # The connection is the ``Attachment`` of its session.

    def notify(self, method: str, params: dict[str, Any] | jsonrpc.Spliced) -> None:
        """Push a notification to the client (``Spliced`` params are written part by part)."""
        if type(params) is jsonrpc.Spliced:
            if not self._closed:
                self.transport.send_message_parts(jsonrpc.encode_notification_parts(method, params))
            return
        self._send(jsonrpc.encode_notification(method, params))

    @property
    def congested(self) -> bool:
        """The transport's write buffer is above its high-water mark."""
        return self._write_paused

    def on_drain(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the write buffer drains (or the connection ends)."""
        if not self._write_paused or self._closed:
            callback()
        else:
            self._drain_callbacks.append(callback)

    def writing_paused(self) -> None:
        """Transport: too much is buffered; stop reading requests until it drains."""
        self._write_paused = True
        if not self._read_paused:
            self.transport.pause_reading()

    def writing_resumed(self) -> None:
        """Transport: the buffer drained."""
        self._write_paused = False
        if not self._read_paused:
            self.transport.resume_reading()
        self._fire_drain()

    def _fire_drain(self) -> None:
        callbacks, self._drain_callbacks = self._drain_callbacks, []
        for callback in callbacks:
            callback()

    def close(self, code: int, reason: str) -> None:
        """End the connection from this side (daemon shutdown): close the transport, clean up."""
        self.transport.close(code, reason)
        # Release connection state (file handles) now rather than when the socket ends.
        self.connection_lost()

    def connection_lost(self) -> None:
        """Transport: gone. Detach the session; cancel what cannot be answered anymore."""
        if self._closed:
            return
        self._closed = True
        for task in list(self._tasks):
            if not getattr(task, "survives_disconnect", False):
                task.cancel()
        if self.session is not None:
            self.host.sessions.detach(self.session, self)
        for value in self._scope.values():
            close = getattr(value, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    log.exception("closing connection state failed")
        self._scope.clear()
        self.host.connection_closed(self)
        self._fire_drain()
        log.info("connection %s closed", self.transport.peer)


def _internal(method: str) -> ExecutorError:
    from executor.errors import InternalError

    return InternalError(f"internal error while handling {method}")
