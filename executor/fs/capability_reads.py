"""Reading the files capability discovery returns: whole, UTF-8, bounded, never fatal.

A file is read as the reference's discovery reads it: its metadata first (missing, or not a
regular file: silently nothing; any other failure: a warning), its size against the per-file
limit and the root's byte budget, then its content, counted again while reading (it may have
grown), then checked to be UTF-8. Every problem is a warning in the root's answer, worded as
the reference words it. Both steps go through the request's ``Resolver``, so a sandboxed root
reads exactly what sandboxed ``fs/getMetadata`` and ``fs/readFile`` would.

Ours: a budget for the whole request on top of the reference's per-root one (the reference's
128 roots of 16 MiB each would make a 2 GiB answer).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from executor.errors import ExecutorError, os_error_message
from executor.fs import files, metadata
from executor.fs.resolve import Resolver
from executor.protocol.capability_messages import TextFile

__all__ = ["Budget", "FileReader", "utf8_problem"]


@dataclass(slots=True)
class Budget:
    """Bytes of file content an answer may still carry, and how to say it is spent."""

    limit: int
    #: The warning when a file does not fit (``{limit}`` is filled in).
    message: str
    used: int = 0

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes stay within the limit."""
        return self.used + size <= self.limit

    @property
    def remaining(self) -> int:
        """Bytes left."""
        return max(self.limit - self.used, 0)

    def warning(self) -> str:
        """The reason a file was left out."""
        return self.message.format(limit=self.limit)


class _TooLong(Exception):
    """The file grew past what may be read while it was being read."""


def utf8_problem(data: bytes) -> str | None:
    """Why ``data`` is not UTF-8, as Rust's ``Utf8Error`` says it; None when it is."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data":
            return f"incomplete utf-8 byte sequence from index {exc.start}"
        return f"invalid utf-8 sequence of {exc.end - exc.start} bytes from index {exc.start}"
    return None


class FileReader:
    """Reads the files of one root through its resolver, within the budgets, warning."""

    def __init__(
        self,
        resolver: Resolver,
        *,
        max_file_bytes: int,
        budgets: tuple[Budget, ...],
        warnings: list[str],
    ) -> None:
        self.resolver = resolver
        self.max_file_bytes = max_file_bytes
        self.budgets = budgets
        self.warnings = warnings

    def read(self, path: str, uri: str) -> TextFile | None:
        """The file at native ``path`` (shown as ``uri``), or None with a warning if due."""
        try:
            found = metadata.get_metadata(self.resolver, path, follow=True)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                self._warn(f"failed to inspect capability file {uri}: {os_error_message(exc)}")
            return None
        except ExecutorError as exc:
            self._warn(f"failed to inspect capability file {uri}: {exc.message}")
            return None
        if not found.is_file:
            return None
        if found.size > self.max_file_bytes:
            self._warn(f"capability file {uri} exceeds the {self.max_file_bytes}-byte limit")
            return None
        for budget in self.budgets:
            if not budget.fits(found.size):
                self._warn(budget.warning())
                return None
        try:
            data = self._content(path)
        except OSError as exc:
            self._warn(f"failed to read capability file {uri}: {os_error_message(exc)}")
            return None
        except ExecutorError as exc:
            self._warn(f"failed to read capability file {uri}: {exc.message}")
            return None
        except _TooLong:
            self._warn(f"capability file {uri} exceeded its read limit")
            return None
        problem = utf8_problem(data)
        if problem is not None:
            self._warn(f"capability file {uri} is not UTF-8: {problem}")
            return None
        for budget in self.budgets:
            budget.used += len(data)
        return TextFile(uri, data.decode("utf-8"))

    def _content(self, path: str) -> bytes:
        """Every byte of the regular file ``path``; ``_TooLong`` past the limits."""
        cap = min(self.max_file_bytes, *(budget.remaining for budget in self.budgets))
        with self.resolver.locate(path) as location:
            fd, _opened = files.open_for_read(self.resolver, location, path)
        try:
            data = bytearray()
            while True:
                chunk = os.read(fd, min(1 << 16, cap + 1 - len(data)))
                if not chunk:
                    return bytes(data)
                data += chunk
                if len(data) > cap:
                    raise _TooLong
        finally:
            os.close(fd)

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
