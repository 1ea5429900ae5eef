"""What a method handler is: ``Route``, ``Reply`` and the ``RequestContext`` it runs in.

A handler takes the ``RequestContext`` of the connection and the decoded params, and returns
the wire result (or a ``Reply`` when something must happen right after the response is
sent). Synchronous handlers answer inline, in arrival order; ``async`` ones run as tasks
owned by the connection, so a long poll never blocks anything else.

Services contribute their routes (``process_routes``, ``fs_routes``, ...); the daemon
assembles the table and the connection dispatches through it. Nothing here knows either.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from executor.session import Session

__all__ = ["Reply", "RequestContext", "Route", "route"]


class RequestContext(Protocol):
    """What a handler may use of its connection: the attached session, who the peer is (for
    the audit trail) and per-connection state."""

    session: Session | None
    #: The client's address as its transport names it (``127.0.0.1:PORT``, ``stdio``).
    peer: str

    def connection_scope(self) -> dict[str, Any]:
        """Per-connection state of services (e.g. open file handles), closed with it."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A result plus a callback to run once the response has been written."""

    result: Any
    after: Callable[[], None]


@dataclass(frozen=True, slots=True)
class Route:
    """One routed method."""

    method: str
    params: type | None
    handler: Callable[[RequestContext, Any], Any]
    is_async: bool
    #: Let the handler finish even if the connection goes away (it changes session state).
    survives_disconnect: bool = False


def route(
    method: str,
    params: type | None,
    handler: Callable[..., Any],
    *,
    survives_disconnect: bool = False,
) -> Route:
    """A route for ``handler``; whether it is ``async`` is read from the function."""
    return Route(method, params, handler, inspect.iscoroutinefunction(handler), survives_disconnect)
