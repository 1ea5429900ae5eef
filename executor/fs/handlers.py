"""The ``fs/*`` routes: decode what the protocol layer left raw, run the work off the loop.

Every request parses its ``sandbox`` (``-32602`` on bad input) and its path URIs first, then
runs in a worker thread: materialize the sandbox for this host (``Purpose.FILESYSTEM``), build
a ``Resolver`` over its view, do the operation. ``OSError`` is translated here, once, by
``fs_error``. Handle bookkeeping stays on the event loop; only the I/O moves to threads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final, TypeVar

from executor.errors import InvalidRequest, fs_error
from executor.fs import copy as copying
from executor.fs import directories, files, metadata, remove, walk
from executor.fs.aliases import alias_paths
from executor.fs.handles import DEFAULT_MAX_HANDLES, Handle, HandleTable
from executor.fs.resolve import Resolver
from executor.fs.view import SandboxView
from executor.protocol import fs_messages as fm
from executor.protocol import jsonrpc, methods
from executor.protocol.intent import SandboxIntent
from executor.protocol.messages import b64
from executor.protocol.paths import parse_path_uri, to_uri
from executor.routing import Route, route
from executor.sandbox.materialize import HostView, Purpose, materialize

if TYPE_CHECKING:
    from executor.routing import RequestContext

__all__ = ["FsLimits", "fs_routes"]

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


def _resolver(host: HostView, intent: SandboxIntent | None) -> Resolver:
    """A resolver for the request: a sandbox view unless the filesystem is unrestricted."""
    if intent is None:
        return Resolver()
    rules = materialize(intent, host, purpose=Purpose.FILESYSTEM)
    if rules is None or not rules.filesystem_restricted:
        return Resolver()
    return Resolver(SandboxView(rules, alias_paths(intent, host)))


def _work(host: HostView, intent: SandboxIntent | None, operation: Callable[[Resolver], T]) -> T:
    """Run ``operation`` in the request's view (called in a worker thread)."""
    try:
        with _resolver(host, intent) as resolver:
            return operation(resolver)
    except OSError as exc:
        raise fs_error(exc) from exc


class _Service:
    """The handlers, sharing this host's view and one set of limits."""

    def __init__(self, host: HostView, limits: FsLimits) -> None:
        self.host = host
        self.limits = limits

    async def _run(self, intent: SandboxIntent | None, operation: Callable[[Resolver], T]) -> T:
        return await asyncio.to_thread(_work, self.host, intent, operation)

    def _handles(self, ctx: RequestContext) -> HandleTable:
        scope = ctx.connection_scope()
        table = scope.get(_SCOPE_KEY)
        if table is None:
            table = scope[_SCOPE_KEY] = HandleTable(self.limits.max_handles)
        assert isinstance(table, HandleTable)
        return table

    # --- whole-object methods ----------------------------------------------------------------

    async def read_file(self, ctx: RequestContext, params: fm.ReadFileParams) -> Any:
        intent, path = params.sandbox, parse_path_uri(params.path)
        limit = self.limits.max_read_file_bytes or _I64_MAX
        operation = partial(
            files.read_file_base64, path=path, follow=params.follow_symlinks, limit=limit
        )
        encoded = await self._run(intent, operation)
        return jsonrpc.Spliced((b'{"dataBase64":"', encoded, b'"}'))

    async def write_file(self, ctx: RequestContext, params: fm.WriteFileParams) -> Any:
        intent, path = params.sandbox, parse_path_uri(params.path)
        data = params.data()
        await self._run(
            intent,
            partial(files.write_file, path=path, data=data, follow=params.follow_symlinks),
        )
        return {}

    async def create_directory(self, ctx: RequestContext, params: fm.CreateDirectoryParams) -> Any:
        intent, path = params.sandbox, parse_path_uri(params.path)
        operation = partial(
            directories.create_directory,
            path=path,
            recursive=params.recursive,
            follow=params.follow_symlinks,
        )
        await self._run(intent, operation)
        return {}

    async def get_metadata(self, ctx: RequestContext, params: fm.GetMetadataParams) -> Any:
        intent, path = params.sandbox, parse_path_uri(params.path)
        operation = partial(metadata.get_metadata, path=path, follow=params.follow_symlinks)
        return (await self._run(intent, operation)).to_wire()

    async def read_directory(self, ctx: RequestContext, params: fm.ReadDirectoryParams) -> Any:
        intent, path = params.sandbox, parse_path_uri(params.path)
        entries = await self._run(intent, partial(directories.read_directory, path=path))
        return {"entries": [entry.to_wire() for entry in entries]}

    async def walk(self, ctx: RequestContext, params: fm.WalkParams) -> Any:
        intent, path = params.sandbox, parse_path_uri(params.path)
        walk.check_options(params.options)
        result = await self._run(intent, partial(walk.walk, path=path, options=params.options))
        return result.to_wire()

    async def remove(self, ctx: RequestContext, params: fm.RemoveParams) -> Any:
        intent, path = params.sandbox, parse_path_uri(params.path)
        operation = partial(
            remove.remove,
            path=path,
            recursive=params.recursive,
            force=params.force,
            follow=params.follow_symlinks,
        )
        await self._run(intent, operation)
        return {}

    async def copy(self, ctx: RequestContext, params: fm.CopyParams) -> Any:
        intent = params.sandbox
        source = parse_path_uri(params.source_path)
        destination = parse_path_uri(params.destination_path)
        operation = partial(
            copying.copy, source=source, destination=destination, recursive=params.recursive
        )
        await self._run(intent, operation)
        return {}

    async def canonicalize(self, ctx: RequestContext, params: fm.CanonicalizeParams) -> Any:
        intent, path = params.sandbox, parse_path_uri(params.path)
        real = await self._run(intent, partial(metadata.canonicalize, path=path))
        return {"path": to_uri(real)}

    # --- handles -----------------------------------------------------------------------------

    async def open(self, ctx: RequestContext, params: fm.OpenParams) -> Any:
        intent, path = params.sandbox, parse_path_uri(params.path)
        table = self._handles(ctx)
        handle = table.reserve(params.handle_id, params.mode)
        async with handle.turn():
            try:
                await self._run(intent, partial(_open_handle, path=path, handle=handle))
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


# --- operations (worker threads) ------------------------------------------------------------


def _open_handle(resolver: Resolver, *, path: str, handle: Handle) -> None:
    with resolver.locate(path) as location:
        if handle.mode is fm.OpenMode.READ:
            fd, _stat = files.open_for_read(resolver, location, path)
        else:
            fd = files.open_for_replace(resolver, location, path)
    handle.attach(fd)


def fs_routes(host: HostView, limits: FsLimits | None = None) -> list[Route]:
    """The routes of every filesystem method on ``host`` (``fs/watchMissing`` is absent)."""
    service = _Service(host, limits or FsLimits())
    table: list[tuple[str, type, Callable[..., Any]]] = [
        (methods.FS_READ_FILE, fm.ReadFileParams, service.read_file),
        (methods.FS_WRITE_FILE, fm.WriteFileParams, service.write_file),
        (methods.FS_CREATE_DIRECTORY, fm.CreateDirectoryParams, service.create_directory),
        (methods.FS_GET_METADATA, fm.GetMetadataParams, service.get_metadata),
        (methods.FS_READ_DIRECTORY, fm.ReadDirectoryParams, service.read_directory),
        (methods.FS_WALK, fm.WalkParams, service.walk),
        (methods.FS_REMOVE, fm.RemoveParams, service.remove),
        (methods.FS_COPY, fm.CopyParams, service.copy),
        (methods.FS_CANONICALIZE, fm.CanonicalizeParams, service.canonicalize),
        (methods.FS_OPEN, fm.OpenParams, service.open),
        (methods.FS_READ_BLOCK, fm.ReadBlockParams, service.read_block),
        (methods.FS_WRITE_BLOCK, fm.WriteBlockParams, service.write_block),
        (methods.FS_CLOSE, fm.CloseParams, service.close),
    ]
    return [route(method, params, handler) for method, params, handler in table]
