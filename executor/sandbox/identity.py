"""What a pure function gave for this very object: a small cache keyed by identity.

The daemon hands a backend the same ``RuleSet`` object launch after launch while its memo
holds (``memo.py``); work that depends only on that object (and on a few hashable inputs) can
be found again by the object's identity instead of hashing every rule.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["ByIdentity"]

S = TypeVar("S")
V = TypeVar("V")


class ByIdentity(Generic[S, V]):
    """``make()``'s result for ``source`` and equal ``inputs``, for the ``size`` most recent.

    Keyed on ``id(source)``: each entry holds its source, so no other object can take that id
    while the entry is kept. Only for pure functions of ``source`` and ``inputs``.
    """

    def __init__(self, size: int = 32) -> None:
        self._size = size
        self._entries: OrderedDict[tuple[int, Hashable], tuple[S, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, source: S, inputs: Hashable, make: Callable[[], V]) -> V:
        key = (id(source), inputs)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] is source:
                self._entries.move_to_end(key)
                return entry[1]
        made = make()
        with self._lock:
            self._entries[key] = (source, made)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return made
