"""``fs/watchMissing`` params and result, and the ``fs/missingChanged`` notification.

Paths stay ``file:`` URI strings here; the handler parses them (``executor.protocol.paths``)
because a URI naming another host is not an error for this method but ``watching: false``
(docs/watch-missing.md records the reference's rules).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from executor.protocol.decode import U64

__all__ = ["FsWatchMissingParams", "MissingChanged", "WatchMissingResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FsWatchMissingParams:
    """``fs/watchMissing`` params (the class name is the reference's, as serde errors show it)."""

    watch_id: U64
    #: Paths expected not to exist; the watch fires when one of them, or an ancestor, changes.
    missing: tuple[str, ...]
    #: A path expected to exist; the watch also fires when it (or an ancestor) changes.
    present: str | None = None


@dataclass(frozen=True, slots=True)
class WatchMissingResult:
    """``{"watching": bool}``: whether a notification may follow."""

    watching: bool

    def to_wire(self) -> dict[str, Any]:
        """The wire result."""
        return {"watching": self.watching}


@dataclass(frozen=True, slots=True)
class MissingChanged:
    """``fs/missingChanged``: the watch ``watch_id`` saw a change and is over."""

    watch_id: int

    def to_wire(self) -> dict[str, Any]:
        """The notification's params."""
        return {"watchId": self.watch_id}
