"""``RuleDraft``: the rule set while ``materialize`` builds it, one rule per real path.

Every step of materialization (entries, deny globs, protection, pins, hidden state) adds to
one table and asks it what a path's access is so far; keeping that table and its two rules —
the stronger access wins at one path, the deepest rule wins below it — in one place keeps
the steps from disagreeing. ``finish`` drops the rules that change nothing.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from executor.protocol.intent import Access
from executor.sandbox.hostview import HostView
from executor.sandbox.rules import PathKind, PathRule, RuleOrigin

__all__ = ["RuleDraft"]


class RuleDraft:
    """Rules by real path, deny globs, pins and notes collected so far."""

    def __init__(self, host: HostView) -> None:
        self.host = host
        self.rules: dict[str, PathRule] = {}
        self.deny_globs: list[str] = []
        self.notes: list[str] = []
        self.pinned: set[str] = set()
        #: Writable paths as requested -> as resolved, for those that crossed a symlink.
        self.resolved_writes: dict[str, str] = {}

    def add(
        self,
        path: str,
        access: Access,
        origin: RuleOrigin,
        *,
        skip_if_missing: bool = False,
        resolved: bool = False,
    ) -> None:
        """``resolved``: ``path`` is known to hold no symlink (no resolution needed)."""
        kind = self.host.kind(path)
        if kind is PathKind.MISSING:
            if skip_if_missing:
                return
            if access is not Access.DENY and origin is RuleOrigin.ENTRY:
                self.notes.append(f"{path} does not exist; its {access} entry has nothing to grant")
                return
        elif not resolved:
            real = self.host.realpath(path)
            if real != path and access is Access.WRITE:
                self.resolved_writes[path] = real
            path = real
        existing = self.rules.get(path)
        if existing is not None and existing.access.rank >= access.rank:
            return
        self.rules[path] = PathRule(path, access, origin, kind)

    def effective(self, path: str) -> Access:
        """The access ``path`` has under the rules so far (the deepest rule at or above it)."""
        current = path
        while True:
            rule = self.rules.get(current)
            if rule is not None:
                return rule.access
            if current == "/":
                return Access.DENY
            current = posixpath.dirname(current)

    def full_disk_write(self) -> bool:
        """Whether the rules grant write everywhere and deny nothing (no confinement left)."""
        root = self.rules.get("/")
        return (
            root is not None
            and root.access is Access.WRITE
            and not self.deny_globs
            and all(rule.access is Access.WRITE for rule in self.rules.values())
        )

    def finish(self) -> tuple[PathRule, ...]:
        """Sorted rules, without those that change nothing (same access as their parent)."""
        ordered = sorted(self.rules.values(), key=lambda rule: (rule.path.count("/"), rule.path))
        kept: dict[str, PathRule] = {}
        for rule in ordered:
            parent = _nearest(kept, rule.path)
            parent_access = Access.DENY if parent is None else parent.access
            if rule.path != "/" and parent_access is rule.access:
                continue
            kept[rule.path] = rule
        return tuple(
            sorted(
                kept.values(),
                key=lambda rule: (rule.path.count("/") if rule.path != "/" else 0, rule.path),
            )
        )


def _nearest(rules: Mapping[str, PathRule], path: str) -> PathRule | None:
    if path == "/":
        return None
    current = posixpath.dirname(path)
    while True:
        rule = rules.get(current)
        if rule is not None:
            return rule
        if current == "/":
            return None
        current = posixpath.dirname(current)
