"""``Connection`` in memory: the JSON-RPC side of one client, without a socket or a daemon.

A real ``executor.server.Connection`` runs inside one event loop between a recording
transport and a host of test routes (``tests.support.memory_transport``). The wire shapes
asserted here are the ones the live-daemon tests assert over a WebSocket
(``test_handshake.py``, ``protocol/test_dialect.py``, ``test_sessions.py``); only the
parse-error prefix differs, since each transport names itself there.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import pytest

from executor.errors import NotFound
from executor.protocol import jsonrpc
from executor.routing import Reply, RequestContext, Route, route
from tests.support.memory_transport import (
    ENVIRONMENT_WIRE,
    PARSE_PREFIX,
    MemoryClient,
    MemoryHost,
    settle,
)

READY = {"status": "ready"}


def in_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an ``async`` test in a fresh event loop, bounded so a hang fails fast."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        async def bounded() -> None:
            async with asyncio.timeout(2):
                await test(*args, **kwargs)

        asyncio.run(bounded())

    return run


# --- the test routes ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyParams:
    """Params of every test route with params: one key naming the call."""

    key: str


class Handle:
    """A per-connection value with ``close()``, as an open file handle is."""

    def __init__(self, events: list[str], key: str) -> None:
        self.events = events
        self.key = key

    def close(self) -> None:
        self.events.append(f"closed {self.key}")
        if self.key == "faulty":
            raise OSError("close failed")


class Services:
    """The routes a test host offers, and what their handlers did (``events``)."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self._gates: dict[str, asyncio.Future[Any]] = {}

    def gate(self, key: str) -> asyncio.Future[Any]:
        """What the async call ``key`` waits for."""
        if key not in self._gates:
            self._gates[key] = asyncio.get_running_loop().create_future()
        return self._gates[key]

    def release(self, key: str, result: Any = None) -> None:
        """Let the async call ``key`` answer (``result`` replaces ``{"key": key}``)."""
        self.gate(key).set_result(result)

    def routes(self) -> list[Route]:
        return [
            route("environment/status", None, lambda _ctx, _params: READY),
            route("test/echo", KeyParams, lambda _ctx, params: {"key": params.key}),
            route("test/wait", KeyParams, self._wait),
            route("test/keep", KeyParams, self._wait, survives_disconnect=True),
            route("test/reply", KeyParams, self._reply),
            route("test/missing", KeyParams, self._missing),
            route("test/boom", KeyParams, self._boom),
            route("test/open", KeyParams, self._open),
            route("test/spliced", KeyParams, self._spliced),
            route("test/unitBoom", None, self._boom),
            route("test/unitReply", None, self._reply),
            route("test/badAfter", KeyParams, self._bad_after),
        ]

    async def _wait(self, ctx: RequestContext, params: KeyParams) -> Any:
        try:
            result = await self.gate(params.key)
        except asyncio.CancelledError:
            self.events.append(f"cancelled {params.key}")
            raise
        self.events.append(f"finished {params.key}")
        return {"key": params.key} if result is None else result

    def _reply(self, ctx: RequestContext, params: KeyParams | None) -> Reply:
        key = params.key if params is not None else "unit"
        return Reply({"key": key}, lambda: after_reply(ctx, key))

    def _bad_after(self, _ctx: RequestContext, params: KeyParams) -> Reply:
        def fail() -> None:
            raise RuntimeError("a bug after the answer")

        return Reply({"key": params.key}, fail)

    def _missing(self, _ctx: RequestContext, params: KeyParams) -> Any:
        raise NotFound(f"no such thing: {params.key}")

    def _boom(self, _ctx: RequestContext, _params: KeyParams | None) -> Any:
        raise RuntimeError("a bug in the handler")

    def _open(self, ctx: RequestContext, params: KeyParams) -> Any:
        ctx.connection_scope()[params.key] = Handle(self.events, params.key)
        return {"key": params.key}

    def _spliced(self, _ctx: RequestContext, params: KeyParams) -> Any:
        return jsonrpc.Spliced((b'{"key":"', params.key.encode(), b'"}'))


def after_reply(ctx: RequestContext, key: str) -> None:
    """What a ``Reply.after`` does here: push a notification, as ``process/start``'s does."""
    assert ctx.session is not None
    ctx.session.notify("test/after", {"key": key})


def answer(request_id: int | str, result: Any) -> dict[str, Any]:
    return {"id": request_id, "result": result}


def error(request_id: int | str, code: int, message: str) -> dict[str, Any]:
    return {"id": request_id, "error": {"code": code, "message": message}}


def gated(request_id: int | str, method: str, *, initialized: bool = False) -> dict[str, Any]:
    verb = "send initialized" if initialized else "call initialize"
    return error(request_id, -32600, f"client must {verb} before using {method} methods")


def pair(
    services: Services, *, max_inflight_requests: int = 256
) -> tuple[MemoryHost, MemoryClient]:
    host = MemoryHost(services.routes(), max_inflight_requests=max_inflight_requests)
    return host, MemoryClient(host)


def ready(services: Services, *, max_inflight_requests: int = 256) -> MemoryClient:
    """A client past the handshake."""
    _host, client = pair(services, max_inflight_requests=max_inflight_requests)
    client.handshake()
    return client


def wait_calls(client: MemoryClient, *keys: str, method: str = "test/wait") -> None:
    for key in keys:
        client.call(key, method, {"key": key})


# --- handshake ---------------------------------------------------------------------------------


@in_loop
async def test_a_routed_method_before_initialize_is_refused() -> None:
    """Before initialize, routed methods get -32600 with the daemon's text, by family."""
    _host, client = pair(Services())
    client.call(1, "environment/status")
    client.call(2, "test/echo", {"key": "a"})
    assert client.take() == [
        error(1, -32600, "client must call initialize before using environment status methods"),
        gated(2, "test/echo"),
    ]


@in_loop
async def test_initialize_answers_a_fresh_session_and_the_environment() -> None:
    """initialize creates a UUID4 session attached to this connection, and embeds the host's
    ``environmentInfo``."""
    host, client = pair(Services())
    client.call(1, "initialize", {"clientName": "memory"})
    (response,) = client.take()
    session_id = response["result"]["sessionId"]
    assert response == answer(1, {"sessionId": session_id, "environmentInfo": ENVIRONMENT_WIRE})
    assert uuid.UUID(session_id).version == 4
    session = host.sessions.get(session_id)
    assert session is not None
    assert session.attachment is client.connection
    assert client.connection.session is session


@in_loop
async def test_initialized_opens_the_gate_and_is_not_answered() -> None:
    """Between initialize and initialized the second gate text applies; then methods work."""
    _host, client = pair(Services())
    client.call(1, "initialize", {"clientName": "memory"})
    client.take()
    client.call(2, "environment/status")
    client.call(3, "test/echo", {"key": "a"})
    assert client.take() == [
        error(2, -32600, "client must send initialized before using environment status methods"),
        gated(3, "test/echo", initialized=True),
    ]
    client.notify("initialized")
    assert client.take() == []
    client.call(4, "environment/status")
    client.call(5, "test/echo", {"key": "a"})
    assert client.take() == [answer(4, READY), answer(5, {"key": "a"})]


@pytest.mark.parametrize("initialized", [False, True], ids=["before-initialized", "after"])
@in_loop
async def test_a_second_initialize_is_refused_and_the_session_kept(initialized: bool) -> None:
    """initialize succeeds once per connection; a second is -32600 and changes nothing."""
    host, client = pair(Services())
    client.call(1, "initialize", {"clientName": "first"})
    (first,) = client.take()
    if initialized:
        client.notify("initialized")
    client.call(2, "initialize", {"clientName": "again"})
    assert client.take() == [error(2, -32600, "initialize may only be sent once per connection")]
    assert len(host.sessions) == 1
    session = client.connection.session
    assert session is not None and session.id == first["result"]["sessionId"]


@in_loop
async def test_initialized_before_initialize_is_refused_out_of_band_and_opens_nothing() -> None:
    """An early ``initialized`` is an id -1 error; the gate stays shut; the handshake works."""
    _host, client = pair(Services())
    client.notify("initialized", {})
    client.call(1, "environment/status")
    assert client.take() == [
        error(-1, -32600, "initialized must follow a successful initialize"),
        gated(1, "environment status"),
    ]
    client.handshake()
    client.call(2, "environment/status")
    assert client.take() == [answer(2, READY)]


@in_loop
async def test_initialized_twice_is_silent() -> None:
    """A repeated ``initialized`` is neither answered nor harmful."""
    client = ready(Services())
    client.notify("initialized", None)
    client.notify("initialized")
    client.call(1, "environment/status")
    assert client.take() == [answer(1, READY)]


@in_loop
async def test_a_failed_initialize_can_be_retried() -> None:
    """An unknown resume id fails initialize without using it up."""
    host, client = pair(Services())
    bogus = str(uuid.uuid4())
    client.call(1, "initialize", {"clientName": "x", "resumeSessionId": bogus})
    client.call(2, "environment/status")
    assert client.take() == [
        error(1, -32600, f"unknown session id {bogus}"),
        gated(2, "environment status"),
    ]
    client.handshake()
    assert len(host.sessions) == 1


@in_loop
async def test_params_are_decoded_before_the_gate() -> None:
    """Undecodable params are -32602 even before initialize, not the gate's -32600."""
    _host, client = pair(Services())
    client.call(1, "test/echo", {})
    client.call(2, "test/echo")
    client.call(3, "environment/status", {"x": 1})
    client.call(4, "initialize")
    assert client.take() == [
        error(1, -32602, "missing field `key`"),
        error(2, -32602, "invalid type: null, expected struct KeyParams"),
        error(3, -32602, "invalid type: map, expected unit"),
        error(4, -32602, "invalid type: null, expected struct InitializeParams"),
    ]


# --- dispatch ----------------------------------------------------------------------------------


@pytest.mark.parametrize("initialized", [False, True], ids=["before-handshake", "after"])
@in_loop
async def test_an_unknown_method_is_method_not_found_with_the_request_id(
    initialized: bool,
) -> None:
    """Unrouted methods are -32601 with the reference's text, in every handshake state."""
    _host, client = pair(Services())
    if initialized:
        client.handshake()
    client.call(7, "process/kill", {})
    client.call("abc", "shutdown")
    assert client.take() == [
        error(7, -32601, "exec-server stub does not implement `process/kill` yet"),
        error("abc", -32601, "exec-server stub does not implement `shutdown` yet"),
    ]


@in_loop
async def test_ids_and_results_go_out_exactly() -> None:
    """String and 64-bit ids come back with their type; unit params may be absent, null or {}."""
    client = ready(Services())
    client.call("abc", "environment/status")
    client.call(2**63 - 1, "environment/status", None)
    client.call(-(2**63), "environment/status", {})
    assert client.transport.raw[-3:] == [
        b'{"id":"abc","result":{"status":"ready"}}',
        b'{"id":9223372036854775807,"result":{"status":"ready"}}',
        b'{"id":-9223372036854775808,"result":{"status":"ready"}}',
    ]


@in_loop
async def test_a_spliced_result_is_sent_as_one_message() -> None:
    """A result given as byte parts arrives as one ordinary response."""
    client = ready(Services())
    client.call(1, "test/spliced", {"key": "abc"})
    assert client.transport.raw[-1] == b'{"id":1,"result":{"key":"abc"}}'


# --- messages answered out of band -------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        ('[{"id":1,"method":"environment/status"}]', "expected a JSON-RPC object"),
        ("42", "expected a JSON-RPC object"),
        ("{", None),
        (b"\xff", None),
        ('{"id":null,"method":"environment/status"}', None),
    ],
    ids=["batch", "number", "syntax", "not-utf8", "null-id"],
)
@in_loop
async def test_a_malformed_message_gets_one_error_and_the_connection_keeps_working(
    raw: str | bytes, detail: str | None
) -> None:
    """One -32600 with id -1, the transport's prefix and a detail; then requests still work."""
    client = ready(Services())
    client.send_raw(raw)
    (reply,) = client.take()
    assert set(reply) == {"id", "error"}
    assert (reply["id"], reply["error"]["code"]) == (-1, -32600)
    message = reply["error"]["message"]
    if detail is not None:
        assert message == PARSE_PREFIX + detail
    assert message.startswith(PARSE_PREFIX) and len(message) > len(PARSE_PREFIX)
    client.call(1, "environment/status")
    assert client.take() == [answer(1, READY)]


@in_loop
async def test_a_message_the_transport_rejected_is_reported_out_of_band() -> None:
    """``message_rejected`` (e.g. over the size limit) becomes the same id -1 error."""
    client = ready(Services())
    client.connection.message_rejected("message longer than the 64 MiB line limit")
    client.call(1, "environment/status")
    assert client.take() == [
        error(-1, -32600, PARSE_PREFIX + "message longer than the 64 MiB line limit"),
        answer(1, READY),
    ]


@pytest.mark.parametrize(
    "message",
    [{"id": 1, "result": {}}, {"id": "x", "error": {"code": 1, "message": "no"}}],
    ids=["result", "error"],
)
@in_loop
async def test_a_client_response_is_answered_out_of_band_and_nothing_is_lost(
    message: dict[str, Any],
) -> None:
    """A response from the client is -32600 id -1; requests before and after are all answered."""
    services = Services()
    client = ready(services)
    wait_calls(client, "slow")
    client.send(message)
    client.call(2, "test/echo", {"key": "b"})
    services.release("slow")
    await settle()
    assert client.take() == [
        error(-1, -32600, "unexpected response from the client: this executor sends no requests"),
        answer(2, {"key": "b"}),
        answer("slow", {"key": "slow"}),
    ]


@in_loop
async def test_an_unknown_notification_is_answered_out_of_band_and_nothing_is_lost() -> None:
    """An unknown notification is -32601 id -1 naming it; the connection stays, nothing is lost."""
    services = Services()
    client = ready(services)
    wait_calls(client, "slow")
    client.notify("process/kill", {"processId": "x"})
    client.call(2, "environment/status")
    services.release("slow")
    await settle()
    assert client.take() == [
        error(-1, -32601, "unknown notification `process/kill`"),
        answer(2, READY),
        answer("slow", {"key": "slow"}),
    ]


# --- ordering ----------------------------------------------------------------------------------


@in_loop
async def test_synchronous_answers_keep_arrival_order() -> None:
    """Synchronous methods are answered inline, so in the order they arrived."""
    client = ready(Services())
    client.call(1, "test/echo", {"key": "a"})
    client.call(2, "environment/status")
    client.call(3, "test/missing", {"key": "c"})
    client.call(4, "test/echo", {"key": "d"})
    assert [reply["id"] for reply in client.take()] == [1, 2, 3, 4]


@in_loop
async def test_a_slow_async_request_blocks_no_later_request() -> None:
    """An async method answers when done; synchronous requests after it are answered first."""
    services = Services()
    client = ready(services)
    wait_calls(client, "slow")
    client.call(2, "test/echo", {"key": "b"})
    await settle()
    assert client.take() == [answer(2, {"key": "b"})]
    services.release("slow")
    await settle()
    assert client.take() == [answer("slow", {"key": "slow"})]


@in_loop
async def test_async_requests_answer_in_completion_order() -> None:
    """Concurrent async requests answer as each finishes, not in arrival order."""
    services = Services()
    client = ready(services)
    wait_calls(client, "first", "second")
    services.release("second")
    await settle()
    services.release("first")
    await settle()
    assert [reply["id"] for reply in client.take()] == ["second", "first"]


# --- Reply.after -------------------------------------------------------------------------------


@in_loop
async def test_reply_after_runs_once_its_response_is_sent() -> None:
    """What ``Reply.after`` sends follows the response it belongs to."""
    client = ready(Services())
    client.call(1, "test/reply", {"key": "a"})
    assert client.take() == [
        answer(1, {"key": "a"}),
        {"method": "test/after", "params": {"key": "a"}},
    ]


@in_loop
async def test_reply_after_of_an_async_route_runs_once_its_response_is_sent() -> None:
    """An async handler's ``Reply`` behaves the same when it finishes."""
    services = Services()
    client = ready(services)
    assert client.connection.session is not None
    session = client.connection.session
    wait_calls(client, "a")
    services.release("a", Reply({"done": True}, lambda: session.notify("test/after", {})))
    await settle()
    assert client.take() == [answer("a", {"done": True}), {"method": "test/after", "params": {}}]


# --- handler failures --------------------------------------------------------------------------


@in_loop
async def test_an_executor_error_from_a_handler_is_answered_with_its_code() -> None:
    """A handler's ``ExecutorError`` is the answer: its code and message, the request's id."""
    client = ready(Services())
    client.call(1, "test/missing", {"key": "x"})
    assert client.take() == [error(1, -32004, "no such thing: x")]


@in_loop
async def test_an_unexpected_exception_is_an_internal_error_naming_the_method() -> None:
    """A bug in a handler, sync or async, is -32603 naming the method; the connection stays."""
    services = Services()
    client = ready(services)
    client.call(1, "test/boom", {"key": "x"})
    wait_calls(client, "later")
    services.gate("later").set_exception(RuntimeError("a bug in the handler"))
    await settle()
    client.call(3, "environment/status")
    assert client.take() == [
        error(1, -32603, "internal error while handling test/boom"),
        error("later", -32603, "internal error while handling test/wait"),
        answer(3, READY),
    ]


@in_loop
async def test_an_unexpected_exception_from_a_parameterless_method_is_an_internal_error() -> None:
    """The same holds for a method without params on a ready connection."""
    client = ready(Services())
    client.call(1, "test/unitBoom")
    assert client.take() == [error(1, -32603, "internal error while handling test/unitBoom")]


@in_loop
async def test_reply_from_a_parameterless_method_is_answered_then_its_after_runs() -> None:
    """``Reply`` works for a method without params on a ready connection too."""
    client = ready(Services())
    client.call(1, "test/unitReply")
    assert client.take() == [
        answer(1, {"key": "unit"}),
        {"method": "test/after", "params": {"key": "unit"}},
    ]


@in_loop
async def test_a_failing_after_does_not_answer_twice() -> None:
    """The answer is out before ``Reply.after`` runs: its failure is logged, not answered."""
    client = ready(Services())
    client.call(1, "test/badAfter", {"key": "x"})
    client.call(2, "environment/status")
    assert client.take() == [answer(1, {"key": "x"}), answer(2, READY)]


# --- backpressure ------------------------------------------------------------------------------


@in_loop
async def test_reading_pauses_at_max_inflight_and_resumes_below_half() -> None:
    """With 4 allowed, the 4th concurrent async request pauses reading; it resumes below 2."""
    services = Services()
    client = ready(services, max_inflight_requests=4)
    transport = client.transport
    wait_calls(client, "1", "2", "3")
    client.call("sync", "environment/status")
    assert transport.calls == []
    wait_calls(client, "4")
    assert transport.calls == ["pause"]
    for key, reading in (("1", False), ("2", False), ("3", True)):
        services.release(key)
        await settle()
        assert transport.is_reading() is reading, f"after {key} finished"
    assert transport.calls == ["pause", "resume"]
    services.release("4")
    await settle()
    assert [reply["id"] for reply in client.take()] == ["sync", "1", "2", "3", "4"]


@in_loop
async def test_writing_paused_pauses_reading_and_drain_callbacks_run_on_resume() -> None:
    """A full write buffer stops reading and defers ``on_drain``; draining undoes both."""
    client = ready(Services())
    connection, transport = client.connection, client.transport
    session = connection.session
    assert session is not None
    drained: list[str] = []
    connection.on_drain(lambda: drained.append("immediately"))
    assert drained == ["immediately"]
    connection.writing_paused()
    assert transport.calls == ["pause"]
    assert (connection.congested, session.congested) == (True, True)
    connection.on_drain(lambda: drained.append("a"))
    session.on_drain(lambda: drained.append("b"))
    assert drained == ["immediately"]
    connection.writing_resumed()
    assert transport.calls == ["pause", "resume"]
    assert not connection.congested
    assert drained == ["immediately", "a", "b"]
    connection.writing_paused()
    connection.writing_resumed()
    assert drained == ["immediately", "a", "b"]


@in_loop
async def test_reading_resumes_only_when_both_pressures_are_gone() -> None:
    """Paused by requests and by the write buffer, reading resumes when the last one lifts."""
    services = Services()
    client = ready(services, max_inflight_requests=2)
    connection, transport = client.connection, client.transport
    wait_calls(client, "1", "2")
    connection.writing_paused()
    assert transport.calls == ["pause"]
    services.release("1")
    services.release("2")
    await settle()
    assert transport.calls == ["pause"]
    connection.writing_resumed()
    assert transport.calls == ["pause", "resume"]

    # The other way round: the write buffer drains first, the requests later. (Reading is
    # paused a second time here; transports take repeated pauses, as asyncio's do.)
    connection.writing_paused()
    wait_calls(client, "3", "4")
    connection.writing_resumed()
    assert not transport.is_reading()
    services.release("3")
    services.release("4")
    await settle()
    assert transport.is_reading()
    assert transport.calls[-1] == "resume"


# --- the end of a connection -------------------------------------------------------------------


@in_loop
async def test_connection_lost_cancels_requests_except_those_that_survive_disconnect() -> None:
    """In-flight requests are cancelled, unless their route survives; nothing is sent after."""
    services = Services()
    client = ready(services)
    wait_calls(client, "read")
    wait_calls(client, "start", method="test/keep")
    await settle()
    client.connection.connection_lost()
    await settle()
    assert services.events == ["cancelled read"]
    services.release("start")
    await settle()
    assert services.events == ["cancelled read", "finished start"]
    client.call(3, "environment/status")
    assert client.take() == []


@in_loop
async def test_connection_lost_detaches_the_session_for_another_connection_to_resume() -> None:
    """The session outlives its connection for the TTL; a second connection resumes it by id."""
    host, first = pair(Services())
    session_id = first.handshake()
    session = host.sessions.get(session_id)
    assert session is not None
    first.connection.connection_lost()
    assert session.attachment_id is None  # detached: notifications are dropped
    (expiry,) = host.timers
    assert (expiry.delay, expiry.cancelled) == (80.0, False)

    second = MemoryClient(host, "memory:2")
    assert second.handshake(resumeSessionId=session_id) == session_id
    assert expiry.cancelled
    assert session.attachment is second.connection
    session.notify("test/note", {"n": 1})
    assert first.take() == []
    assert second.take() == [{"method": "test/note", "params": {"n": 1}}]

    third = MemoryClient(host, "memory:3")
    third.call(1, "initialize", {"clientName": "x", "resumeSessionId": session_id})
    assert third.take() == [
        error(1, -32010, f"session {session_id} is already attached to another connection")
    ]


@in_loop
async def test_connection_lost_closes_connection_scope_values() -> None:
    """Values with ``close()`` are closed; one failing to close does not stop the others."""
    services = Services()
    client = ready(services)
    for key in ("a", "faulty", "b"):
        client.call(key, "test/open", {"key": key})
    client.connection.connection_scope()["plain"] = 42
    client.connection.connection_lost()
    assert services.events == ["closed a", "closed faulty", "closed b"]
    assert client.connection.connection_scope() == {}


@in_loop
async def test_connection_lost_tells_the_host_once_and_releases_drain_waiters() -> None:
    """The host hears of the end once; ``on_drain`` waiters run; later messages are ignored."""
    host, client = pair(Services())
    client.handshake()
    connection = client.connection
    connection.writing_paused()
    drained: list[str] = []
    connection.on_drain(lambda: drained.append("waiter"))
    connection.connection_lost()
    assert host.closed == [connection]
    assert drained == ["waiter"]
    connection.connection_lost()
    assert host.closed == [connection]
    client.send_raw("{")
    client.call(1, "environment/status")
    client.connection.message_rejected("too long")
    connection.on_drain(lambda: drained.append("late"))
    assert drained == ["waiter", "late"]
    assert client.take() == []


@in_loop
async def test_close_ends_the_transport_and_cleans_up_at_once() -> None:
    """``close`` (daemon shutdown) closes the transport with its code, then ends the connection."""
    services = Services()
    host, client = pair(services)
    client.handshake()
    client.call("h", "test/open", {"key": "h"})
    client.connection.close(1001, "executor shutting down")
    assert client.transport.closed_with == (1001, "executor shutting down")
    assert services.events == ["closed h"]
    assert host.closed == [client.connection]
    assert client.connection.session is not None
    assert client.connection.session.attachment is None
