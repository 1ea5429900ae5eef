"""``fs/*``: whole-file calls, and streamed reads and writes over file handles.

Paths are absolute paths on the executor's host (or ``file:`` URIs). Every call takes an
optional ``sandbox`` (a profile name or a wire dict, as ``Environment.start``), under which
the server performs it. Read-only calls cut off by a dropped connection are sent again
after reconnecting; the others raise ``OutcomeUnknown``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from executor.client.errors import ConnectionLost, OutcomeUnknown, ServerError
from executor.client.paths import native_path, path_uri, sandbox_context
from executor.protocol import b64codec, methods

if TYPE_CHECKING:
    from executor.client.recovery import Link

__all__ = ["BLOCK_SIZE", "DirectoryEntry", "FileSystem", "Metadata"]

#: Largest block ``fs/readBlock`` returns and ``fs/writeBlock`` takes.
BLOCK_SIZE = 1 << 20

Sandbox = str | Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Metadata:
    """``fs/getMetadata``: what the path (or its symlink's target) is."""

    is_directory: bool
    is_file: bool
    is_symlink: bool
    size: int
    created_at_ms: int
    modified_at_ms: int


@dataclass(frozen=True, slots=True)
class DirectoryEntry:
    """One child of a directory."""

    file_name: str
    is_directory: bool
    is_file: bool


class FileSystem:
    """The executor host's file system (``env.fs``)."""

    def __init__(self, link: Link) -> None:
        self._link = link

    async def _call(
        self,
        method: str,
        params: dict[str, Any],
        sandbox: Sandbox,
        workspace_roots: Sequence[str] = (),
    ) -> Any:
        if sandbox is not None:
            params["sandbox"] = sandbox_context(sandbox, workspace_roots=workspace_roots)
        idempotent = method in _READS
        return await self._link.call(method, params, idempotent=idempotent)

    async def read_file(
        self,
        path: str,
        *,
        follow_symlinks: bool = True,
        sandbox: Sandbox = None,
        workspace_roots: Sequence[str] = (),
    ) -> bytes:
        """The whole file (large files: ``read_stream``)."""
        params = {"path": path_uri(path), "followSymlinks": follow_symlinks}
        result = await self._call(methods.FS_READ_FILE, params, sandbox, workspace_roots)
        return b64codec.decode(result["dataBase64"])

    async def write_file(
        self,
        path: str,
        data: bytes,
        *,
        follow_symlinks: bool = True,
        sandbox: Sandbox = None,
        workspace_roots: Sequence[str] = (),
    ) -> None:
        """Create or truncate the file and write ``data`` (its directory must exist)."""
        params = {
            "path": path_uri(path),
            "dataBase64": b64codec.encode(data).decode(),
            "followSymlinks": follow_symlinks,
        }
        await self._call(methods.FS_WRITE_FILE, params, sandbox, workspace_roots)

    async def create_directory(
        self, path: str, *, recursive: bool = True, sandbox: Sandbox = None
    ) -> None:
        """Create a directory (and its parents, with ``recursive``)."""
        params = {"path": path_uri(path), "recursive": recursive}
        await self._call(methods.FS_CREATE_DIRECTORY, params, sandbox)

    async def get_metadata(
        self, path: str, *, follow_symlinks: bool = True, sandbox: Sandbox = None
    ) -> Metadata:
        """What is at ``path``."""
        params = {"path": path_uri(path), "followSymlinks": follow_symlinks}
        r = await self._call(methods.FS_GET_METADATA, params, sandbox)
        return Metadata(
            bool(r["isDirectory"]),
            bool(r["isFile"]),
            bool(r.get("isSymlink", False)),
            int(r.get("size", 0)),
            int(r.get("createdAtMs", 0)),
            int(r.get("modifiedAtMs", 0)),
        )

    async def exists(self, path: str, *, sandbox: Sandbox = None) -> bool:
        """Whether ``path`` exists (a dangling symlink does not)."""
        try:
            await self.get_metadata(path, sandbox=sandbox)
        except ServerError as exc:
            if exc.code == -32004:
                return False
            raise
        return True

    async def read_directory(self, path: str, *, sandbox: Sandbox = None) -> list[DirectoryEntry]:
        """The directory's children (unsorted)."""
        r = await self._call(methods.FS_READ_DIRECTORY, {"path": path_uri(path)}, sandbox)
        return [
            DirectoryEntry(e["fileName"], bool(e["isDirectory"]), bool(e["isFile"]))
            for e in r["entries"]
        ]

    async def walk(
        self,
        path: str,
        *,
        max_depth: int = 16,
        max_directories: int = 1_000,
        max_entries: int = 10_000,
        follow_directory_symlinks: bool = False,
        sandbox: Sandbox = None,
    ) -> dict[str, Any]:
        """``fs/walk``'s result as it is: ``entries``, ``errors``, ``truncated``."""
        params = {
            "path": path_uri(path),
            "options": {
                "maxDepth": max_depth,
                "maxDirectories": max_directories,
                "maxEntries": max_entries,
                "followDirectorySymlinks": follow_directory_symlinks,
            },
        }
        result: dict[str, Any] = await self._call(methods.FS_WALK, params, sandbox)
        return result

    async def remove(
        self,
        path: str,
        *,
        recursive: bool = True,
        force: bool = True,
        sandbox: Sandbox = None,
    ) -> None:
        """Remove a file or a tree (a missing path is fine with ``force``)."""
        params = {"path": path_uri(path), "recursive": recursive, "force": force}
        await self._call(methods.FS_REMOVE, params, sandbox)

    async def copy(
        self, source: str, destination: str, *, recursive: bool = False, sandbox: Sandbox = None
    ) -> None:
        """Copy a file, or a directory with ``recursive``."""
        params = {
            "sourcePath": path_uri(source),
            "destinationPath": path_uri(destination),
            "recursive": recursive,
        }
        await self._call(methods.FS_COPY, params, sandbox)

    async def canonicalize(self, path: str, *, sandbox: Sandbox = None) -> str:
        """The absolute path with every symlink resolved (a native path)."""
        r = await self._call(methods.FS_CANONICALIZE, {"path": path_uri(path)}, sandbox)
        return native_path(r["path"])

    async def read_stream(
        self,
        path: str,
        *,
        block_size: int = BLOCK_SIZE,
        offset: int = 0,
        sandbox: Sandbox = None,
    ) -> AsyncIterator[bytes]:
        """The file's bytes from ``offset``, block by block (``fs/open`` + ``fs/readBlock``).

        File handles belong to a connection, so after a reconnect the file is opened again
        and the read goes on at the offset reached (a file changed meanwhile is read as it
        is then). Close the iterator (``contextlib.aclosing``) when stopping early.
        """
        block_size = max(1, min(block_size, BLOCK_SIZE))
        context = sandbox_context(sandbox) if sandbox is not None else None
        opened: tuple[Any, str] | None = None
        try:
            while True:
                rpc = await self._link.connection()
                if opened is None or opened[0] is not rpc:
                    handle = f"read-{uuid.uuid4().hex[:16]}"
                    params: dict[str, Any] = {
                        "handleId": handle,
                        "path": path_uri(path),
                        "mode": "read",
                    }
                    if context is not None:
                        params["sandbox"] = context
                    try:
                        await rpc.call(methods.FS_OPEN, params)
                    except ConnectionLost as exc:
                        if exc.cause is not None:
                            raise exc.cause from None
                        continue
                    opened = (rpc, handle)
                try:
                    block = await rpc.call(
                        methods.FS_READ_BLOCK,
                        {"handleId": opened[1], "offset": offset, "len": block_size},
                    )
                except ConnectionLost as exc:
                    if exc.cause is not None:
                        raise exc.cause from None  # a retry would meet it again
                    continue
                data = b64codec.decode(block["chunk"])
                if data:
                    offset += len(data)
                    yield data
                if block.get("eof") or not data:
                    return
        finally:
            if opened is not None and not opened[0].closed:
                with contextlib.suppress(Exception):
                    await opened[0].call(methods.FS_CLOSE, {"handleId": opened[1]})

    async def write_stream(
        self,
        path: str,
        chunks: AsyncIterable[bytes] | Iterable[bytes],
        *,
        sandbox: Sandbox = None,
    ) -> int:
        """Create or truncate ``path`` and write ``chunks`` to it in order (``fs/open``
        ``replace`` + ``fs/writeBlock``); returns the bytes written.

        A dropped connection mid-way raises ``OutcomeUnknown`` (the file holds a prefix of
        what was sent; the client does not rewrite it on its own).
        """
        rpc = await self._link.connection()
        handle = f"write-{uuid.uuid4().hex[:16]}"
        params: dict[str, Any] = {"handleId": handle, "path": path_uri(path), "mode": "replace"}
        if sandbox is not None:
            params["sandbox"] = sandbox_context(sandbox)
        offset = 0
        method = methods.FS_OPEN
        try:
            await rpc.call(method, params)
            method = methods.FS_WRITE_BLOCK
            async for chunk in _each(chunks):
                for start in range(0, len(chunk), BLOCK_SIZE):
                    block = chunk[start : start + BLOCK_SIZE]
                    encoded = b64codec.encode(block).decode()
                    await rpc.call(method, {"handleId": handle, "offset": offset, "chunk": encoded})
                    offset += len(block)
            method = methods.FS_CLOSE
            await rpc.call(method, {"handleId": handle})
        except ConnectionLost as exc:
            raise OutcomeUnknown(method, f"{offset} bytes of {path} were written") from exc
        except BaseException:
            if not rpc.closed:
                with contextlib.suppress(Exception):
                    await rpc.call(methods.FS_CLOSE, {"handleId": handle})
            raise
        return offset


_READS = frozenset(
    {
        methods.FS_READ_FILE,
        methods.FS_GET_METADATA,
        methods.FS_READ_DIRECTORY,
        methods.FS_WALK,
        methods.FS_CANONICALIZE,
    }
)


async def _each(chunks: AsyncIterable[bytes] | Iterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(chunks, AsyncIterable):
        async for chunk in chunks:
            yield chunk
    else:
        for chunk in chunks:
            yield chunk
