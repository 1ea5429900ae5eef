"""SBPL building blocks (pure): parameter references, path spellings, glob -> regex.

Nothing a client controls is ever written into policy text. Paths and regexes travel as
``-D NAME=VALUE`` parameters of ``sandbox-exec``; the text only refers to them by name through
``(param "NAME")``, and names are generated here from a fixed alphabet. So a path holding
quotes, parentheses, backslashes or newlines cannot change the shape of the policy.

Regexes are POSIX extended regular expressions, which is what Seatbelt's ``regex`` filter
takes. The translator below only emits constructs whose meaning is the same in POSIX ERE and in
Python's ``re`` (literal characters, ``\\`` escapes of the ERE specials, bracket expressions
whose members are ordered so that none is special, ranges only between letters of one case,
digits or non-ASCII characters, groups with ``|`` and ``*``), so that the tests can check it
with Python. It never emits ``.``: whether ``.`` matches a newline depends on the engine,
``[^/]`` does not.
"""

from __future__ import annotations

import re
from typing import Final

from executor.sandbox import GlobClass, glob_class, is_within

__all__ = [
    "ALIASES",
    "ANY_RUN",
    "ONE_CHAR",
    "class_ere",
    "ere_literal",
    "glob_to_ere",
    "param",
    "spellings",
]

#: macOS links some top-level directories into ``/private``. Seatbelt matches the resolved path
#: (``/private/tmp/x``), but a path that does not exist yet can be checked by the spelling it
#: was named with, so every rule covers both spellings.
ALIASES: Final = (("/tmp", "/private/tmp"), ("/var", "/private/var"), ("/etc", "/private/etc"))

_NAME: Final = re.compile(r"[A-Z][A-Z0-9_]*")
_ALNUM: Final = re.compile(r"[A-Za-z0-9]")
#: The ASCII runs a POSIX range may span whatever the locale: digits, upper and lower case.
_ASCII_RUNS: Final = ((ord("0"), ord("9")), (ord("A"), ord("Z")), (ord("a"), ord("z")))
#: Characters with a meaning in POSIX ERE outside bracket expressions (``]`` and ``}`` are
#: ordinary there, and ``\\]`` is undefined in POSIX, so they are left alone).
_ERE_SPECIAL: Final = frozenset("\\^.[$()|*+?{")
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


def glob_to_ere(pattern: str) -> str | None:
    """Translate an absolute git-style glob to an ERE anchored at the start only; None when
    the glob matches no path at all (a class of no character of a component, like ``[/]``).

    The caller appends ``$`` (the match itself) or ``/`` (everything below a match). Exactly
    the reading of ``executor.sandbox.rules.glob_to_regex``: ``*`` and ``?`` stay within a path
    component, ``**/`` spans zero or more directories, any other ``**`` anything, a bracket
    class is the character set ``rules.glob_class`` reads from it (``/`` never matches, even
    when listed), an unclosed ``[`` is an ordinary character, and a trailing ``/`` is dropped
    (a directory and everything below it).
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
        elif pattern[i] == "[" and (parsed := glob_class(pattern, i)) is not None:
            klass, i = parsed
            text = class_ere(klass)
            if text is None:
                return None
            out.append(text)
        else:
            out.append(ere_literal(pattern[i]))
            i += 1
    return "".join(out)


def class_ere(klass: GlobClass) -> str | None:
    """An ERE matching exactly the characters ``klass`` matches; None if it matches none.

    Only forms that mean the same in POSIX and in Python's ``re``. Bracket ranges only span
    letters of one case, digits, or non-ASCII characters (by code point, as ``[^/]`` already
    assumes characters, not bytes); other ASCII ranges are spelled out, since elsewhere a POSIX
    range depends on the locale's collation. A plain class keeps ASCII letters, digits and
    ranges in one bracket expression and spells every other character as an escaped
    alternative (``(\\[|[0-9])``, ``(é|x)``). A negated class is one bracket expression, ``/``
    included, ordered so that nothing in it is special: ``]`` right after ``^``, ``[`` late
    (never followed by ``.``, ``:`` or ``=``), ``-`` last, and ``\\`` doubled (two backslashes
    in POSIX, one escaped backslash in Python: the same set).
    """
    if not klass.ranges:
        return None
    pieces = [piece for low, high in klass.ranges for piece in _pieces(ord(low), ord(high))]
    if klass.negated:
        late = [char for char in "[-" if char in pieces]
        ordinary = [piece for piece in pieces if piece not in ("]", "[", "-")]
        ordered = (["]"] if "]" in pieces else []) + ordinary + late
        return "[^" + "".join("\\\\" if piece == "\\" else piece for piece in ordered) + "]"
    if len(pieces) == 1 and len(pieces[0]) == 1:
        return ere_literal(pieces[0])
    kept = [piece for piece in pieces if len(piece) > 1 or _ALNUM.fullmatch(piece)]
    spelled = [ere_literal(piece) for piece in pieces if piece not in kept]
    if kept:
        spelled.insert(0, "[" + "".join(kept) + "]")
    return spelled[0] if len(spelled) == 1 else "(" + "|".join(spelled) + ")"


def _pieces(low: int, high: int) -> list[str]:
    """Bracket members for the characters ``low``..``high``: single characters, and ranges
    where both ends are letters of one case, digits, or non-ASCII characters."""
    pieces: list[str] = []
    code = low
    while code <= high:
        if code >= 0x80:
            last = high
        else:
            last = code
            for first_of_kind, last_of_kind in _ASCII_RUNS:
                if first_of_kind <= code <= last_of_kind:
                    last = min(high, last_of_kind)
        if last - code >= 2:
            pieces.append(chr(code) + "-" + chr(last))
        else:
            pieces += [chr(c) for c in range(code, last + 1)]
        code = last + 1
    return pieces
