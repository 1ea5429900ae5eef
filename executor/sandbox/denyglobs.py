"""Deny globs become deny rules: scan for each glob's existing matches, within bounds.

A backend that cannot check a glob at access time still masks every match that exists at
launch; a scan cut short by one of its bounds (``globscan``) would leave some readable, so
it refuses the launch instead, saying which bound was hit and what the operator can change.
"""

from __future__ import annotations

import posixpath
import re

from executor.errors import SandboxUnavailable
from executor.protocol.intent import Access
from executor.sandbox.draft import RuleDraft
from executor.sandbox.globscan import (
    GLOB_SCAN_ENTRIES_ENV,
    GLOB_SCAN_MATCHES_ENV,
    GLOB_SCAN_SECONDS_ENV,
    MAX_SCAN_DEPTH,
    GlobBounds,
    GlobScan,
    ScanLimits,
    Truncation,
)
from executor.sandbox.rules import RuleOrigin, glob_has_magic, glob_to_regex

__all__ = ["expand_deny_globs", "static_prefix"]


def expand_deny_globs(draft: RuleDraft, max_depth: int | None, bounds: GlobBounds) -> None:
    """Deny each glob's existing matches; refuse when a scan could not cover them all."""
    deadline = bounds.deadline()
    entries_left = bounds.max_entries
    for pattern in draft.deny_globs:
        if not glob_has_magic(pattern):
            draft.add(posixpath.normpath(pattern), Access.DENY, RuleOrigin.DENY_GLOB)
            continue
        base = static_prefix(pattern)
        # The depth the pattern itself reaches (None: any, it has `**`), then the
        # profile's; only a depth cut short by MAX_SCAN_DEPTH is a bound that was hit.
        wanted = _min_depth(_pattern_depth(pattern, base), max_depth)
        depth = MAX_SCAN_DEPTH if wanted is None else min(wanted, MAX_SCAN_DEPTH)
        limits = ScanLimits(depth, bounds.max_matches, entries_left, deadline)
        scan = draft.host.glob_matches(base, glob_to_regex(pattern), limits)
        entries_left -= scan.entries
        if scan.truncated is Truncation.DEPTH and depth == wanted:
            scan = GlobScan(scan.matches, scan.entries)  # as deep as the profile asked
        if scan.truncated is not None:
            raise SandboxUnavailable(_truncation_reason(pattern, base, scan, limits, bounds))
        for match in scan.matches:
            draft.add(match, Access.DENY, RuleOrigin.DENY_GLOB)


def _pattern_depth(pattern: str, base: str) -> int | None:
    """How many levels below ``base`` the pattern can match (None: any, with ``**``)."""
    if "**" in pattern:
        return None
    rest = pattern[len(base) :] if pattern.startswith(base) else pattern
    return max(1, len([part for part in rest.split("/") if part]))


def _min_depth(first: int | None, second: int | None) -> int | None:
    known = [depth for depth in (first, second) if depth is not None]
    return min(known) if known else None


def _truncation_reason(
    pattern: str, base: str, scan: GlobScan, limits: ScanLimits, bounds: GlobBounds
) -> str:
    """Why the launch is refused, which bound was hit, and what the operator can do."""
    refusing = "refusing rather than leave matches it did not find readable"
    narrow = "start the glob in a narrower directory or deny a directory that holds the matches"
    if scan.truncated is Truncation.MATCHES:
        return (
            f"deny glob {pattern} matches more than {limits.max_matches} paths (the cap on "
            f"matches, each a deny rule); {refusing}: {narrow}, or raise "
            f"{GLOB_SCAN_MATCHES_ENV}"
        )
    if scan.truncated is Truncation.ENTRIES:
        return (
            f"the scan of {base} for deny glob {pattern} reached the cap of "
            f"{bounds.max_entries} directory entries for one launch; {refusing}: {narrow}, "
            f"set glob_scan_max_depth in the profile, or raise {GLOB_SCAN_ENTRIES_ENV}"
        )
    if scan.truncated is Truncation.TIME:
        return (
            f"the scan of {base} for deny glob {pattern} did not finish within "
            f"{bounds.seconds:g} s (the time cap for one launch); {refusing}: {narrow}, "
            f"set glob_scan_max_depth in the profile, or raise {GLOB_SCAN_SECONDS_ENV}"
        )
    return (
        f"{base} has directories deeper than {MAX_SCAN_DEPTH} levels, the most that is "
        f"scanned for deny glob {pattern}; {refusing}: set glob_scan_max_depth (at most "
        f"{MAX_SCAN_DEPTH}) in the profile to accept that deeper matches are not masked "
        "(docs/sandbox.md), or deny the deep directory"
    )


_MAGIC = re.compile(r"[*?\[]")


def static_prefix(pattern: str) -> str:
    """The directory part of ``pattern`` before its first glob character."""
    match = _MAGIC.search(pattern)
    head = pattern if match is None else pattern[: match.start()]
    return posixpath.dirname(head) if not head.endswith("/") else head.rstrip("/") or "/"
