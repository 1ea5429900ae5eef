"""Render a parsed TOML table back to text exactly as the reference does.

The reference serializes each selected layer with the Rust ``toml`` crate (0.9,
``toml::to_string``), and a client diffing our answer against the reference's sees every
stylistic choice, so this module reproduces that writer's rules rather than using a Python
TOML writer (tomli-w, for one, always writes basic strings with escapes, multi-line arrays
with trailing commas, short arrays of tables inline, and floats and datetimes via ``str()``):

* a table's plain values come first as ``key = value`` lines, in document order; its
  sub-tables and arrays of tables follow as ``[a.b]`` / ``[[a.b]]`` sections, depth first;
  sections are separated by one blank line; a table with only sub-tables gets no header of
  its own, an empty one does;
* an array is an array of tables when it is non-empty and holds only tables, otherwise it is
  written inline, ``[1, { x = 1 }]``; inline tables are ``{ k = v, ... }`` or ``{}``;
* strings take the first form that needs no escapes: ``"basic"``, ``'literal'``,
  ``\"\"\"multi-line basic\"\"\"``, ``'''multi-line literal'''``; else an escaped basic string
  (multi-line when it holds a newline); keys are bare when they can be;
* floats are written in full decimal (no exponent) with ``.0`` when integral; NaN is ``nan``
  whatever its sign; datetimes use ``T`` and ``Z``.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any, Final

__all__ = ["dumps", "format_key"]

_BARE_KEY: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_ESCAPES: Final = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", "\\": "\\\\"}


class _Section:
    """One ``[table]`` or ``[[array element]]`` of the output, in creation order."""

    __slots__ = ("array", "body", "has_children", "path")

    def __init__(self, path: tuple[str, ...] | None, *, array: bool = False) -> None:
        self.path = path
        self.array = array
        self.body: list[str] = []
        self.has_children = False

    def required(self) -> bool:
        if self.path is None:
            return bool(self.body)
        return self.array or bool(self.body) or not self.has_children

    def render(self) -> str:
        if self.path is None:
            return "".join(self.body)
        key = ".".join(format_key(part) for part in self.path)
        header = f"[[{key}]]\n" if self.array else f"[{key}]\n"
        return header + "".join(self.body)


def dumps(table: dict[str, Any]) -> str:
    """The TOML document for ``table`` (values as ``tomllib`` produces them)."""
    sections: list[_Section] = []

    def fill(section: _Section, mapping: dict[str, Any]) -> None:
        prefix = section.path or ()
        for key, value in mapping.items():
            if isinstance(value, dict):
                section.has_children = True
                child = _Section((*prefix, key))
                sections.append(child)
                fill(child, value)
            elif _is_array_of_tables(value):
                section.has_children = True
                for element in value:
                    child = _Section((*prefix, key), array=True)
                    sections.append(child)
                    fill(child, element)
            else:
                section.body.append(f"{format_key(key)} = {_inline(value)}\n")

    root = _Section(None)
    sections.append(root)
    fill(root, table)
    return "\n".join(section.render() for section in sections if section.required())


def _is_array_of_tables(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _inline(value: Any) -> str:
    # bool before int (bool is an int), datetime before date (datetime is a date).
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_inline(item) for item in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{format_key(k)} = {_inline(v)}" for k, v in value.items()) + " }"
    if isinstance(value, dt.datetime):
        return _datetime(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.time):
        return _time(value)
    raise TypeError(f"not a TOML value: {type(value).__name__}")


def _float(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    # repr is the shortest round-trip form, as Rust's; expand any exponent like Rust's Display.
    text = format(Decimal(repr(value)), "f")
    return text if "." in text else text + ".0"


def _time(value: dt.time) -> str:
    text = f"{value.hour:02}:{value.minute:02}:{value.second:02}"
    if value.microsecond:
        text += "." + f"{value.microsecond:06}".rstrip("0")
    return text


def _datetime(value: dt.datetime) -> str:
    text = f"{value.date().isoformat()}T{_time(value.timetz())}"
    offset = value.utcoffset()
    if offset is None:
        return text
    if not offset:
        return text + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    hours, minutes = divmod(abs(minutes), 60)
    return f"{text}{sign}{hours:02}:{minutes:02}"


def format_key(key: str) -> str:
    """A key as the reference writes it: bare if it can be, else the plainest quoting."""
    if key and all(char in _BARE_KEY for char in key):
        return key
    controls = any(_is_control(char) for char in key)
    if not controls and "\\" not in key and '"' not in key:
        return '"' + _escape(key, multiline=False) + '"'
    if not controls and "'" not in key:
        return f"'{key}'"
    return '"' + _escape(key, multiline=False) + '"'


def _is_control(char: str) -> bool:
    # Tab is allowed raw in every string form; other C0 controls and DEL need escapes.
    return (char <= "\x1f" and char != "\t") or char == "\x7f"


def _longest_run(text: str, quote: str) -> int:
    longest = run = 0
    for char in text:
        run = run + 1 if char == quote else 0
        longest = max(longest, run)
    return longest


def _string(text: str) -> str:
    newline = "\n" in text
    controls = any(_is_control(char) for char in text if char != "\n")
    backslash = "\\" in text
    doubles = _longest_run(text, '"')
    singles = _longest_run(text, "'")
    lead = "\n" if newline else ""
    # The basic forms still escape tabs (the reference's writer always does); literals are raw.
    if not controls and not backslash and not doubles and not newline:
        return '"' + _escape(text, multiline=False) + '"'
    if not controls and not singles and not newline:
        return f"'{text}'"
    if not controls and not backslash and doubles <= 2:
        return '"""' + lead + _escape(text, multiline=True) + '"""'
    if not controls and singles <= 2:
        return f"'''{lead}{text}'''"
    if newline:
        return '"""' + lead + _escape(text, multiline=True) + '"""'
    return '"' + _escape(text, multiline=False) + '"'


def _escape(text: str, *, multiline: bool) -> str:
    out: list[str] = []
    quotes = 0
    # A multi-line basic string may hold up to two quotes in a row; the third is escaped.
    allowed_quotes = 2 if multiline else 0
    for char in text:
        if char == '"':
            quotes += 1
            if quotes > allowed_quotes:
                out.append('\\"')
                quotes = 0
                continue
            out.append(char)
            continue
        quotes = 0
        if char == "\n" and multiline:
            out.append(char)
        elif char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif _is_control(char):
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return "".join(out)
