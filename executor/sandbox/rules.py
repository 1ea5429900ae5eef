"""The host-specific rule set every backend consumes (pure). Backends never see wire JSON.

A ``RuleSet`` maps native absolute paths to an ``Access``; the effective access of any path is
that of the deepest rule at or above it (no rule: denied). Deny globs apply on top. The rule
set also says which enforcement *features* it needs, so the core can refuse a request that no
available backend enforces on this host, before anything runs.
"""

from __future__ import annotations

import enum
import posixpath
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

from executor.sandbox.intent import Access, NetworkMode

__all__ = [
    "Feature",
    "PathKind",
    "PathRule",
    "RuleOrigin",
    "RuleSet",
    "glob_has_magic",
    "glob_to_regex",
    "is_within",
]


class RuleOrigin(enum.StrEnum):
    """Why a rule exists (shown by ``executor profile explain``)."""

    ENTRY = "entry"
    PROTECTED = "protected-name"
    GITDIR = "gitdir"
    DENY_GLOB = "deny-glob"
    EXECUTOR_STATE = "executor-state"


class PathKind(enum.StrEnum):
    """What is at a rule's path on this host (symlinks followed)."""

    DIRECTORY = "directory"
    FILE = "file"
    OTHER = "other"
    MISSING = "missing"


class Feature(enum.StrEnum):
    """What enforcing a rule set needs from a backend."""

    #: some writes are forbidden (every restricted filesystem policy)
    WRITE_RESTRICTION = "write-restriction"
    #: the root is not readable: only listed trees may be read
    READ_RESTRICTION = "read-restriction"
    #: a rule narrower than an ancestor: read-only or deny inside a writable or readable tree
    CARVE_OUT = "carve-out"
    #: a path that does not exist yet must stay uncreatable inside a writable tree
    MISSING_PATH_PROTECTION = "missing-path-protection"
    #: no network at all (except what the command's own Unix socketpairs carry)
    NETWORK_BLOCK = "network-block"


@dataclass(frozen=True, slots=True)
class PathRule:
    """``path`` (and everything below it, unless a deeper rule says otherwise) gets ``access``."""

    path: str
    access: Access
    origin: RuleOrigin = RuleOrigin.ENTRY
    kind: PathKind = PathKind.DIRECTORY


def is_within(path: str, root: str) -> bool:
    """``path`` is ``root`` or lies below it (lexically)."""
    if root == "/":
        return path.startswith("/")
    return path == root or path.startswith(root + "/")


@dataclass(frozen=True, kw_only=True)  # no slots: the derived views below are cached
class RuleSet:
    """Materialized rules for one request on this host."""

    #: False: the filesystem is not restricted at all (only the network part applies).
    filesystem_restricted: bool
    rules: tuple[PathRule, ...] = ()
    #: Absolute glob patterns (git-style) whose matches are denied, whenever they appear.
    deny_globs: tuple[str, ...] = ()
    network: NetworkMode = NetworkMode.ENABLED
    #: The directory relative entries were resolved against.
    policy_cwd: str = "/"
    #: The client asked for Landlock only (no namespaces); honoured or refused, never ignored.
    landlock_only: bool = False
    notes: tuple[str, ...] = field(default=())

    @cached_property
    def _by_path(self) -> dict[str, PathRule]:
        return {rule.path: rule for rule in self.rules}

    def rule_for(self, path: str) -> PathRule | None:
        """The deepest rule at or above ``path``."""
        by_path = self._by_path
        current = posixpath.normpath(path)
        while True:
            rule = by_path.get(current)
            if rule is not None:
                return rule
            if current == "/":
                return None
            current = posixpath.dirname(current)

    def access_of(self, path: str) -> Access:
        """Effective access of ``path`` by the rules alone (deny globs not applied)."""
        if not self.filesystem_restricted:
            return Access.WRITE
        rule = self.rule_for(path)
        return Access.DENY if rule is None else rule.access

    def denied_by_glob(self, path: str) -> bool:
        """Whether ``path`` matches one of the deny globs."""
        return any(matcher.match(path) for matcher in self._glob_matchers)

    @cached_property
    def _glob_matchers(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(glob_to_regex(pattern)) for pattern in self.deny_globs)

    def effective(self, path: str) -> Access:
        """Effective access including deny globs."""
        if self.deny_globs and self.denied_by_glob(path):
            return Access.DENY
        return self.access_of(path)

    def parent_rule(self, rule: PathRule) -> PathRule | None:
        """The nearest rule strictly above ``rule``."""
        if rule.path == "/":
            return None
        return self.rule_for(posixpath.dirname(rule.path))

    def roots(self, access: Access) -> Iterator[PathRule]:
        """Rules granting exactly ``access``, shallowest first."""
        return (rule for rule in self.rules if rule.access is access)

    @cached_property
    def needs(self) -> frozenset[Feature]:
        """Enforcement features these rules need."""
        needed: set[Feature] = set()
        if self.network is NetworkMode.RESTRICTED:
            needed.add(Feature.NETWORK_BLOCK)
        if not self.filesystem_restricted:
            return frozenset(needed)
        needed.add(Feature.WRITE_RESTRICTION)
        if self.access_of("/") is Access.DENY:
            needed.add(Feature.READ_RESTRICTION)
        for rule in self.rules:
            if rule.origin is RuleOrigin.EXECUTOR_STATE:
                continue  # our own hardening, applied where possible: never a reason to refuse
            parent = self.parent_rule(rule)
            parent_access = Access.DENY if parent is None else parent.access
            if _grants(parent_access) > _grants(rule.access):
                needed.add(Feature.CARVE_OUT)
                if rule.kind is PathKind.MISSING and parent_access is Access.WRITE:
                    needed.add(Feature.MISSING_PATH_PROTECTION)
        return frozenset(needed)


def _grants(access: Access) -> int:
    return {Access.DENY: 0, Access.READ: 1, Access.WRITE: 2}[access]


def glob_to_regex(pattern: str) -> str:
    """Translate an absolute git-style glob to an anchored regex.

    ``*`` and ``?`` stay inside one path component, ``**/`` matches zero or more directories,
    a trailing ``/**`` everything below, ``[...]`` classes are kept (``!`` negates). A match
    also covers everything below the matched path (a denied directory hides its contents).
    """
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif char == "*":
            out.append("[^/]*")
            i += 1
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[":
            klass, after = _character_class(pattern, i)
            out.append(klass if klass is not None else re.escape(char))
            i = after
        else:
            out.append(re.escape(char))
            i += 1
    # DOTALL and \Z: names may contain newlines, and a denied match hides what is below it.
    return "(?s)^" + "".join(out) + "(?:/.*)?\\Z"


def _character_class(pattern: str, start: int) -> tuple[str | None, int]:
    """``[...]`` at ``start`` as a regex class and the index after it; None if unclosed."""
    i = start + 1
    if pattern[i : i + 1] in ("!", "^"):
        i += 1
    if pattern[i : i + 1] == "]":
        i += 1  # a leading ] is a member, not the end
    end = pattern.find("]", i)
    if end < 0:
        return None, start + 1
    body = pattern[start + 1 : end]
    negate = body[:1] in ("!", "^")
    members = body[1:] if negate else body
    inner = "".join(c if c == "-" else re.escape(c) for c in members)
    klass = "(?!/)[" + ("^" if negate else "") + inner + "]"
    try:
        re.compile(klass)
    except re.error:
        # An impossible class (e.g. ``[9-0]``): deny more, never less — any one character.
        return "[^/]", end + 1
    return klass, end + 1


def glob_has_magic(pattern: str) -> bool:
    """Whether ``pattern`` contains glob syntax at all."""
    return any(char in pattern for char in "*?[")
