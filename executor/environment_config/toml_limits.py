"""The reference's TOML parser limits, which ``tomllib`` does not have.

The reference parses with the Rust ``toml`` crate, which refuses (observed on 0.171.0):

* arrays and inline tables nested more than 80 deep — ``cannot recurse further; max
  recursion depth met`` at the 81st opening bracket;
* integers outside the signed 64-bit range — ``invalid type: integer `N` as i128, expected
  any valid TOML value``, spanning the literal;
* a key (table header, dotted key, inline-table key) of more than 80 parts — ``recursion
  limit``, reported without a position once the whole document has parsed.

``check`` scans a document ``tomllib`` has accepted (or rejected only for its own recursion
limit) and raises the first of those, in document order. It is a lexical pass over valid
TOML: strings and comments are skipped, brackets counted, integer literals range-checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_DEPTH", "MAX_KEY_PARTS", "LimitError", "check"]

MAX_DEPTH: Final = 80
MAX_KEY_PARTS: Final = 80

_BARE: Final = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR_END: Final = frozenset(",]}#\n\r \t")
_INTEGER: Final = re.compile(r"[+-]?(0x[0-9A-Fa-f_]+|0o[0-7_]+|0b[01_]+|[0-9_]+)")
_DATE_SPACE_TIME: Final = re.compile(r"\d{4}-\d{2}-\d{2} \d")
_I64: Final = range(-(2**63), 2**63)


@dataclass(frozen=True, slots=True)
class LimitError(Exception):
    """A limit was exceeded; ``offset`` is ``None`` for the position-less ``recursion limit``."""

    message: str
    offset: int | None = None
    span: int = 1


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.long_key = False

    def run(self) -> None:
        text = self.text
        while True:
            self._skip(newlines=True)
            if self.i >= len(text):
                break
            if text[self.i] == "[":
                self.i += 2 if text.startswith("[[", self.i) else 1
                self._key()
                self._to_line_end()
            else:
                self._key()
                self.i += 1  # "="
                self._skip(newlines=False)
                self._value(0)
        if self.long_key:
            raise LimitError("recursion limit")

    def _skip(self, *, newlines: bool) -> None:
        text = self.text
        while self.i < len(text):
            char = text[self.i]
            if char in " \t" or (newlines and char in "\r\n"):
                self.i += 1
            elif char == "#":
                self._to_line_end()
            else:
                return

    def _to_line_end(self) -> None:
        end = self.text.find("\n", self.i)
        self.i = len(self.text) if end < 0 else end

    def _key(self) -> None:
        parts = 0
        while True:
            self._skip(newlines=False)
            char = self.text[self.i] if self.i < len(self.text) else ""
            if char in "\"'":
                self._string()
            else:
                match = _BARE.match(self.text, self.i)
                self.i = match.end() if match else self.i + 1
            parts += 1
            self._skip(newlines=False)
            if not self.text.startswith(".", self.i):
                break
            self.i += 1
        if parts > MAX_KEY_PARTS:
            self.long_key = True

    def _value(self, depth: int) -> None:
        text = self.text
        char = text[self.i] if self.i < len(text) else ""
        if char in "\"'":
            self._string()
        elif char == "[":
            self._open(depth)
            while True:
                self._skip(newlines=True)
                if text.startswith("]", self.i) or self.i >= len(text):
                    self.i += 1
                    return
                self._value(depth + 1)
                self._skip(newlines=True)
                if text.startswith(",", self.i):
                    self.i += 1
        elif char == "{":
            self._open(depth)
            while True:
                self._skip(newlines=True)
                if text.startswith("}", self.i) or self.i >= len(text):
                    self.i += 1
                    return
                self._key()
                self.i += 1  # "="
                self._skip(newlines=False)
                self._value(depth + 1)
                self._skip(newlines=True)
                if text.startswith(",", self.i):
                    self.i += 1
        else:
            self._scalar()

    def _open(self, depth: int) -> None:
        if depth + 1 > MAX_DEPTH:
            raise LimitError("cannot recurse further; max recursion depth met", self.i)
        self.i += 1

    def _scalar(self) -> None:
        text, start = self.text, self.i
        end = start
        if _DATE_SPACE_TIME.match(text, start):
            end = start + 11  # keep "YYYY-MM-DD T" together: the space is part of the value
        while end < len(text) and text[end] not in _SCALAR_END:
            end += 1
        self.i = max(end, start + 1)
        literal = text[start:end]
        if not _INTEGER.fullmatch(literal):
            return
        try:
            value = int(literal.replace("_", ""), 0)
        except ValueError:  # not an integer tomllib would have accepted; nothing to check
            return
        if value not in _I64:
            raise LimitError(
                f"invalid type: integer `{value}` as i128, expected any valid TOML value",
                start,
                len(literal),
            )

    def _string(self) -> None:
        text, start = self.text, self.i
        quote = text[start]
        triple = text.startswith(quote * 3, start)
        delimiter = quote * 3 if triple else quote
        i = start + len(delimiter)
        while i < len(text):
            char = text[i]
            if quote == '"' and char == "\\":
                i += 2
                continue
            if text.startswith(delimiter, i):
                i += len(delimiter)
                # A multi-line string may end with up to two quotes before its delimiter.
                extra = 0
                while triple and extra < 2 and text.startswith(quote, i):
                    i += 1
                    extra += 1
                break
            i += 1
        self.i = i


def check(text: str) -> None:
    """Raise ``LimitError`` for the first limit ``text`` (valid TOML) exceeds."""
    _Scanner(text).run()
