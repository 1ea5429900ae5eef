"""The ``fs/*`` routes: decode what the protocol layer left raw, run the work off the loop.

Every request parses its ``sandbox`` (``-32602`` on bad input) and its path URIs first, then
runs in a worker thread: materialize the sandbox for this host (``Purpose.FILESYSTEM``), build
a ``Resolver`` over its view, do the operation. ``OSError`` is translated here, once, by
``fs_error``. Handle bookkeeping stays on the event loop; only the I/O moves to threads.

Methods on one path are rows of ``_PATH_METHODS``: a new one is a row. ``fs/copy`` (two paths)
and the handle methods (per-connection ``HandleTable``) are written out below it. What changes
files (write, create, remove, copy, open for writing) leaves one audit line (``executor.audit``):
the path and sizes, never the contents.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeVar

from executor import audit
from executor.errors import InvalidRequest, fs_error
from executor.floor import PolicyFloor
from executor.fs import copy as copying
from executor.fs import directories, files, metadata, remove, walk
from executor.fs.aliases import alias_paths
from executor.fs.floor import floored_resolver
from executor.fs.handles import DEFAULT_MAX_HANDLES, Handle, HandleTable
from executor.fs.mxc import check_mxc
from executor.fs.resolve import Resolver
from executor.fs.view import SandboxView
from executor.protocol import fs_messages as fm
from executor.protocol import jsonrpc, methods
from executor.protocol.intent import SandboxIntent, WindowsSandboxLevel
from executor.protocol.messages import b64
from executor.protocol.paths import parse_path_uri, to_uri
from executor.routing import Route, route
from executor.sandbox.hostview import HostView
from executor.sandbox.materialize import materialize
from executor.sandbox.purpose import Purpose

if TYPE_CHECKING:
    from executor.routing import RequestContext

__all__ = ["FsLimits", "fs_routes", "request_resolver"]

T = TypeVar("T")
_SCOPE_KEY: Final = "executor.fs.handles"
_MIB: Final = 1024 * 1024
_I64_MAX: Final = 2**63 - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class FsLimits:
    """Limits of the filesystem methods (defaults: the reference's, plus our read cap)."""

    #: Largest file ``fs/readFile`` returns (its response is ~4/3 of this); 0 = no cap.
    max_read_file_bytes: int = 256 * _MIB
    #: Open ``fs/open`` handles per connection.
    max_handles: int = DEFAULT_MAX_HANDLES
    #: Largest ``fs/readBlock`` length and ``fs/writeBlock`` chunk.
    max_block_bytes: int = _MIB


# --- methods on one path ----------------------------------------------------------------------


class _PathParams(Protocol):
    """What the generic handler reads of a method's params."""

    @property
    def path(self) -> str: ...

    @property
    def sandbox(self) -> SandboxIntent | None: ...


P = TypeVar("P", bound=_PathParams)


def _empty(_result: object) -> dict[str, Any]:
    """The answer of methods that return nothing."""
    return {}


@dataclass(frozen=True, slots=True)
class _PathMethod(Generic[P, T]):
    """One method on one path: what it runs once the path is parsed, and how it answers."""

    method: str
    params: type[P]
    #: Builds the work from the params and the parsed path, on the loop: what it checks
    #: (``fs/writeFile``'s base64, ``fs/walk``'s options) fails after the path's error and
    #: before the sandbox is materialized, as in the reference.
    operation: Callable[[P, str, FsLimits], Callable[[Resolver], T]]
    #: The wire result of what the work returned.
    render: Callable[[T], Any] = _empty
    #: For a method that changes files: its audit fields besides the path (None: no line).
    audit: Callable[[P], dict[str, Any]] | None = None


def _base64_size(text: str) -> int:
    """How many bytes ``text`` decodes to (for the audit line, without decoding it again)."""
    return len(text) * 3 // 4 - (2 if text.endswith("==") else 1 if text.endswith("=") else 0)


def _walk(params: fm.WalkParams, path: str, _: FsLimits) -> Callable[[Resolver], fm.WalkResult]:
    walk.check_options(params.options)
    return partial(walk.walk, path=path, options=params.options)


#: The methods on one path, in ``methods`` order.
_PATH_METHODS: Final = (
    _PathMethod(
        methods.FS_READ_FILE,
        fm.ReadFileParams,
        lambda p, path, limits: partial(
            files.read_file_base64,
            path=path,
            follow=p.follow_symlinks,
            limit=limits.max_read_file_bytes or _I64_MAX,
        ),
        # The file's base64 is sent as it was read, never copied into a JSON string.
        lambda encoded: jsonrpc.Spliced((b'{"dataBase64":"', encoded, b'"}')),
    ),
    _PathMethod(
        methods.FS_WRITE_FILE,
        fm.WriteFileParams,
        lambda p, path, _: partial(
            files.write_file, path=path, data=p.data(), follow=p.follow_symlinks
        ),
        audit=lambda p: {"bytes": _base64_size(p.data_base64)},
    ),
    _PathMethod(
        methods.FS_CREATE_DIRECTORY,
        fm.CreateDirectoryParams,
        lambda p, path, _: partial(
            directories.create_directory,
            path=path,
            recursive=p.recursive,
            follow=p.follow_symlinks,
        ),
        audit=lambda p: {"recursive": p.recursive},
    ),
    _PathMethod(
        methods.FS_GET_METADATA,
        fm.GetMetadataParams,
        lambda p, path, _: partial(metadata.get_metadata, path=path, follow=p.follow_symlinks),
        fm.Metadata.to_wire,
    ),
    _PathMethod(
        methods.FS_READ_DIRECTORY,
        fm.ReadDirectoryParams,
        lambda p, path, _: partial(directories.read_directory, path=path),
        lambda entries: {"entries": [entry.to_wire() for entry in entries]},
    ),
    _PathMethod(methods.FS_WALK, fm.WalkParams, _walk, fm.WalkResult.to_wire),
    _PathMethod(
        methods.FS_REMOVE,
        fm.RemoveParams,
        lambda p, path, _: partial(
            remove.remove,
            path=path,
            recursive=p.recursive,
            force=p.force,
            follow=p.follow_symlinks,
        ),
        audit=lambda p: {"recursive": p.recursive, "force": p.force},
    ),
    _PathMethod(
        methods.FS_CANONICALIZE,
        fm.CanonicalizeParams,
        lambda p, path, _: partial(metadata.canonicalize, path=path),
        lambda real: {"path": to_uri(real)},
    ),
)


# --- running the work -------------------------------------------------------------------------


def request_resolver(
    host: HostView,
    intent: SandboxIntent | None,
    floor: PolicyFloor | None = None,
    *,
    writes: bool = False,
) -> Resolver:
    """A resolver for a request's ``sandbox``: a sandbox view unless the filesystem is
    unrestricted (capability discovery builds one per root the same way). Under a ``floor``
    (``serve --require-sandbox``) no call goes past it (``floor.py``). ``writes``: the call
    changes something (what ``windowsSandboxLevel: "mxc"`` refuses depends on it, ``mxc.py``)."""
    if intent is not None and intent.windows_level is WindowsSandboxLevel.MXC:
        check_mxc(materialize(intent, host, purpose=Purpose.FILESYSTEM), writes=writes)
    if floor is not None:
        return floored_resolver(host, intent, floor)
    if intent is None:
        return Resolver()
    rules = materialize(intent, host, purpose=Purpose.FILESYSTEM)
    if rules is None or not rules.filesystem_restricted:
        return Resolver()
    return Resolver(SandboxView(rules, alias_paths(intent, host)))


def _work(
    host: HostView,
    intent: SandboxIntent | None,
    operation: Callable[[Resolver], T],
    floor: PolicyFloor | None = None,
    writes: bool = False,
) -> T:
    """Run ``operation`` in the request's view (called in a worker thread)."""
    try:
        with request_resolver(host, intent, floor, writes=writes) as resolver:
            return operation(resolver)
    except OSError as exc:
        raise fs_error(exc) from exc


class _Service:
    """The handlers, sharing this host's view and one set of limits."""

    def __init__(self, host: HostView, limits: FsLimits, floor: PolicyFloor | None) -> None:
        self.host = host
        self.limits = limits
        self.floor = floor

    async def _run(
        self,
        intent: SandboxIntent | None,
        operation: Callable[[Resolver], T],
        *,
        writes: bool = False,
    ) -> T:
        return await asyncio.to_thread(_work, self.host, intent, operation, self.floor, writes)

    def _handles(self, ctx: RequestContext) -> HandleTable:
        scope = ctx.connection_scope()
        table = scope.get(_SCOPE_KEY)
        if table is None:
            table = scope[_SCOPE_KEY] = HandleTable(self.limits.max_handles)
        assert isinstance(table, HandleTable)
        return table

    def path_handler(
        self, spec: _PathMethod[Any, Any]
    ) -> Callable[[RequestContext, _PathParams], Awaitable[Any]]:
        """The handler of a ``_PATH_METHODS`` row (mypy checks each row where it is written)."""

        async def handle(ctx: RequestContext, params: _PathParams) -> Any:
            intent, path = params.sandbox, parse_path_uri(params.path)
            if spec.audit is None:
                result = await self._run(intent, spec.operation(params, path, self.limits))
                return spec.render(result)
            with audit.operation(
                _event(spec.method),
                audit.origin(ctx),
                path=audit.bounded(path),
                sandbox=intent is not None,
                **spec.audit(params),
            ):
                operation = spec.operation(params, path, self.limits)  # may refuse: audited
                # Every row with an audit line changes files.
                result = await self._run(intent, operation, writes=True)
            return spec.render(result)

        return handle

    async def copy(self, ctx: RequestContext, params: fm.CopyParams) -> Any:
        """``fs/copy``, the one method on two paths (the source's error comes first)."""
        intent = params.sandbox
        source = parse_path_uri(params.source_path)
        destination = parse_path_uri(params.destination_path)
        operation = partial(
            copying.copy, source=source, destination=destination, recursive=params.recursive
        )
        with audit.operation(
            _event(methods.FS_COPY),
            audit.origin(ctx),
            source=audit.bounded(source),
            destination=audit.bounded(destination),
            recursive=params.recursive,
            sandbox=intent is not None,
        ):
            await self._run(intent, operation, writes=True)
        return {}

    # --- handles -----------------------------------------------------------------------------

    async def open(self, ctx: RequestContext, params: fm.OpenParams) -> Any:
        intent, path = params.sandbox, parse_path_uri(params.path)
        table = self._handles(ctx)
        handle = table.reserve(params.handle_id, params.mode)
        async with handle.turn():
            try:
                with _audit_open(ctx, params, path):
                    opening = partial(_open_handle, path=path, handle=handle)
                    writes = params.mode is not fm.OpenMode.READ
                    await self._run(intent, opening, writes=writes)
            except BaseException:
                table.discard(handle)
                raise
        return {"handleId": params.handle_id}

    async def read_block(self, ctx: RequestContext, params: fm.ReadBlockParams) -> Any:
        self._check_block(params.length, "read")
        table = self._handles(ctx)
        handle = table.get(params.handle_id)
        async with handle.turn():
            try:
                data = await asyncio.to_thread(handle.read, params.length, params.offset)
            except OSError as exc:
                # The reference forgets a handle whose read failed; clients expect it gone.
                table.discard(handle)
                raise fs_error(exc) from exc
        return {"chunk": b64(data), "eof": len(data) < params.length}

    async def write_block(self, ctx: RequestContext, params: fm.WriteBlockParams) -> Any:
        self._check_block(len(params.chunk), "write")
        if params.offset + len(params.chunk) > _I64_MAX:
            raise InvalidRequest("file write range exceeds the signed 64-bit file offset limit")
        handle = self._handles(ctx).get(params.handle_id)
        async with handle.turn():
            try:
                await asyncio.to_thread(handle.write, params.chunk, params.offset)
            except OSError as exc:
                raise fs_error(exc) from exc
        return {}

    async def close(self, ctx: RequestContext, params: fm.CloseParams) -> Any:
        handle = self._handles(ctx).pop(params.handle_id)
        if handle is not None:
            async with handle.turn():  # after what was sent before the close
                handle.close()
        return {}

    def _check_block(self, length: int, kind: str) -> None:
        limit = self.limits.max_block_bytes
        if not 1 <= length <= limit:
            raise InvalidRequest(f"file {kind} block length must be between 1 and {limit}")


def _event(method: str) -> str:
    """The audit event of a method: ``fs/writeFile`` is ``fs.writeFile``."""
    return method.replace("/", ".")


def _audit_open(
    ctx: RequestContext, params: fm.OpenParams, path: str
) -> AbstractContextManager[object]:
    """One audit line per file opened for writing (not one per block written to it)."""
    if params.mode is fm.OpenMode.READ:
        return nullcontext()
    return audit.operation(
        _event(methods.FS_OPEN),
        audit.origin(ctx),
        path=audit.bounded(path),
        mode=params.mode.value,
        handleId=audit.bounded(params.handle_id),
        sandbox=params.sandbox is not None,
    )


def _open_handle(resolver: Resolver, *, path: str, handle: Handle) -> None:
    """Open ``path`` for ``handle`` (in a worker thread)."""
    with resolver.locate(path) as location:
        if handle.mode is fm.OpenMode.READ:
            fd, _stat = files.open_for_read(resolver, location, path)
        else:
            fd = files.open_for_replace(resolver, location, path)
    handle.attach(fd)


def fs_routes(
    host: HostView, limits: FsLimits | None = None, floor: PolicyFloor | None = None
) -> list[Route]:
    """The routes of every filesystem method on ``host`` (``fs/watchMissing`` is absent),
    confined at least by ``floor`` when the operator requires one."""
    service = _Service(host, limits or FsLimits(), floor)
    return [
        *(route(spec.method, spec.params, service.path_handler(spec)) for spec in _PATH_METHODS),
        route(methods.FS_COPY, fm.CopyParams, service.copy),
        route(methods.FS_OPEN, fm.OpenParams, service.open),
        route(methods.FS_READ_BLOCK, fm.ReadBlockParams, service.read_block),
        route(methods.FS_WRITE_BLOCK, fm.WriteBlockParams, service.write_block),
        route(methods.FS_CLOSE, fm.CloseParams, service.close),
    ]
