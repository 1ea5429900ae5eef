"""One logical client whose connection changes generations (the reference's state machine).

* **Connected**: calls use the current connection.
* **Recovering** (its transport closed): new calls wait; process handles stay open;
  streamed HTTP bodies fail at once (a body is not retained: it cannot be resumed). Starts in
  flight are let finish first (a start cut off is *ambiguous*: the process may exist; it is
  terminated once the session is back, never adopted). Then a new connection resumes the
  session by its id, retrying while the server still holds the old attachment (-32010) and
  while the server cannot be reached, with jittered backoff. Its notification consumer runs
  from the start, before the handshake completes. Before it is installed, every process is
  caught up with ``process/read`` from its last published seq; a process whose missed
  output is no longer retained fails alone (``ProcessLost``).
* **Failed**: after the deadline (25 s by default), a refusal (an expired session, a bad
  token) or ``close()``: every waiting and later call raises ``SessionFailed`` with one
  stable message, and every process handle ends with it.

A request in flight when the transport closed is sent again on the next connection only if
it is idempotent (reads); any other gets ``OutcomeUnknown``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import random
from collections.abc import Callable
from typing import Any

from executor.client.errors import (
    SESSION_ATTACHED,
    ClientError,
    ConnectionLost,
    OutcomeUnknown,
    ProcessLost,
    ServerError,
    SessionFailed,
)
from executor.client.events import (
    Changes,
    ProcessEvents,
    RecoveryGap,
    event_from_notification,
)
from executor.client.http import BodyStream
from executor.client.rpc import RpcConnection
from executor.client.transport import Connector, is_permanent_connect_error
from executor.protocol import methods

__all__ = ["Link", "Status"]

_log = logging.getLogger("executor.client")

#: Resume retries: the first after about this long, doubling up to ``_RETRY_MAX``.
_RETRY_FIRST = 0.05
_RETRY_MAX = 1.0

NotificationListener = Callable[[str, Any], None]


class Status(enum.Enum):
    """Where the link is in its life."""

    CONNECTED = "connected"
    RECOVERING = "recovering"
    FAILED = "failed"


def _retry_delay(attempt: int) -> float:
    base: float = min(_RETRY_MAX, _RETRY_FIRST * 2.0 ** min(attempt, 10))
    # Jitter: clients that lost the same server do not come back in lockstep.
    return base * random.uniform(0.5, 1.5)


class Link:
    """The session and its current connection."""

    def __init__(
        self,
        connector: Connector,
        *,
        client_name: str,
        recovery_deadline: float,
        initialize_timeout: float = 10.0,
        output_buffer_bytes: int | None = None,
    ) -> None:
        self._connector = connector
        self._client_name = client_name
        self.recovery_deadline = recovery_deadline
        self._initialize_timeout = initialize_timeout
        #: Each process's unread output kept in memory (``None``: unbounded).
        self.output_buffer_bytes = output_buffer_bytes
        self.status = Status.RECOVERING
        self._rpc: RpcConnection | None = None
        self._failure: str | None = None
        self.session_id = ""
        #: ``environmentInfo`` of the last handshake.
        self.info: dict[str, Any] = {}
        #: Processes whose events are still expected, by id.
        self.processes: dict[str, ProcessEvents] = {}
        #: Streamed HTTP bodies still arriving, by request id (each on its connection).
        self.http_streams: dict[str, BodyStream] = {}
        #: Ids of ambiguous starts, terminated once a connection is back.
        self._orphans: set[str] = set()
        self._active_starts = 0
        self._changes = Changes()
        self._recovery: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Closings of connections that ended on their own (awaited by ``close``, never
        #: cancelled: a stdio server must be reaped, a socket's descriptor released).
        self._releasing: set[asyncio.Task[None]] = set()
        self._generation = 0
        self._closed = False
        #: Called with (method, params) for notifications that are not process events.
        self.listeners: list[NotificationListener] = []
        #: How many times a dropped connection was recovered.
        self.recoveries = 0

    # -- connecting -------------------------------------------------------------------

    async def open(self, *, resume: str | None = None) -> None:
        """The first connection (not retried: an error here is the caller's)."""
        try:
            rpc = await self._handshake(resume)
        except ConnectionLost as exc:
            if exc.cause is not None:
                raise exc.cause from None
            raise
        except ClientError:
            raise
        except Exception as exc:
            raise ClientError(f"cannot connect to the executor: {exc}") from exc
        self._install(rpc)

    async def _handshake(self, resume: str | None) -> RpcConnection:
        transport = await self._connector.open()
        self._generation += 1
        # The reader starts here, before initialize: a resumed session's processes may
        # push events at once.
        rpc = RpcConnection(
            transport,
            on_notification=self._on_notification,
            on_closed=self._on_closed,
            generation=self._generation,
        )
        try:
            params: dict[str, Any] = {"clientName": self._client_name}
            if resume:
                params["resumeSessionId"] = resume
            async with asyncio.timeout(self._initialize_timeout):
                result = await rpc.call(methods.INITIALIZE, params)
            session_id = str(result["sessionId"])
            if resume and session_id != resume:
                raise ClientError(f"asked to resume session {resume}, got {session_id}")
            self.session_id = session_id
            self.info = result.get("environmentInfo") or {}
            await rpc.notify(methods.INITIALIZED, {})
        except BaseException:
            await rpc.close()
            raise
        return rpc

    def _install(self, rpc: RpcConnection) -> bool:
        if self.status is Status.FAILED or rpc.closed:
            return False
        self._rpc = rpc
        self.status = Status.CONNECTED
        self._changes.notify()
        return True

    async def connection(self) -> RpcConnection:
        """The current connection, once there is one; ``SessionFailed`` once there never
        will be."""
        while True:
            if self.status is Status.FAILED:
                raise SessionFailed(self._failure or "the session failed")
            rpc = self._rpc
            if self.status is Status.CONNECTED and rpc is not None and not rpc.closed:
                return rpc
            await self._changes.wait()

    # -- calls ------------------------------------------------------------------------

    async def call(self, method: str, params: Any, *, idempotent: bool) -> Any:
        """Send a request on the current connection; an idempotent one is sent again on
        the next connection if the transport closed under it."""
        while True:
            rpc = await self.connection()
            try:
                return await rpc.call(method, params)
            except ConnectionLost as exc:
                if exc.sent and not idempotent:
                    raise OutcomeUnknown(method, exc.args[0]) from (exc.cause or exc)
                if exc.cause is not None:
                    # Sent again, the same answer would close the next connection too.
                    raise exc.cause from None

    async def start_process(
        self, process_id: str, params: dict[str, Any]
    ) -> tuple[ProcessEvents, dict[str, Any]]:
        """``process/start``, registering the process before the request leaves (its
        events may arrive before the answer)."""
        while True:
            rpc = await self.connection()
            if process_id in self.processes or process_id in self._orphans:
                raise ClientError(f"process id {process_id!r} is already in use")
            events = self._new_events(process_id)
            self.processes[process_id] = events
            self._active_starts += 1
            try:
                result = await rpc.call(methods.PROCESS_START, params)
            except ConnectionLost as exc:
                self._forget(events)
                if not exc.sent:
                    continue
                self._orphans.add(process_id)
                raise OutcomeUnknown(
                    methods.PROCESS_START,
                    "if the process started, it is terminated once the session is resumed",
                ) from exc
            except asyncio.CancelledError:
                self._forget(events)
                self._orphans.add(process_id)
                self._spawn(self._reap_when_connected())
                raise
            except BaseException:
                self._forget(events)
                raise
            finally:
                self._active_starts -= 1
                self._changes.notify()
            events.recoverable = True
            return events, result or {}

    async def start_http_stream(
        self, params: dict[str, Any], url: str
    ) -> tuple[BodyStream, dict[str, Any]]:
        """``http/request`` with ``streamResponse``, registering its body before the request
        leaves. Cut off by a dropped connection, it raises ``OutcomeUnknown``."""
        request_id = str(params["requestId"])
        while True:
            rpc = await self.connection()
            stream = BodyStream(request_id, url, rpc)
            self.http_streams[request_id] = stream
            try:
                result = await rpc.call(methods.HTTP_REQUEST, params)
            except ConnectionLost as exc:
                self._forget_stream(stream)
                if not exc.sent:
                    continue
                raise OutcomeUnknown(methods.HTTP_REQUEST, exc.args[0]) from exc
            except BaseException:
                self._forget_stream(stream)
                raise
            if stream.finished:
                self._forget_stream(stream)
            return stream, result or {}

    def _forget_stream(self, stream: BodyStream) -> None:
        if self.http_streams.get(stream.request_id) is stream:
            del self.http_streams[stream.request_id]

    async def adopt_process(self, process_id: str) -> ProcessEvents:
        """Follow ``process_id``, a process of this session that this client did not start
        (a resumed session's): its retained output, then what comes."""
        if process_id in self.processes or process_id in self._orphans:
            raise ClientError(f"process id {process_id!r} is already followed")
        events = self._new_events(process_id)
        self.processes[process_id] = events
        try:
            events.adopt(await self._read_retained(process_id, 0, None))
        except RecoveryGap as exc:
            self._forget(events)
            raise ClientError(f"process {process_id}: {exc}") from exc
        except BaseException:
            self._forget(events)
            raise
        events.recoverable = True
        return events

    def _new_events(self, process_id: str) -> ProcessEvents:
        events = ProcessEvents(
            process_id,
            limit=self.output_buffer_bytes,
            fetch=functools.partial(self._read_retained, process_id),
        )
        events.on_closed = self._forget
        events.on_lost = self._lost
        return events

    async def _read_retained(
        self, process_id: str, after_seq: int, max_bytes: int | None
    ) -> dict[str, Any]:
        params = {
            "processId": process_id,
            "afterSeq": after_seq,
            "maxBytes": max_bytes,
            "waitMs": 0,
        }
        result: dict[str, Any] = await self.call(methods.PROCESS_READ, params, idempotent=True)
        return result

    def _lost(self, events: ProcessEvents) -> None:
        """A process whose output can no longer be delivered: killed, as in a catch-up."""
        self._forget(events)
        self._orphans.add(events.process_id)
        self._spawn(self._reap_when_connected())

    def _forget(self, events: ProcessEvents) -> None:
        if self.processes.get(events.process_id) is events:
            del self.processes[events.process_id]

    # -- notifications and loss -------------------------------------------------------

    def _on_notification(self, rpc: RpcConnection, method: str, params: Any) -> None:
        if method.startswith("process/") and isinstance(params, dict):
            events = self.processes.get(params.get("processId"))  # type: ignore[arg-type]
            event = event_from_notification(method, params) if events is not None else None
            if events is not None and event is not None:
                events.offer(event)
            return
        if method == methods.HTTP_BODY_DELTA and isinstance(params, dict):
            stream = self.http_streams.get(params.get("requestId"))  # type: ignore[arg-type]
            if stream is not None and stream.rpc is rpc:
                stream.offer(params)
                if stream.finished:
                    self._forget_stream(stream)
                return
        for listener in list(self.listeners):
            listener(method, params)

    def _on_closed(self, rpc: RpcConnection, reason: str) -> None:
        # Streamed bodies die with their connection, at once: the executor keeps none.
        self._lose_streams(f"the connection dropped while it was streaming ({reason})", rpc)
        releasing = asyncio.get_running_loop().create_task(rpc.close())
        self._releasing.add(releasing)
        releasing.add_done_callback(self._releasing.discard)
        if self.status is not Status.CONNECTED or self._rpc is not rpc:
            return  # a candidate connection, or one replaced already
        self.status = Status.RECOVERING
        self._rpc = None
        self._changes.notify()
        _log.info("executor client: connection lost (%s); recovering", reason)
        self._recovery = asyncio.get_running_loop().create_task(
            self._recover(reason), name="executor-client-recovery"
        )

    async def _recover(self, reason: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.recovery_deadline
        try:
            # asyncio.timeout, not wait_for: wait_for can swallow the cancel of close().
            async with asyncio.timeout_at(deadline):
                await self._starts_settled()
        except TimeoutError:
            self._fail(f"{reason}; a process start did not settle before the deadline")
            return
        if not self._connector.resumable:
            self._fail(f"{reason}; a stdio session cannot be resumed")
            return
        last_error = reason
        attempt = 0
        while loop.time() < deadline and self.status is Status.RECOVERING:
            try:
                async with asyncio.timeout_at(deadline):
                    rpc = await self._resume_once()
            except ServerError as exc:
                if exc.code != SESSION_ATTACHED:
                    self._fail(f"{reason}; the server refused to resume the session: {exc}")
                    return
                last_error = str(exc)
            except Exception as exc:
                if is_permanent_connect_error(exc):
                    self._fail(f"{reason}; reconnecting was refused: {exc}")
                    return
                last_error = str(exc) or type(exc).__name__
            else:
                if self._install(rpc):
                    self.recoveries += 1
                    _log.info("executor client: session %s resumed", self.session_id)
                    return
                last_error = rpc.closed_reason
                await rpc.close()
            attempt += 1
            await asyncio.sleep(min(_retry_delay(attempt), max(0.0, deadline - loop.time())))
        self._fail(
            f"{reason}; the session could not be resumed within "
            f"{self.recovery_deadline:g} s (last error: {last_error})"
        )

    async def _starts_settled(self) -> None:
        while self._active_starts:
            await self._changes.wait()

    async def _resume_once(self) -> RpcConnection:
        rpc = await self._handshake(self.session_id)
        try:
            await self._catch_up(rpc)
            await self._reap_orphans(rpc)
        except BaseException:
            await rpc.close()
            raise
        return rpc

    async def _catch_up(self, rpc: RpcConnection) -> None:
        for process_id, events in list(self.processes.items()):
            if not events.recoverable or events.finished:
                continue
            try:
                read = await rpc.call(
                    methods.PROCESS_READ,
                    {
                        "processId": process_id,
                        "afterSeq": events.last_published,
                        "maxBytes": None,
                        "waitMs": 0,
                    },
                )
                events.catch_up(read)
            except ConnectionLost:
                raise
            except (ClientError, KeyError, TypeError, ValueError) as exc:
                # This process alone is lost; it is killed (its output could not be
                # delivered) and the others go on.
                events.fail(ProcessLost(process_id, str(exc)))
                self._forget(events)
                self._orphans.add(process_id)

    async def _reap_orphans(self, rpc: RpcConnection) -> None:
        for process_id in sorted(self._orphans):
            with contextlib.suppress(ServerError):
                await rpc.call(methods.PROCESS_TERMINATE, {"processId": process_id})
            self._orphans.discard(process_id)

    async def _reap_when_connected(self) -> None:
        with contextlib.suppress(ClientError):
            await self._reap_orphans(await self.connection())

    def _lose_streams(self, reason: str, rpc: RpcConnection | None = None) -> None:
        for stream in list(self.http_streams.values()):
            if rpc is None or stream.rpc is rpc:
                stream.lose(reason)
                self._forget_stream(stream)

    def _fail(self, message: str, *, closing: bool = False) -> None:
        if self.status is Status.FAILED:
            return
        if not closing:
            _log.warning("executor client: session failed: %s", message)
        self.status = Status.FAILED
        self._failure = message
        self._rpc = None
        for events in list(self.processes.values()):
            events.fail(SessionFailed(message))
        self.processes.clear()
        self._orphans.clear()
        self._lose_streams(message)
        self._changes.notify()

    @property
    def failure(self) -> str | None:
        """Why the session failed (``None`` while it has not)."""
        return self._failure

    # -- closing ----------------------------------------------------------------------

    async def close(self, *, terminate_processes: bool = True, timeout: float = 2.0) -> None:
        """Terminate this client's running processes (unless told not to), close the
        connection and every task; later calls raise ``SessionFailed``."""
        if self._closed:
            return
        self._closed = True
        rpc = self._rpc if self.status is Status.CONNECTED else None
        if rpc is not None and terminate_processes:
            live = [pid for pid, events in self.processes.items() if not events.finished]
            live += sorted(self._orphans)
            if live:
                calls = [rpc.call(methods.PROCESS_TERMINATE, {"processId": p}) for p in live]
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), timeout)
        self._fail("the environment was closed", closing=True)
        tasks = [t for t in (self._recovery, *self._tasks) if t is not None and not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if rpc is not None:
            await rpc.close()
        await asyncio.gather(*self._releasing, return_exceptions=True)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
