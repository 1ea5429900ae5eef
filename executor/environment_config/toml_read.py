"""Read one configuration file and parse it, failing the way the reference reports it.

Reading follows symbolic links, never opens anything but a regular file (so a FIFO cannot
stall a worker thread), and refuses files over ``MAX_CONFIG_BYTES`` — a bound of ours: the
reference reads any size (a 30 MiB file was accepted). Text must be UTF-8; the error names
the bad bytes as Rust's ``Utf8Error`` does.

Parsing is ``tomllib`` plus the reference parser's own limits (``toml_limits``). A syntax
error carries a position, so callers can frame it as the reference frames each kind of file
(``path:line:column: message`` or a source snippet with a caret); the explanation itself is
``tomllib``'s wording, since the reference's comes from a different parser.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from dataclasses import dataclass
from typing import Any, Final

from executor.environment_config import toml_limits

__all__ = ["MAX_CONFIG_BYTES", "ReadError", "TomlError", "parse", "read_text"]

#: The largest configuration file read (ours; the reference has no limit).
MAX_CONFIG_BYTES: Final = 16 * 1024 * 1024

_LOCATION: Final = re.compile(r"^(.*) \(at (?:line (\d+), column (\d+)|end of document)\)$", re.S)


class ReadError(Exception):
    """A file exists but could not be read as text; the message is the reference's wording."""


@dataclass(frozen=True, slots=True)
class TomlError(Exception):
    """A document the reference's parser would refuse."""

    message: str
    #: 1-based position, or ``None`` for the position-less ``recursion limit``.
    line: int | None = None
    column: int = 1
    span: int = 1
    line_text: str = ""

    def short(self, path: str) -> str:
        """``path:line:column: message`` (config files: system, user, managed)."""
        return f"{path}:{self.line or 1}:{self.column}: {self.message}"

    def snippet(self) -> str:
        """The reference's multi-line report with a caret (requirements and project files)."""
        if self.line is None:
            return self.message + "\n"
        number = str(self.line)
        gutter = " " * (len(number) + 1)
        return (
            f"TOML parse error at line {self.line}, column {self.column}\n"
            f"{gutter}|\n{number} | {self.line_text}\n"
            f"{gutter}|{' ' * self.column}{'^' * self.span}\n{self.message}\n"
        )


def read_text(path: str) -> str | None:
    """The UTF-8 text of the regular file at ``path``, or ``None`` if nothing is there."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise ReadError(f"path `{path}` is not a file")
        # O_NONBLOCK: should the file be swapped for a FIFO after the stat, open cannot hang.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ReadError(_os_error(exc)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ReadError(f"path `{path}` is not a file")
        data = _read_bounded(fd)
    except OSError as exc:
        raise ReadError(_os_error(exc)) from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ReadError(
            f"file is larger than {MAX_CONFIG_BYTES} bytes, the most this executor reads "
            "of a configuration file"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data":
            raise ReadError(f"incomplete utf-8 byte sequence from index {exc.start}") from None
        raise ReadError(
            f"invalid utf-8 sequence of {exc.end - exc.start} bytes from index {exc.start}"
        ) from None


def _read_bounded(fd: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while total <= MAX_CONFIG_BYTES:
        chunk = os.read(fd, min(1 << 20, MAX_CONFIG_BYTES + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _os_error(exc: OSError) -> str:
    if exc.errno is None:
        return str(exc)
    return f"{os.strerror(exc.errno)} (os error {exc.errno})"


def parse(text: str) -> dict[str, Any]:
    """The document ``text`` as a table; ``TomlError`` if the reference would refuse it."""
    # The reference's parser skips a byte-order mark; tomllib does not.
    body = text[1:] if text.startswith("\ufeff") else text
    try:
        document = tomllib.loads(body)
    except tomllib.TOMLDecodeError as exc:
        raise _syntax_error(body, str(exc)) from None
    except RecursionError:
        document = None  # nested deeper than Python recurses: the limit scan below reports it
    try:
        toml_limits.check(body)
    except toml_limits.LimitError as exc:
        if exc.offset is None:
            raise TomlError(exc.message) from None
        raise _positioned(body, exc.message, exc.offset, exc.span) from None
    if document is None:  # too deep for Python yet within the scan's limits: not expected
        raise TomlError("cannot recurse further; max recursion depth met", 1)
    return document


def _syntax_error(text: str, detail: str) -> TomlError:
    match = _LOCATION.match(detail)
    if match is None:
        return TomlError(detail, 1, 1, 1, text.split("\n", 1)[0])
    message, line, column = match.group(1), match.group(2), match.group(3)
    if line is None:  # "at end of document"
        return _positioned(text, message, len(text), 1)
    return _at(text, message, int(line), int(column), 1)


def _positioned(text: str, message: str, offset: int, span: int) -> TomlError:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return _at(text, message, line, column, span)


def _at(text: str, message: str, line: int, column: int, span: int) -> TomlError:
    lines = text.split("\n")
    line_text = lines[line - 1] if 0 < line <= len(lines) else ""
    return TomlError(message, line, column, span, line_text.rstrip("\r"))
