"""A ``Connection`` driven in memory: no socket, no subprocess, one event loop.

``MemoryClient`` is the client end of a connection pair (as h11's tests pair a client and a
server): it feeds envelopes into a real ``executor.server.Connection`` through
``message_received``, and reads back what the connection sent through ``MemoryTransport``,
decoded as JSON. ``MemoryHost`` is the smallest ``ConnectionHost``: a real
``SessionRegistry`` (its expiry timers recorded, never run) and a table of routes made with
``executor.routing.route``. Synchronous answers arrive inline; ``settle()`` lets the loop run
the connection's tasks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from executor.routing import Route
from executor.server import Connection
from executor.session import Session, SessionRegistry

__all__ = [
    "ENVIRONMENT_WIRE",
    "PARSE_PREFIX",
    "MemoryClient",
    "MemoryHost",
    "MemoryTransport",
    "Timer",
    "settle",
]

#: The parse-error prefix the in-memory connections are made with (each transport has its own).
PARSE_PREFIX: Final = "failed to parse JSON-RPC message from memory: "

#: What ``MemoryHost`` answers as ``environmentInfo``.
ENVIRONMENT_WIRE: Final[dict[str, Any]] = {"platformOs": "memory", "capabilities": {}}

#: Absent ``params`` (distinct from ``None``, which sends ``"params": null``).
_OMIT: Final = object()


class MemoryTransport:
    """A ``MessageTransport`` that records: messages sent, reading paused or not, closing."""

    def __init__(self, peer: str = "memory") -> None:
        self.peer = peer
        #: Every message sent, decoded, in order (``MemoryClient.take`` consumes them).
        self.sent: list[dict[str, Any]] = []
        #: The same messages as the bytes the connection produced.
        self.raw: list[bytes] = []
        #: ``"pause"``, ``"resume"`` and ``"close"``, in the order the connection asked.
        self.calls: list[str] = []
        self._reading = True
        self.closed_with: tuple[int, str] | None = None

    def send_message(self, data: bytes) -> None:
        self.raw.append(bytes(data))
        self.sent.append(json.loads(data))

    def send_message_parts(self, parts: list[bytes | bytearray | memoryview]) -> None:
        self.send_message(b"".join(parts))

    def close(self, code: int = 1000, reason: str = "") -> None:
        self.calls.append("close")
        self.closed_with = (code, reason)

    def pause_reading(self) -> None:
        self.calls.append("pause")
        self._reading = False

    def resume_reading(self) -> None:
        self.calls.append("resume")
        self._reading = True

    def is_reading(self) -> bool:
        """Whether the connection wants inbound messages now (asyncio's name)."""
        return self._reading


@dataclass
class Timer:
    """A session expiry the registry scheduled; the loop never runs it, a test may ``fire`` it."""

    delay: float
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        if not self.cancelled:
            self.callback()


class _Resources:
    """Stand-in for a session's process table."""

    async def close(self) -> None:
        """Nothing to release."""


class MemoryHost:
    """A ``ConnectionHost``: routes, a real session registry, and the connections it saw end."""

    def __init__(
        self, routes: Iterable[Route], *, max_inflight_requests: int = 256, ttl: float = 80.0
    ) -> None:
        self.routes = {route.method: route for route in routes}
        self.environment_wire = ENVIRONMENT_WIRE
        self.max_inflight_requests = max_inflight_requests
        self.timers: list[Timer] = []
        self.expired: list[Session] = []
        self.sessions = SessionRegistry(
            ttl=ttl,
            schedule=self._schedule,
            make_resources=lambda _session: _Resources(),
            on_expired=self.expired.append,
        )
        #: ``connection_closed`` calls, in order.
        self.closed: list[Connection] = []

    def _schedule(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(delay, callback)
        self.timers.append(timer)
        return timer

    def connection_closed(self, connection: Connection) -> None:
        self.closed.append(connection)


class MemoryClient:
    """The client end of an in-memory connection pair."""

    def __init__(self, host: MemoryHost, peer: str = "memory") -> None:
        self.host = host
        self.transport = MemoryTransport(peer)
        self.connection = Connection(host, self.transport, parse_error_prefix=PARSE_PREFIX)
        self._taken = 0

    def send_raw(self, data: bytes | str) -> None:
        """Deliver one message exactly as given."""
        self.connection.message_received(data)

    def send(self, message: dict[str, Any]) -> None:
        """Deliver one envelope, encoded as JSON."""
        self.send_raw(json.dumps(message).encode())

    def call(self, request_id: int | str, method: str, params: Any = _OMIT) -> None:
        """Send a request; its answer is read with ``take`` (after ``settle`` if ``async``)."""
        message: dict[str, Any] = {"id": request_id, "method": method}
        if params is not _OMIT:
            message["params"] = params
        self.send(message)

    def notify(self, method: str, params: Any = _OMIT) -> None:
        """Send a notification."""
        message: dict[str, Any] = {"method": method}
        if params is not _OMIT:
            message["params"] = params
        self.send(message)

    def take(self) -> list[dict[str, Any]]:
        """What the connection sent since the last ``take``, in order."""
        new = self.transport.sent[self._taken :]
        self._taken = len(self.transport.sent)
        return new

    def handshake(self, **params: Any) -> str:
        """``initialize`` (``clientName`` unless given), then ``initialized``; the session id."""
        self.call("init", "initialize", {"clientName": "memory", **params})
        (answer,) = self.take()
        self.notify("initialized")
        assert self.take() == []
        session_id: str = answer["result"]["sessionId"]
        return session_id


async def settle(rounds: int = 10) -> None:
    """Let the loop run the connection's ready tasks (everything here is in memory)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
