"""What one sandbox lets a filesystem call see of a path, decided from its ``RuleSet``.

The reference runs sandboxed filesystem calls inside bubblewrap, so a call sees the mount
tree the rules build. We decide the same questions by path, at access time, on the *real*
path of every object a call reaches (the resolver never trusts a path with symlinks in it):

* ``WRITABLE`` / ``READABLE`` — the deepest rule at or above the path grants write / read,
  and no deny glob matches it;
* ``DENIED`` — a deny rule or deny glob covers it: it exists but can be neither read nor
  written (and a denied directory cannot be traversed);
* ``SKELETON`` — no rule covers it, but it leads to a rule (an ancestor of a rule path, or
  ``/``): a directory that can be traversed and listed, showing only what leads on;
* ``INVISIBLE`` — none of the above: it does not exist in the sandbox.

Classification is pure string work; only ``inodes`` (files denied by identity) looks at
the host.
"""

from __future__ import annotations

import enum
import errno
import os
import posixpath
from functools import cached_property
from typing import Final

from executor.fs import failures
from executor.fs.inodes import DeniedInodes, Unsettled
from executor.protocol.intent import Access
from executor.sandbox.rules import RuleSet

__all__ = ["SandboxView", "Visibility", "denial"]

#: Classifications one view remembers (a walk touches at most tens of thousands of paths).
_MAX_REMEMBERED: Final = 100_000


class Visibility(enum.Enum):
    """How a path appears inside a sandbox."""

    WRITABLE = "writable"
    READABLE = "readable"
    DENIED = "denied"
    SKELETON = "skeleton"
    INVISIBLE = "invisible"

    @property
    def traversable(self) -> bool:
        """A directory here may be walked through."""
        return self in (Visibility.WRITABLE, Visibility.READABLE, Visibility.SKELETON)

    @property
    def exists(self) -> bool:
        """An object here is part of the sandbox view at all."""
        return self is not Visibility.INVISIBLE


def denial(code: int) -> OSError:
    """The ``OSError`` a denied operation reports (the reference's sandbox gives these)."""
    return OSError(code, os.strerror(code))


class SandboxView:
    """The sandbox view of one materialized, filesystem-restricted rule set."""

    def __init__(self, rules: RuleSet, aliases: frozenset[str] = frozenset()) -> None:
        self.rules = rules
        #: Requested rule paths that name their real path through a symlink (``aliases.py``).
        self.aliases = aliases
        # Paths already classified: resolution asks about every prefix of every path it opens,
        # and the rules never change during a request. Bounded; past the bound, no caching.
        self._seen: dict[str, Visibility] = {}

    @cached_property
    def _skeleton(self) -> frozenset[str]:
        skeleton = {"/", *self.aliases}
        for path in (*(rule.path for rule in self.rules.rules), *self.aliases):
            current = path
            while current != "/":
                current = posixpath.dirname(current)
                skeleton.add(current)
        return frozenset(skeleton)

    def visibility(self, path: str) -> Visibility:
        """How the real, normalized absolute ``path`` appears in the sandbox."""
        seen = self._seen.get(path)
        if seen is None:
            seen = self._classify(path)
            if len(self._seen) < _MAX_REMEMBERED:
                self._seen[path] = seen
        return seen

    def _classify(self, path: str) -> Visibility:
        rule = self.rules.rule_for(path)
        if rule is None:
            return Visibility.SKELETON if path in self._skeleton else Visibility.INVISIBLE
        if rule.access is Access.DENY or self.rules.denied_by_glob(path):
            return Visibility.DENIED
        return Visibility.WRITABLE if rule.access is Access.WRITE else Visibility.READABLE

    def require_readable(self, path: str) -> None:
        """Reading content: denied paths give ``EACCES``, invisible ones ``ENOENT``."""
        seen = self.visibility(path)
        if seen is Visibility.INVISIBLE:
            raise denial(errno.ENOENT)
        if seen is Visibility.DENIED:
            raise denial(errno.EACCES)

    def require_visible(self, path: str) -> None:
        """Asking about an object (metadata, canonical path): it must be in the view."""
        if self.visibility(path) is Visibility.INVISIBLE:
            raise denial(errno.ENOENT)

    def require_writable(self, path: str) -> None:
        """Changing an object's content: anything but a writable path is read-only."""
        if self.visibility(path) is not Visibility.WRITABLE:
            raise denial(errno.EROFS)

    def require_entry_change(self, path: str) -> None:
        """Creating or removing the entry ``path``: it and its directory must be writable,
        and it must not be (or hold) a pinned path — what a sandboxed process meets as a
        mount point, ``EBUSY``."""
        self.require_writable(path)
        if path != "/":
            self.require_writable(posixpath.dirname(path))
        if self.rules.pins_below(path):
            raise denial(errno.EBUSY)

    def denied(self, path: str) -> bool:
        """Whether the real ``path`` is denied by a rule or matches a deny glob (even where
        no rule makes it visible): what a hard link elsewhere must not expose."""
        return self.visibility(path) is Visibility.DENIED or self.rules.denied_by_glob(path)

    @cached_property
    def inodes(self) -> DeniedInodes:
        """The files denied by identity, for content reached under another name."""
        return DeniedInodes(self.rules, self.denied)

    def require_readable_file(self, path: str, st: os.stat_result) -> None:
        """Reading a file's content: only under a read or write rule, and never the inode of
        a denied file reached under another name (a hard link, see ``inodes.py``)."""
        seen = self.visibility(path)
        if seen is Visibility.DENIED:
            raise denial(errno.EACCES)
        if seen not in (Visibility.READABLE, Visibility.WRITABLE):
            raise denial(errno.ENOENT)  # the skeleton holds directories only
        try:
            denied = self.inodes.is_denied(st)
        except Unsettled as exc:
            raise failures.unsettled_hard_link(path, st.st_nlink, exc.reason) from None
        if denied:
            raise denial(errno.EACCES)
