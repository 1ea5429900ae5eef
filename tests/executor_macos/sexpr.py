"""A small SBPL reader for the tests: tokens, balanced lists, string literals, parameters.

It reads the subset of SBPL the renderer and its resource files use: lists, symbols, numbers,
``"..."`` strings (with ``\\"`` and ``\\\\`` escapes) and ``;`` comments. Anything else (an
unterminated string, a stray ``)``, a ``#"...`` literal) is an error, so a profile that parses
here is well formed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "SbplSyntaxError",
    "Str",
    "Sym",
    "Tree",
    "literals",
    "params_used",
    "parse",
    "split_define",
]


class SbplSyntaxError(ValueError):
    """The text is not a well-formed SBPL expression list."""


@dataclass(frozen=True, slots=True)
class Str:
    """A string literal (value after escapes)."""

    value: str


@dataclass(frozen=True, slots=True)
class Sym:
    """A symbol or number."""

    name: str


Tree = Str | Sym | list["Tree"]

_ATOM = re.compile(r'[^\s()";]+')


def _tokens(text: str) -> Iterator[str | Str]:
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char.isspace():
            i += 1
        elif char == ";":
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif char in "()":
            yield char
            i += 1
        elif char == '"':
            value, i = _string(text, i + 1)
            yield Str(value)
        else:
            match = _ATOM.match(text, i)
            if match is None or match.group().startswith("#"):
                raise SbplSyntaxError(f"unexpected {text[i : i + 10]!r} at {i}")
            yield match.group()
            i = match.end()


def _string(text: str, i: int) -> tuple[str, int]:
    out: list[str] = []
    while i < len(text):
        char = text[i]
        if char == '"':
            return "".join(out), i + 1
        if char == "\\":
            if i + 1 >= len(text) or text[i + 1] not in '"\\':
                raise SbplSyntaxError(f"unsupported escape at {i}")
            out.append(text[i + 1])
            i += 2
            continue
        out.append(char)
        i += 1
    raise SbplSyntaxError("unterminated string")


def parse(text: str) -> list[Tree]:
    """The top-level expressions of ``text``; raises ``SbplSyntaxError`` if unbalanced."""
    stack: list[list[Tree]] = [[]]
    for token in _tokens(text):
        if token == "(":
            stack.append([])
        elif token == ")":
            if len(stack) == 1:
                raise SbplSyntaxError("unbalanced ')'")
            done = stack.pop()
            stack[-1].append(done)
        elif isinstance(token, Str):
            stack[-1].append(token)
        else:
            stack[-1].append(Sym(token))
    if len(stack) != 1:
        raise SbplSyntaxError("unbalanced '('")
    return stack[0]


def _walk(tree: Tree | list[Tree]) -> Iterator[Tree]:
    yield tree
    if isinstance(tree, list):
        for item in tree:
            yield from _walk(item)


def literals(forms: list[Tree]) -> set[str]:
    """Every string literal in ``forms``."""
    return {node.value for node in _walk(forms) if isinstance(node, Str)}


def params_used(forms: list[Tree]) -> list[str]:
    """The names of every ``(param "NAME")``, in order."""
    return [
        node[1].value
        for node in _walk(forms)
        if isinstance(node, list)
        and len(node) == 2
        and node[0] == Sym("param")
        and isinstance(node[1], Str)
    ]


def split_define(argument: str) -> tuple[str, str]:
    """``-DNAME=VALUE`` -> (NAME, VALUE), as sandbox-exec splits it (at the first ``=``)."""
    if not argument.startswith("-D"):
        raise ValueError(argument)
    name, sep, value = argument[2:].partition("=")
    if not sep:
        raise ValueError(argument)
    return name, value
