"""The ``process/*`` routes: decoded params in, the session's ``ProcessTable`` does the work."""

from __future__ import annotations

from typing import Any

from executor import audit
from executor.errors import ExecutorError, start_failure
from executor.process.table import ProcessTable
from executor.protocol import messages as m
from executor.protocol import methods
from executor.routing import Reply, RequestContext, Route, route

__all__ = ["process_routes"]


def _processes(ctx: RequestContext) -> ProcessTable:
    assert ctx.session is not None  # the handshake gate guarantees an attached session
    table: ProcessTable = ctx.session.resources
    return table


async def _start(ctx: RequestContext, params: m.StartParams) -> Reply:
    try:
        result, process = await _processes(ctx).start(params, audit.origin(ctx))
    except ExecutorError as exc:
        start_failure(exc)
        raise
    return Reply(result.to_wire(), process.announce)


async def _read(ctx: RequestContext, params: m.ReadParams) -> Any:
    return (await _processes(ctx).read(params)).to_wire()


def _write(ctx: RequestContext, params: m.WriteParams) -> Any:
    return {"status": _processes(ctx).write(params).value}


def _resize_pty(ctx: RequestContext, params: m.ResizePtyParams) -> Any:
    _processes(ctx).resize_pty(params)
    return {}


def _signal(ctx: RequestContext, params: m.SignalParams) -> Any:
    _processes(ctx).signal(params)
    return {}


def _terminate(ctx: RequestContext, params: m.TerminateParams) -> Any:
    return {"running": _processes(ctx).terminate(params)}


def process_routes() -> list[Route]:
    """The process methods; ``process/start`` finishes even if its connection goes away."""
    return [
        route(methods.PROCESS_START, m.StartParams, _start, survives_disconnect=True),
        route(methods.PROCESS_READ, m.ReadParams, _read),
        route(methods.PROCESS_WRITE, m.WriteParams, _write),
        route(methods.PROCESS_SIGNAL, m.SignalParams, _signal),
        route(methods.PROCESS_TERMINATE, m.TerminateParams, _terminate),
        route(methods.PROCESS_RESIZE_PTY, m.ResizePtyParams, _resize_pty),
    ]
