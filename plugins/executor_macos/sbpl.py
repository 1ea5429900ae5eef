"""SBPL building blocks (pure): parameter references, path spellings, glob -> regex.

Nothing a client controls is ever written into policy text. Paths and regexes travel as
``-D NAME=VALUE`` parameters of ``sandbox-exec``; the text only refers to them by name through
``(param "NAME")``, and names are generated here from a fixed alphabet. So a path holding
quotes, parentheses, backslashes or newlines cannot change the shape of the policy.

Regexes are POSIX extended regular expressions, which is what Seatbelt's ``regex`` filter
takes. The translator below only emits constructs whose meaning is the same in POSIX ERE and in
Python's ``re`` (literal characters, ``\\`` escapes of the ERE specials, bracket expressions of
letters and digits, ``[^/]``, groups with ``*``), so that the tests can check it with Python.
It never emits ``.``: whether ``.`` matches a newline depends on the engine, ``[^/]`` does not.
"""

from __future__ import annotations

import re
from typing import Final

from executor.sandbox.rules import is_within

__all__ = ["ALIASES", "ANY_RUN", "ONE_CHAR", "ere_literal", "glob_to_ere", "param", "spellings"]

#: macOS links some top-level directories into ``/private``. Seatbelt matches the resolved path
#: (``/private/tmp/x``), but a path that does not exist yet can be checked by the spelling it
#: was named with, so every rule covers both spellings.
ALIASES: Final = (("/tmp", "/private/tmp"), ("/var", "/private/var"), ("/etc", "/private/etc"))

_NAME: Final = re.compile(r"[A-Z][A-Z0-9_]*")
#: Characters with a meaning in POSIX ERE outside bracket expressions (``]`` and ``}`` are
#: ordinary there, and ``\\]`` is undefined in POSIX, so they are left alone).
_ERE_SPECIAL: Final = frozenset("\\^.[$()|*+?{")
_ALNUM: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
#: Any single character of one path component.
ONE_CHAR: Final = "[^/]"
#: Any run of characters, ``/`` included, spelled without ``.`` (see the module docstring).
ANY_RUN: Final = "([^/]|/)*"


def param(name: str) -> str:
    """``(param "NAME")``; ``name`` must be a generated parameter name."""
    if _NAME.fullmatch(name) is None:
        raise ValueError(f"not a parameter name: {name!r}")
    return f'(param "{name}")'


def spellings(path: str) -> tuple[str, ...]:
    """``path`` and, under ``/tmp``, ``/var`` or ``/etc`` (or their ``/private`` forms), the
    other spelling of the same location."""
    for short, full in ALIASES:
        if is_within(path, short):
            return (path, full + path[len(short) :])
        if is_within(path, full):
            return (path, short + path[len(full) :])
    return (path,)


def ere_literal(text: str) -> str:
    """``text`` as an ERE matching exactly itself."""
    return "".join("\\" + char if char in _ERE_SPECIAL else char for char in text)


def glob_to_ere(pattern: str) -> str:
    """Translate an absolute git-style glob to an ERE anchored at the start only.

    The caller appends ``$`` (the match itself) or ``/`` (everything below a match). Same
    reading as ``executor.sandbox.rules.glob_to_regex``: ``*`` and ``?`` stay within a path
    component, ``**/`` spans zero or more directories, any other ``**`` anything. A bracket
    class of letters, digits and ranges between them is kept exactly (``!`` or ``^`` negates);
    any other class becomes "one character of a component", which matches at least as much, so
    the deny is never narrower than asked. A trailing ``/`` is dropped (a directory and
    everything below it).
    """
    if len(pattern) > 1:
        pattern = pattern.rstrip("/") or "/"
    out: list[str] = ["^"]
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append(f"({ONE_CHAR}*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(ANY_RUN)
            i += 2
        elif pattern[i] == "*":
            out.append(f"{ONE_CHAR}*")
            i += 1
        elif pattern[i] == "?":
            out.append(ONE_CHAR)
            i += 1
        elif pattern[i] == "[" and (parsed := _bracket(pattern, i)) is not None:
            text, i = parsed
            out.append(text)
        else:
            out.append(ere_literal(pattern[i]))
            i += 1
    return "".join(out)


def _bracket(pattern: str, start: int) -> tuple[str, int] | None:
    """The ERE for the class opening at ``start`` and the index after it; None if unclosed."""
    first = start + 1
    negated = pattern[first : first + 1] in ("!", "^")
    if negated:
        first += 1
    # As in git, a ``]`` right after the opening (or after ``!``) is a member, not the end.
    end = pattern.find("]", first + 1 if pattern[first : first + 1] == "]" else first)
    if end < 0:
        return None
    body = pattern[first:end]
    if not _simple_class(body):
        return ONE_CHAR, end + 1
    return ("[^" + body + "/]" if negated else "[" + body + "]"), end + 1


def _simple_class(body: str) -> bool:
    """Letters and digits, and ranges between two of the same kind, in order."""
    if not body:
        return False
    i = 0
    while i < len(body):
        if body[i] not in _ALNUM:
            return False
        if body[i + 1 : i + 2] == "-" and i + 2 < len(body):
            low, high = body[i], body[i + 2]
            if high not in _ALNUM or _kind(low) != _kind(high) or low > high:
                return False
            i += 3
        elif body[i + 1 : i + 2] == "-":
            return False
        else:
            i += 1
    return True


def _kind(char: str) -> str:
    return "digit" if char.isdigit() else "lower" if char.islower() else "upper"
