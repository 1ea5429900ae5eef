"""The bounds of deny-glob scanning, and what a scan reports back (pure data).

A deny glob's existing matches become deny rules at launch. Scanning for them is bounded —
in matches, in entries examined, in time and in depth — and a scan that hits a bound says
so (``GlobScan.truncated``), so that materialization refuses the launch instead of
enforcing fewer denials than the profile asked for.
"""

from __future__ import annotations

import enum
import math
import os
import time
from dataclasses import dataclass
from typing import Final

__all__ = [
    "GLOB_SCAN_ENTRIES_ENV",
    "GLOB_SCAN_MATCHES_ENV",
    "GLOB_SCAN_SECONDS_ENV",
    "MAX_GLOB_MATCHES",
    "MAX_SCAN_DEPTH",
    "GlobBounds",
    "GlobScan",
    "ScanLimits",
    "Truncation",
]

#: Most directory levels scanned below a glob's starting directory.
MAX_SCAN_DEPTH: Final = 32
#: Most matches of one glob (each becomes a deny rule the backend must mask).
MAX_GLOB_MATCHES: Final = 10_000
#: Most directory entries examined for all deny globs of one launch (~1 s on a warm cache).
MAX_GLOB_SCAN_ENTRIES: Final = 250_000
#: Longest time spent scanning for all deny globs of one launch (cold caches, slow mounts).
GLOB_SCAN_SECONDS: Final = 2.0

GLOB_SCAN_MATCHES_ENV: Final = "EXECUTOR_GLOB_MAX_MATCHES"
GLOB_SCAN_ENTRIES_ENV: Final = "EXECUTOR_GLOB_SCAN_ENTRIES"
GLOB_SCAN_SECONDS_ENV: Final = "EXECUTOR_GLOB_SCAN_SECONDS"


class Truncation(enum.Enum):
    """Which bound stopped a scan before it covered everything it was asked to."""

    MATCHES = "matches"
    ENTRIES = "entries"
    TIME = "time"
    #: Directories were left unscanned at the deepest level asked for.
    DEPTH = "depth"


@dataclass(frozen=True, slots=True)
class ScanLimits:
    """What one ``HostView.glob_matches`` call may spend."""

    max_depth: int
    #: More matches than this stops the scan (``Truncation.MATCHES``).
    max_matches: int = MAX_GLOB_MATCHES
    #: Examining more entries than this stops the scan (``Truncation.ENTRIES``).
    max_entries: int = MAX_GLOB_SCAN_ENTRIES
    #: ``time.monotonic()`` after which the scan stops (``Truncation.TIME``); None: no limit.
    deadline: float | None = None


@dataclass(frozen=True, slots=True)
class GlobScan:
    """The matches a scan found, how many entries it examined, and why it stopped early."""

    matches: tuple[str, ...]
    entries: int = 0
    #: None when the scan covered every directory within its depth.
    truncated: Truncation | None = None


@dataclass(frozen=True, slots=True)
class GlobBounds:
    """The bounds for one launch (or one filesystem request): all its deny globs share the
    entries and the time; each glob has its own match cap."""

    max_matches: int = MAX_GLOB_MATCHES
    max_entries: int = MAX_GLOB_SCAN_ENTRIES
    seconds: float = GLOB_SCAN_SECONDS

    @classmethod
    def from_env(cls) -> GlobBounds:
        """The defaults, with ``EXECUTOR_GLOB_MAX_MATCHES``, ``EXECUTOR_GLOB_SCAN_ENTRIES``
        and ``EXECUTOR_GLOB_SCAN_SECONDS`` applied where set to a positive number."""
        return cls(
            max_matches=int(_positive(GLOB_SCAN_MATCHES_ENV, MAX_GLOB_MATCHES)),
            max_entries=int(_positive(GLOB_SCAN_ENTRIES_ENV, MAX_GLOB_SCAN_ENTRIES)),
            seconds=_positive(GLOB_SCAN_SECONDS_ENV, GLOB_SCAN_SECONDS),
        )

    def deadline(self) -> float:
        """The ``time.monotonic()`` deadline of a scan that starts now."""
        return time.monotonic() + self.seconds


def _positive(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw)
    except ValueError:
        return default
    return value if math.isfinite(value) and value > 0 else default
