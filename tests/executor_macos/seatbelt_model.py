"""A model of how Seatbelt decides a file operation, to check rendered profiles on Linux.

The model follows SBPL's documented reading: rules are ``(allow|deny OPERATION... FILTER...)``;
a rule applies when one of its operations covers the operation (``file-write*`` covers
``file-write-data``) and any of its filters matches (no filter: always); among the rules that
apply, the last one in the profile decides; ``(deny default)`` decides when none applies.
Filters: ``literal``, ``subpath``, ``regex`` (POSIX ERE; the renderer only emits the subset
Python's ``re`` reads the same way), ``require-all``/``require-any``/``require-not``, and
``(param "NAME")`` for values. Filters about anything but the path (``vnode-type``,
``extension``, ...) never match here: the model asks about plain files and directories.

It is a model: it shows that the profile says what the rule set says, if Seatbelt reads SBPL
this way. With ``deny_wins`` it reads the other conceivable way (any matching deny beats every
allow); the renderer's profiles are meant to mean the same under both. Whether Seatbelt reads
them so is what the macOS-only tests check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from executor.sandbox.rules import is_within
from tests.executor_macos.sexpr import Str, Sym, Tree, parse

__all__ = ["Model"]


class Model:
    """A parsed profile with its parameters, answering ``allows(operation, path)``."""

    def __init__(self, text: str, params: Mapping[str, str], *, deny_wins: bool = False) -> None:
        self.forms = parse(text)
        #: The other conceivable reading of SBPL: any matching deny beats every allow.
        self.deny_wins = deny_wins
        self.params = dict(params)
        self.default = "deny"
        self.rules: list[tuple[str, list[str], list[Tree]]] = []
        for form in self.forms:
            self._add(form)

    def _add(self, form: Tree) -> None:
        if not isinstance(form, list) or not form or not isinstance(form[0], Sym):
            raise ValueError(f"not a rule: {form!r}")
        head = form[0].name
        if head == "version":
            return
        if head not in ("allow", "deny"):
            raise ValueError(f"unknown form {head}")
        operations = [item.name for item in form[1:] if isinstance(item, Sym)]
        filters: list[Tree] = [item for item in form[1:] if isinstance(item, list)]
        if operations == ["default"]:
            self.default = head
            return
        self.rules.append((head, operations, filters))

    def allows(self, operation: str, path: str) -> bool:
        """Whether ``operation`` on ``path`` is allowed."""
        decisions = [
            action
            for action, operations, filters in self.rules
            if _covers(operations, operation)
            and (not filters or any(self._match(f, path) for f in filters))
        ]
        if not decisions:
            return self.default == "allow"
        if self.deny_wins:
            return "deny" not in decisions
        return decisions[-1] == "allow"

    def _value(self, node: Tree) -> str:
        if isinstance(node, Str):
            return node.value
        if isinstance(node, list) and node[:1] == [Sym("param")] and isinstance(node[1], Str):
            return self.params[node[1].value]
        raise ValueError(f"not a value: {node!r}")

    def _match(self, node: Tree, path: str) -> bool:
        if not isinstance(node, list) or not isinstance(node[0], Sym):
            raise ValueError(f"not a filter: {node!r}")
        head, args = node[0].name, node[1:]
        if head == "literal":
            return path == self._value(args[0])
        if head == "subpath":
            return is_within(path, self._value(args[0]))
        if head == "regex":
            return ere_search(self._value(args[0]), path)
        if head == "require-all":
            return all(self._match(arg, path) for arg in args)
        if head == "require-any":
            return any(self._match(arg, path) for arg in args)
        if head == "require-not":
            return not self._match(args[0], path)
        return False


def _covers(operations: list[str], operation: str) -> bool:
    return any(
        name == operation or (name.endswith("*") and operation.startswith(name[:-1]))
        for name in operations
    )


def ere_search(regex: str, path: str) -> bool:
    """POSIX ``regexec`` of the renderer's ERE subset, with Python's ``re``.

    A final ``$`` means the very end of the string (Python's ``$`` would also match before a
    trailing newline).
    """
    body = regex[:-1]
    if regex.endswith("$") and (len(body) - len(body.rstrip("\\"))) % 2 == 0:
        regex = body + r"\Z"
    return re.search(regex, path, re.DOTALL) is not None
