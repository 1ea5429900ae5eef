"""Keep-alive connections for ``http/request``: one pool per session, never shared.

A connection comes back here only when ``wire.Connection.finish`` says it may carry another
exchange: h11 saw both sides done and nothing arrived beyond the response. A server can
still answer more than was asked after that check (one that leaves a GET's body unread
takes it for a second request; ``client`` closes such connections after one exchange) —
and whatever it queues on a connection reaches the next request sent on it. Pools are per
session so that even an unforeseen desync can only ever reach the same session: a
connection never carries two sessions' exchanges.
"""

from __future__ import annotations

import ssl
import time
import weakref
from collections.abc import Callable
from typing import Final

from executor.http.egress import connect
from executor.http.policy import HttpPolicy
from executor.http.wire import Connection

__all__ = ["IDLE_SECONDS", "PER_ORIGIN", "Origin", "SessionPool", "pool_for"]

#: Idle keep-alive connections kept per origin (enough for a client's usual concurrency;
#: reqwest sets no limit), and for how long (reqwest keeps them 90 s; shorter here, since
#: most servers close idle connections after 60 s or so).
PER_ORIGIN: Final = 32
IDLE_SECONDS: Final = 30.0
#: How often a release also closes the expired connections of other origins (an expired
#: one is never handed out: ``open`` checks each one's age).
_SWEEP_SECONDS: Final = 1.0

#: Scheme, host to connect to (IPv6 without brackets), port.
Origin = tuple[str, str, int]


class SessionPool:
    """Idle connections of one session by origin, most recently used first."""

    def __init__(self, policy: HttpPolicy, tls: Callable[[], ssl.SSLContext]) -> None:
        self._policy = policy
        self._tls = tls
        self._idle: dict[Origin, list[tuple[float, Connection]]] = {}
        self._next_sweep = 0.0

    async def open(self, origin: Origin) -> tuple[Connection, bool]:
        """A connection to ``origin``: an idle one (True), else a new one (False)."""
        idle = self._idle.get(origin)
        while idle:
            since, connection = idle.pop()
            if connection.usable and time.monotonic() - since < IDLE_SECONDS:
                return connection, True
            connection.close()
        scheme, host, port = origin
        tls = self._tls() if scheme == "https" else None
        return await connect(self._policy, host, port, tls), False

    def release(self, origin: Origin, connection: Connection) -> None:
        """Keep ``connection`` if it may carry another exchange, else close it."""
        if not connection.finish():
            connection.close()
            return
        now = time.monotonic()
        if now >= self._next_sweep:  # drop what expired anywhere (not on every release)
            self._next_sweep = now + _SWEEP_SECONDS
            for other, entries in list(self._idle.items()):
                for since, stale in [e for e in entries if now - e[0] >= IDLE_SECONDS]:
                    entries.remove((since, stale))
                    stale.close()
                if not entries:
                    del self._idle[other]
        idle = self._idle.setdefault(origin, [])
        idle.append((now, connection))
        if len(idle) > PER_ORIGIN:
            idle.pop(0)[1].close()

    def close(self) -> None:
        """Close every idle connection."""
        idle, self._idle = self._idle, {}
        for entries in idle.values():
            for _since, connection in entries:
                connection.close()


def pool_for(owner: object, policy: HttpPolicy, tls: Callable[[], ssl.SSLContext]) -> SessionPool:
    """The pool of ``owner`` (a session), made on first use and closed when it is gone."""
    pool = _POOLS.get(owner)
    if pool is None:
        pool = _POOLS[owner] = SessionPool(policy, tls)
        weakref.finalize(owner, pool.close)
    return pool


_POOLS: weakref.WeakKeyDictionary[object, SessionPool] = weakref.WeakKeyDictionary()
