"""Cut a TOML document down to the key paths a client asked for (the reference's projection).

Observed on the reference (0.171.0) and kept here:

* keys are kept in the document's order, not the order of the requested paths;
* a path that stops at a table keeps the whole table; a longer path through it keeps only
  that branch; a shorter path wins over a longer one with the same prefix;
* a path that meets a non-table value before its end keeps that value whole (so it still
  overrides lower layers: ``a = 5`` selected by ``["a", "b"]`` is ``a = 5``);
* a path whose last key is missing under an existing table keeps that table, empty
  (``[a]`` selected by ``["a", "missing"]`` is ``[a]``);
* a layer left with nothing at all is dropped from the stack.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["Selector"]


class Selector:
    """A tree of requested key paths; a terminal node selects everything below it."""

    __slots__ = ("children", "terminal")

    def __init__(self) -> None:
        self.terminal = False
        self.children: dict[str, Selector] = {}

    @classmethod
    def of(cls, paths: Iterable[Sequence[str]]) -> Selector:
        """The selector for ``paths`` (each non-empty)."""
        root = cls()
        for path in paths:
            root._insert(path)
        return root

    def _insert(self, path: Sequence[str]) -> None:
        node = self
        for segment in path:
            if node.terminal:
                return
            node = node.children.setdefault(segment, Selector())
        node.terminal = True
        node.children.clear()

    def select(self, document: dict[str, Any]) -> dict[str, Any] | None:
        """The selected part of ``document``, or ``None`` when nothing of it is selected."""
        selected = self._value(document)
        if not self.terminal and not selected:
            return None
        return selected  # type: ignore[no-any-return]

    def _value(self, value: Any) -> Any:
        if self.terminal or not isinstance(value, dict):
            return value
        return {
            key: child._value(item)
            for key, item in value.items()
            if (child := self.children.get(key)) is not None
        }
