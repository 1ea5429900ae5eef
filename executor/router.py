"""Method table: wire method -> params type and handler. Handlers delegate to services.

A handler takes the ``RequestContext`` of the connection and the decoded params, and returns
the wire result (or a ``Reply`` when something must happen right after the response is
sent). Synchronous handlers answer inline, in arrival order; ``async`` ones run as tasks
owned by the connection, so a long poll never blocks anything else.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from executor.environment import STATUS_READY
from executor.protocol import jsonrpc, methods
from executor.protocol import messages as m

if TYPE_CHECKING:
    from executor.daemon import Daemon
    from executor.process import ProcessTable
    from executor.session import Session

__all__ = ["Reply", "RequestContext", "Route", "build_routes"]


class RequestContext(Protocol):
    """What handlers may use: the daemon's services and the connection's session."""

    daemon: Daemon
    session: Session | None

    def connection_scope(self) -> Any:
        """Per-connection state of services (e.g. open file handles)."""


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


def _processes(ctx: RequestContext) -> ProcessTable:
    assert ctx.session is not None  # the handshake gate guarantees an attached session
    table: ProcessTable = ctx.session.resources
    return table


#: Constant answers, serialized once (environment/info is ~1 KiB of JSON per request).
_STATUS_WIRE = jsonrpc.preencode(STATUS_READY)
_ENVIRONMENT_WIRE: dict[int, tuple[object, Any]] = {}


def _environment_info(ctx: RequestContext, _params: None) -> Any:
    info = ctx.daemon.environment_wire
    cached = _ENVIRONMENT_WIRE.get(id(info))
    if cached is None or cached[0] is not info:
        cached = _ENVIRONMENT_WIRE[id(info)] = (info, jsonrpc.preencode(info))
    return cached[1]


def _environment_status(_ctx: RequestContext, _params: None) -> Any:
    return _STATUS_WIRE


async def _process_start(ctx: RequestContext, params: m.StartParams) -> Reply:
    result, process = await _processes(ctx).start(params)
    return Reply(result.to_wire(), process.announce)


async def _process_read(ctx: RequestContext, params: m.ReadParams) -> Any:
    return (await _processes(ctx).read(params)).to_wire()


def _process_write(ctx: RequestContext, params: m.WriteParams) -> Any:
    return {"status": _processes(ctx).write(params).value}


def _process_signal(ctx: RequestContext, params: m.SignalParams) -> Any:
    _processes(ctx).signal(params)
    return {}


def _process_terminate(ctx: RequestContext, params: m.TerminateParams) -> Any:
    return {"running": _processes(ctx).terminate(params)}


def _route(method: str, params: type | None, handler: Callable[..., Any], **flags: bool) -> Route:
    return Route(method, params, handler, inspect.iscoroutinefunction(handler), **flags)


def build_routes(extra: list[Route] | None = None) -> dict[str, Route]:
    """Every routed method except the handshake, which the connection handles itself."""
    from executor.fs import fs_routes  # here, not at the top: the fs package imports ``Route``
    from executor.http import http_routes  # likewise

    routes = [
        _route(methods.ENVIRONMENT_INFO, None, _environment_info),
        _route(methods.ENVIRONMENT_STATUS, None, _environment_status),
        _route(methods.PROCESS_START, m.StartParams, _process_start, survives_disconnect=True),
        _route(methods.PROCESS_READ, m.ReadParams, _process_read),
        _route(methods.PROCESS_WRITE, m.WriteParams, _process_write),
        _route(methods.PROCESS_SIGNAL, m.SignalParams, _process_signal),
        _route(methods.PROCESS_TERMINATE, m.TerminateParams, _process_terminate),
        *fs_routes(),
        *http_routes(),
        *(extra or []),
    ]
    return {route.method: route for route in routes}
