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

from executor.protocol.intent import Access, NetworkMode
from executor.sandbox.limits import ResourceLimits, default_limits
from executor.sandbox.network import NetworkRoute

__all__ = [
    "Feature",
    "GlobClass",
    "PathKind",
    "PathRule",
    "RuleOrigin",
    "RuleSet",
    "glob_class",
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
    #: network only through the executor's proxy and relays (``RuleSet.route``)
    NETWORK_PROXY = "network-proxy"
    #: network on, but the host's loopback services unreachable but ``local_ports``
    LOOPBACK_ISOLATION = "loopback-isolation"


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
    #: Proxy mode: the command's only way out (``network`` is then ``ENABLED``).
    route: NetworkRoute | None = None
    #: Full network, but host loopback services reachable only at ``local_ports`` (and the
    #: listeners of commands in the same ``network_scope``).
    isolate_loopback: bool = False
    local_ports: tuple[int, ...] = ()
    #: Commands with the same scope (a session) share listeners; None: no sharing.
    network_scope: str | None = None
    #: The directory relative entries were resolved against.
    policy_cwd: str = "/"
    #: The client asked for Landlock only (no namespaces); honoured or refused, never ignored.
    landlock_only: bool = False
    #: Paths that must not be moved, removed or replaced while the command runs: the
    #: workspace roots and every directory between them and a writable parent, and protected
    #: names that are symlinks. The rules were derived from what these paths are now; a
    #: command that could rename one could swap the ground under the next command's rules.
    pinned: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())
    #: Caps on the command's resources (every sandboxed command gets them): the daemon's
    #: defaults unless its caller sets others (``serve --limit``, a profile's ``[limits]``).
    limits: ResourceLimits = field(default_factory=default_limits)

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

    def pins_below(self, path: str) -> bool:
        """Whether ``path`` is pinned or holds a pinned path (moving it would move a pin)."""
        return any(is_within(pin, path) for pin in self.pinned)

    def roots(self, access: Access) -> Iterator[PathRule]:
        """Rules granting exactly ``access``, shallowest first."""
        return (rule for rule in self.rules if rule.access is access)

    @cached_property
    def needs(self) -> frozenset[Feature]:
        """Enforcement features these rules need."""
        needed: set[Feature] = set()
        if self.network is NetworkMode.RESTRICTED:
            needed.add(Feature.NETWORK_BLOCK)
        elif self.route is not None:
            needed.add(Feature.NETWORK_PROXY)
        elif self.isolate_loopback:
            needed.add(Feature.LOOPBACK_ISOLATION)
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
    a trailing ``/**`` everything below, ``[...]`` classes match one character of a component
    (see ``glob_class``). A match also covers everything below the matched path (a denied
    directory hides its contents). A trailing ``/`` (git: directories only) is dropped: the
    path is denied whatever it is, which denies more, never less.
    """
    if len(pattern) > 1:
        pattern = pattern.rstrip("/") or "/"
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
        elif char == "[" and (parsed := glob_class(pattern, i)) is not None:
            klass, i = parsed
            out.append(_class_regex(klass))
        else:
            out.append(re.escape(char))
            i += 1
    # DOTALL and \Z: names may contain newlines, and a denied match hides what is below it
    # (the root, the one pattern still ending in "/", hides everything).
    below = ".*" if pattern == "/" else "(?:/.*)?"
    return "(?s)^" + "".join(out) + below + "\\Z"


@dataclass(frozen=True, slots=True)
class GlobClass:
    """What a glob's bracket class matches: one character of a path component.

    ``ranges`` are sorted, disjoint and non-adjacent inclusive ``(low, high)`` character
    ranges. A plain class matches a character inside them, a ``negated`` one a character
    outside them. ``/`` is never matched: it is outside the ranges of a plain class and inside
    those of a negated one. A plain class without ranges matches nothing (``[/]``).
    """

    negated: bool
    ranges: tuple[tuple[str, str], ...]

    def matches(self, char: str) -> bool:
        """Whether the class matches the single character ``char``."""
        return any(low <= char <= high for low, high in self.ranges) is not self.negated


#: A class whose range is impossible (``[9-0]``): any one character of a component.
_ANY_ONE = GlobClass(negated=True, ranges=(("/", "/"),))


def glob_class(pattern: str, start: int) -> tuple[GlobClass, int] | None:
    """The class whose ``[`` is at ``start`` and the index after its ``]``; None if unclosed
    (the ``[`` is then an ordinary character).

    ``!`` or ``^`` first negates; a ``]`` first (after the negation) is a member, not the end.
    Every other character is a member as written (``\\`` escapes nothing), and ``a-z`` is a
    range unless the ``-`` is the first or last member. A class with a reversed range
    (``[9-0]``) is impossible; it is read as any one character (deny more, never less).
    Members are only ever matched against one character of a component: ``/`` is never
    matched, even when listed (``[/a]`` is ``[a]``, ``[!a]`` excludes ``/`` too).
    """
    i = start + 1
    if pattern[i : i + 1] in ("!", "^"):
        i += 1
    if pattern[i : i + 1] == "]":
        i += 1  # a leading ] is a member, not the end
    end = pattern.find("]", i)
    if end < 0:
        return None
    body = pattern[start + 1 : end]
    negated = body[:1] in ("!", "^")
    members = body[1:] if negated else body
    ranges: list[tuple[int, int]] = []
    j = 0
    while j < len(members):
        low = high = ord(members[j])
        if members[j + 1 : j + 2] == "-" and j + 2 < len(members):
            high = ord(members[j + 2])
            if high < low:
                return _ANY_ONE, end + 1
            j += 3
        else:
            j += 1
        ranges.append((low, high))
    slash = ord("/")
    if negated:
        ranges.append((slash, slash))
    else:
        ranges = [
            piece
            for low, high in ranges
            for piece in ((low, min(high, slash - 1)), (max(low, slash + 1), high))
            if piece[0] <= piece[1]
        ]
    return GlobClass(negated=negated, ranges=_merged(ranges)), end + 1


def _merged(ranges: list[tuple[int, int]]) -> tuple[tuple[str, str], ...]:
    merged: list[list[int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return tuple((chr(low), chr(high)) for low, high in merged)


def _class_regex(klass: GlobClass) -> str:
    """``klass`` as a Python regex (every member escaped, so ``re`` reads no set operation)."""
    if not klass.ranges:
        return "(?!)"  # matches nothing
    body = "".join(
        re.escape(low) if low == high else re.escape(low) + "-" + re.escape(high)
        for low, high in klass.ranges
    )
    return "[" + ("^" if klass.negated else "") + body + "]"


def glob_has_magic(pattern: str) -> bool:
    """Whether ``pattern`` contains glob syntax at all."""
    return any(char in pattern for char in "*?[")
