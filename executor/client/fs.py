"""``fs/*`` wrappers; streamed reads and writes over file handles."""

from __future__ import annotations

__all__ = ["FileSystem"]


class FileSystem:
    """The remote host's file system (``env.fs``)."""

    async def read_file(self, path: str) -> bytes:
        """The whole file."""
        raise NotImplementedError

    async def write_file(self, path: str, data: bytes) -> None:
        """Create or replace a file."""
        raise NotImplementedError
