"""Which inodes a sandbox denies under any name: deny rules name paths, files have many.

A hard link gives a file another name, so a file denied by a rule (or lying inside a denied
directory, or matching a deny glob) could be read under a name the rules allow. Content is
therefore checked by identity (``st_dev``, ``st_ino``) as well as by path:

* files that deny rules name directly (glob matches found when the sandbox was built
  included) are known by inode up front — one ``lstat`` per such rule, once per request;
* a file with a single link has no other name, so that is all it costs;
* a file with more links may have a name in a denied tree. The denied trees on the file's
  device — denied directories and the directories deny globs start from — are walked once
  per request, collecting the inodes of multiply-linked files found at denied paths. The
  walk is bounded (entries and time); a check it could not settle is refused, never
  guessed (``Unsettled``).

Hard links into a denied area cannot be made from inside a sandbox (the area is masked
there), but they can exist already (package stores, backups, the user's own links).
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Final

from executor.protocol.intent import Access
from executor.sandbox.rules import RuleSet, glob_has_magic, is_within

__all__ = ["SCAN_ENTRIES_ENV", "DeniedInodes", "ScanBudget", "Unsettled"]

#: Overrides ``ScanBudget.max_entries`` (tests use a small one to reach the bound).
SCAN_ENTRIES_ENV: Final = "EXECUTOR_FS_INODE_SCAN_ENTRIES"
_DEFAULT_MAX_ENTRIES: Final = 200_000
_DEFAULT_SECONDS: Final = 3.0
_GLOB_CHARS: Final = "*?["

Identity = tuple[int, int]


class Unsettled(Exception):
    """The denied trees could not be searched within the bound: whether a file is denied
    under another name is unknown (the caller refuses the read)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ScanBudget:
    """How much one request may spend walking denied trees."""

    max_entries: int = _DEFAULT_MAX_ENTRIES
    seconds: float = _DEFAULT_SECONDS

    @classmethod
    def from_env(cls) -> ScanBudget:
        """The default budget, with ``EXECUTOR_FS_INODE_SCAN_ENTRIES`` applied if set."""
        raw = os.environ.get(SCAN_ENTRIES_ENV, "")
        return cls(max_entries=int(raw)) if raw.isdigit() and int(raw) > 0 else cls()


@dataclass(slots=True)
class _DeviceScan:
    """What the walk of one device's denied trees found."""

    found: set[Identity] = field(default_factory=set)
    #: Why the walk stopped early; None when it covered every denied tree.
    incomplete: str | None = None


class DeniedInodes:
    """The denied-by-identity answer for one request's rule set.

    ``is_denied`` says whether a real path is denied by the rules or a deny glob (the view's
    classification); it decides which multiply-linked files a glob-base walk collects.
    """

    def __init__(
        self,
        rules: RuleSet,
        is_denied: Callable[[str], bool],
        budget: ScanBudget | None = None,
    ) -> None:
        self.rules = rules
        self._is_denied = is_denied
        self._budget = budget or ScanBudget.from_env()
        self._scans: dict[int, _DeviceScan] = {}

    @cached_property
    def _deny_paths(self) -> tuple[tuple[str, os.stat_result], ...]:
        """Every existing path a deny rule names, with its ``lstat``."""
        found = []
        for rule in self.rules.rules:
            if rule.access is not Access.DENY:
                continue
            try:
                found.append((rule.path, os.lstat(rule.path)))
            except OSError:
                continue
        return tuple(found)

    @cached_property
    def files(self) -> frozenset[Identity]:
        """Identities of the regular files deny rules name (any link count)."""
        return frozenset(
            (st.st_dev, st.st_ino) for _path, st in self._deny_paths if stat.S_ISREG(st.st_mode)
        )

    @cached_property
    def _roots(self) -> tuple[tuple[str, int, bool], ...]:
        """Trees to walk: (path, device, everything-below-is-denied), none inside another."""
        roots: list[tuple[str, int, bool]] = [
            (path, st.st_dev, True) for path, st in self._deny_paths if stat.S_ISDIR(st.st_mode)
        ]
        for base in _glob_bases(self.rules.deny_globs):
            try:
                st = os.lstat(base)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                roots.append((base, st.st_dev, False))
        # Shallowest first; a tree inside one already listed is walked as part of it.
        roots.sort(key=lambda root: (root[0].count("/"), not root[2]))
        kept: list[tuple[str, int, bool]] = []
        for root in roots:
            if not any(is_within(root[0], outer[0]) for outer in kept):
                kept.append(root)
        return tuple(kept)

    def is_denied(self, st: os.stat_result) -> bool:
        """Whether the regular file ``st`` is denied under some other name.

        Raises ``Unsettled`` when the file might be and the bounded walk could not tell.
        """
        identity = (st.st_dev, st.st_ino)
        if identity in self.files:
            return True
        if st.st_nlink <= 1:
            return False  # no other name: its own path was already checked
        if not any(device == st.st_dev for _path, device, _denied in self._roots):
            return False
        scan = self._scan(st.st_dev)
        if identity in scan.found:
            return True
        if scan.incomplete is not None:
            raise Unsettled(scan.incomplete)
        return False

    def _scan(self, device: int) -> _DeviceScan:
        scan = self._scans.get(device)
        if scan is None:
            roots = [(path, denied) for path, dev, denied in self._roots if dev == device]
            scan = self._scans[device] = _walk(roots, device, self._is_denied, self._budget)
        return scan


def _glob_bases(globs: Iterable[str]) -> list[str]:
    """The directory each glob pattern starts matching from (its part before any magic)."""
    bases = []
    for pattern in globs:
        if not glob_has_magic(pattern):
            continue  # a literal: materialization made it a deny rule
        cut = min(pattern.find(char) for char in _GLOB_CHARS if char in pattern)
        bases.append(posixpath.normpath(pattern[: pattern.rfind("/", 0, cut) + 1] or "/"))
    return bases


def _walk(
    roots: list[tuple[str, bool]],
    device: int,
    is_denied: Callable[[str], bool],
    budget: ScanBudget,
) -> _DeviceScan:
    """Collect the multiply-linked regular files at denied paths below ``roots``.

    Symlinks are not followed and other devices are not entered (no inode of ``device`` is
    there). An unreadable directory makes the result incomplete: it may hold a link.
    """
    scan = _DeviceScan()
    deadline = time.monotonic() + budget.seconds
    entries = 0
    stack = list(roots)
    while stack:
        directory, denied = stack.pop()
        try:
            with os.scandir(directory) as listing:
                children = list(listing)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                continue  # gone since it was listed: nothing left to link to
            scan.incomplete = f"{directory} could not be read ({os.strerror(exc.errno or 0)})"
            return scan
        entries += len(children)
        if entries > budget.max_entries:
            scan.incomplete = f"more than {budget.max_entries} entries"
            return scan
        if time.monotonic() > deadline:
            scan.incomplete = f"more than {budget.seconds:g} s"
            return scan
        for child in children:
            try:
                if child.is_dir(follow_symlinks=False):
                    if child.stat(follow_symlinks=False).st_dev == device:
                        stack.append((child.path, denied))
                elif child.is_file(follow_symlinks=False):
                    st = child.stat(follow_symlinks=False)
                    if st.st_nlink > 1 and (denied or is_denied(child.path)):
                        scan.found.add((st.st_dev, st.st_ino))
            except FileNotFoundError:
                continue
    return scan
