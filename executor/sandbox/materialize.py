"""Bind symbolic intent to this executor's native paths: intent -> ``RuleSet`` (pure, given a host).

Rules of resolution (protocol.md §7.4-§7.5):

* ``:project_roots`` (and its legacy alias) expands to each workspace root joined with its
  ``subpath``; with no workspace roots it expands to nothing (the cwd is not substituted);
* ``:tmpdir`` is the child's ``TMPDIR`` for processes, the context's temporary directories
  for filesystem calls; ``:slash_tmp`` is ``/tmp`` when it is a directory; ``:root`` is ``/``;
  ``:minimal`` the platform's list of directories needed to run programs (read-only);
* the most specific rule wins; at one path ``deny`` > ``write`` > ``read``; no rule: denied;
* ``.git``, ``.agents``, ``.codex`` and ``.aws`` stay read-only under every writable root,
  existing or not, and so does the git dir a ``.git`` file points to;
* deny globs are kept as patterns (enforced at access time where a backend can) and their
  existing matches, up to ``glob_scan_max_depth`` levels, become deny rules; a scan that
  hits one of its bounds (``globscan``) refuses the launch rather than deny fewer paths;
* the executor's own state directories are always denied.

All host knowledge comes through ``HostView`` so that tests can describe any host.
"""

from __future__ import annotations

import enum
import posixpath
import re
from collections.abc import Mapping
from typing import Final, Protocol

from executor.errors import InvalidParams, SandboxUnavailable
from executor.protocol.intent import (
    PROJECT_ROOTS_GLOB_PREFIX,
    Access,
    Entry,
    GlobTarget,
    PathTarget,
    ProfileType,
    SandboxIntent,
    SpecialKind,
    SpecialTarget,
)
from executor.sandbox.globscan import (
    GLOB_SCAN_ENTRIES_ENV,
    GLOB_SCAN_MATCHES_ENV,
    GLOB_SCAN_SECONDS_ENV,
    MAX_GLOB_MATCHES,
    MAX_SCAN_DEPTH,
    GlobBounds,
    GlobScan,
    ScanLimits,
    Truncation,
)
from executor.sandbox.rules import (
    PathKind,
    PathRule,
    RuleOrigin,
    RuleSet,
    glob_has_magic,
    glob_to_regex,
)

__all__ = [
    "MAX_GLOB_MATCHES",
    "MAX_SCAN_DEPTH",
    "PROTECTED_NAMES",
    "GlobBounds",
    "HostView",
    "Purpose",
    "materialize",
    "needs_cwd",
]

#: Names that stay read-only under every writable root: planting code there would let a
#: sandboxed command run code later, outside the sandbox (git hooks, agent configuration).
PROTECTED_NAMES: Final = (".git", ".agents", ".codex", ".aws")


class Purpose(enum.Enum):
    """What the rules are for; ``:tmpdir`` and the default policy cwd depend on it."""

    PROCESS = "process"
    FILESYSTEM = "filesystem"


class HostView(Protocol):
    """What materialization may ask about the host."""

    #: Directories ``:minimal`` stands for on this platform.
    minimal_paths: tuple[str, ...]
    #: The executor's own state directories, hidden from every sandbox.
    hidden_paths: tuple[str, ...]
    #: The executor's working directory (the default policy cwd of filesystem calls).
    cwd: str
    #: The executor user's home directory.
    home: str | None

    def kind(self, path: str) -> PathKind:
        """What is at ``path`` (symlinks followed)."""

    def realpath(self, path: str) -> str:
        """``path`` with symlinks resolved (missing tails kept as they are)."""

    def is_symlink(self, path: str) -> bool:
        """Whether ``path`` itself is a symlink (not followed)."""

    def is_shared_directory(self, path: str) -> bool:
        """Whether others may create entries in directory ``path`` (world-writable or sticky)."""

    def gitdir_pointer(self, path: str) -> str | None:
        """If ``path`` is a ``.git`` file (``gitdir: X``), the absolute git dir it names."""

    def glob_matches(self, base: str, regex: str, limits: ScanLimits) -> GlobScan:
        """Existing paths below ``base`` (at most ``limits.max_depth`` levels) matching
        ``regex``; a matching directory is not entered. ``truncated`` says which bound of
        ``limits`` stopped the scan early (``DEPTH``: directories remained unscanned)."""


def needs_cwd(intent: SandboxIntent) -> bool:
    """Whether the profile's entries need a policy cwd (project roots or relative globs)."""
    fs = intent.permissions.file_system
    if fs is None or not fs.restricted:
        return False
    for entry in fs.entries:
        target = entry.target
        if isinstance(target, SpecialTarget) and target.kind in (
            SpecialKind.PROJECT_ROOTS,
            SpecialKind.CURRENT_WORKING_DIRECTORY,
        ):
            return True
        if isinstance(target, GlobTarget) and not target.pattern.startswith(("/", "~/")):
            return True
    return False


def _policy_cwd(
    intent: SandboxIntent, host: HostView, purpose: Purpose, process_cwd: str | None
) -> str:
    if intent.cwd is not None:
        return intent.cwd
    if purpose is Purpose.PROCESS and process_cwd is not None:
        return process_cwd
    if needs_cwd(intent):
        raise InvalidParams("file system sandbox context with dynamic permissions requires cwd")
    return host.cwd


def materialize(
    intent: SandboxIntent,
    host: HostView,
    *,
    purpose: Purpose = Purpose.PROCESS,
    process_cwd: str | None = None,
    child_env: Mapping[str, str] | None = None,
    glob_bounds: GlobBounds | None = None,
) -> RuleSet | None:
    """The rule set for ``intent`` on ``host``; None when the profile disables sandboxing.

    ``glob_bounds`` bound the deny-glob scan (default: ``GlobBounds.from_env()``); raises
    ``SandboxUnavailable`` when a scan hits one.
    """
    permissions = intent.permissions
    if permissions.type is ProfileType.DISABLED:
        return None
    cwd = _policy_cwd(intent, host, purpose, process_cwd)
    fs = permissions.file_system
    if permissions.type is ProfileType.EXTERNAL or fs is None or not fs.restricted:
        return RuleSet(
            filesystem_restricted=False,
            network=permissions.network,
            policy_cwd=cwd,
            landlock_only=intent.use_legacy_landlock,
        )
    builder = _Builder(intent, host, purpose, cwd, child_env or {})
    for entry in fs.entries:
        builder.add_entry(entry)
    if builder.full_disk_write():
        # The reference runs ``:root = write`` with nothing narrower without any filesystem
        # confinement; so do we (only the network part applies).
        return RuleSet(
            filesystem_restricted=False,
            network=permissions.network,
            policy_cwd=cwd,
            landlock_only=intent.use_legacy_landlock,
            notes=tuple(builder.notes),
        )
    builder.expand_globs(fs.glob_scan_max_depth, glob_bounds or GlobBounds.from_env())
    builder.refuse_planted_symlinks()
    builder.pin_workspace_roots()
    builder.protect_names((*PROTECTED_NAMES, *fs.protected_names))
    builder.hide_executor_state()
    return RuleSet(
        filesystem_restricted=True,
        rules=builder.finish(),
        deny_globs=tuple(builder.deny_globs),
        network=permissions.network,
        policy_cwd=cwd,
        landlock_only=intent.use_legacy_landlock,
        pinned=tuple(sorted(builder.pinned)),
        notes=tuple(builder.notes),
    )


class _Builder:
    def __init__(
        self,
        intent: SandboxIntent,
        host: HostView,
        purpose: Purpose,
        cwd: str,
        env: Mapping[str, str],
    ) -> None:
        self.intent = intent
        self.host = host
        self.purpose = purpose
        self.cwd = cwd
        self.env = env
        self.rules: dict[str, PathRule] = {}
        self.deny_globs: list[str] = []
        self.notes: list[str] = []
        self.pinned: set[str] = set()
        #: Writable paths as requested -> as resolved, for those that crossed a symlink.
        self.resolved_writes: dict[str, str] = {}

    # --- entries ----------------------------------------------------------------------------

    def add_entry(self, entry: Entry) -> None:
        target = entry.target
        if isinstance(target, GlobTarget):
            self.deny_globs.extend(self._absolute_globs(target.pattern))
            return
        for path in self._paths(target):
            self._add(path, entry.access, RuleOrigin.ENTRY, skip_if_missing=entry.skip_if_missing)

    def _paths(self, target: PathTarget | SpecialTarget) -> list[str]:
        if isinstance(target, PathTarget):
            return [target.path]
        kind = target.kind
        if kind is SpecialKind.ROOT:
            return ["/"]
        if kind is SpecialKind.MINIMAL:
            return list(self.host.minimal_paths)
        if kind in (SpecialKind.PROJECT_ROOTS, SpecialKind.CURRENT_WORKING_DIRECTORY):
            roots = self.intent.workspace_roots
            if not roots:
                self.notes.append(
                    ":project_roots expands to nothing: the request names no workspace roots"
                )
            return [
                posixpath.join(root, target.subpath) if target.subpath else root for root in roots
            ]
        if kind is SpecialKind.TMPDIR:
            return self._tmpdirs()
        if kind is SpecialKind.SLASH_TMP:
            return ["/tmp"] if self.host.kind("/tmp") is PathKind.DIRECTORY else []
        self.notes.append(f"ignored unknown special path {target.token or '?'}")
        return []

    def _tmpdirs(self) -> list[str]:
        if self.purpose is Purpose.FILESYSTEM:
            return list(self.intent.temporary_directories or ())
        tmpdir = self.env.get("TMPDIR", "")
        return [posixpath.normpath(tmpdir)] if tmpdir.startswith("/") else []

    def _add(
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

    def full_disk_write(self) -> bool:
        root = self.rules.get("/")
        return (
            root is not None
            and root.access is Access.WRITE
            and not self.deny_globs
            and all(rule.access is Access.WRITE for rule in self.rules.values())
        )

    # --- globs ------------------------------------------------------------------------------

    def _absolute_globs(self, pattern: str) -> list[str]:
        if pattern.startswith(PROJECT_ROOTS_GLOB_PREFIX):
            rest = pattern[len(PROJECT_ROOTS_GLOB_PREFIX) :]
            spelled = [posixpath.join(root, rest) for root in self.intent.workspace_roots]
        elif pattern.startswith("~/"):
            home = self.intent.user_home_dir or self.host.home
            spelled = [posixpath.join(home, pattern[2:])] if home else []
        elif pattern.startswith("/"):
            spelled = [pattern]
        else:
            spelled = [posixpath.join(self.cwd, pattern)]
        return [variant for glob in spelled for variant in self._resolved_variants(glob)]

    def _resolved_variants(self, glob: str) -> list[str]:
        """The glob as written and, if its static prefix crosses a symlink, as resolved.

        Rules hold real paths, so a glob under a symlinked workspace must match those too.
        """
        prefix = _static_prefix(glob)
        real = self.host.realpath(prefix)
        if real == prefix or not glob.startswith(prefix):
            return [glob]
        return [glob, real.rstrip("/") + glob[len(prefix.rstrip("/")) :]]

    def expand_globs(self, max_depth: int | None, bounds: GlobBounds) -> None:
        """Deny each glob's existing matches; refuse when a scan could not cover them all."""
        deadline = bounds.deadline()
        entries_left = bounds.max_entries
        for pattern in self.deny_globs:
            if not glob_has_magic(pattern):
                self._add(posixpath.normpath(pattern), Access.DENY, RuleOrigin.DENY_GLOB)
                continue
            base = _static_prefix(pattern)
            # The depth the pattern itself reaches (None: any, it has `**`), then the
            # profile's; only a depth cut short by MAX_SCAN_DEPTH is a bound that was hit.
            wanted = _min_depth(_pattern_depth(pattern, base), max_depth)
            depth = MAX_SCAN_DEPTH if wanted is None else min(wanted, MAX_SCAN_DEPTH)
            limits = ScanLimits(depth, bounds.max_matches, entries_left, deadline)
            scan = self.host.glob_matches(base, glob_to_regex(pattern), limits)
            entries_left -= scan.entries
            if scan.truncated is Truncation.DEPTH and depth == wanted:
                scan = GlobScan(scan.matches, scan.entries)  # as deep as the profile asked
            if scan.truncated is not None:
                raise SandboxUnavailable(_truncation_reason(pattern, base, scan, limits, bounds))
            for match in scan.matches:
                self._add(match, Access.DENY, RuleOrigin.DENY_GLOB)

    # --- protection -------------------------------------------------------------------------

    def _effective(self, path: str) -> Access:
        current = path
        while True:
            rule = self.rules.get(current)
            if rule is not None:
                return rule.access
            if current == "/":
                return Access.DENY
            current = posixpath.dirname(current)

    def refuse_planted_symlinks(self) -> None:
        """Refuse write access derived through a symlink that a sandbox could have planted.

        ``mv ws ws.o; ln -s ~/.ssh ws`` inside one command would otherwise hand the *next*
        command for that workspace write access to the link's target. A link is trusted only
        where no sandbox of these rules could have created it, and not below a directory where
        anyone may create entries (``/tmp``: an earlier sandbox may have written there).
        """
        requested = [*self.resolved_writes, *self.intent.workspace_roots]
        for path in requested:
            for link in self._symlinks_on(path):
                parent = posixpath.dirname(link)
                if self._effective(parent) is Access.WRITE or self._below_shared(parent):
                    raise SandboxUnavailable(
                        f"{path} resolves through the symlink {link}, which lies in {parent}, "
                        "where a sandboxed command (or another user) may create entries; "
                        "refusing to derive the sandbox's rules from it (name the real path)"
                    )

    def _below_shared(self, directory: str) -> bool:
        """``directory`` is, or lies below, one where anyone may create entries (``/tmp``):
        an earlier sandbox that could write there may have made any of it."""
        current = directory
        while True:
            if self.host.is_shared_directory(current):
                return True
            if current == "/":
                return False
            current = posixpath.dirname(current)

    def _symlinks_on(self, path: str) -> list[str]:
        """The symlinks met while resolving ``path``, each as the path it was met at."""
        found: list[str] = []
        current = "/"
        for part in posixpath.normpath(path).split("/"):
            if not part:
                continue
            candidate = posixpath.join(current, part)
            if self.host.is_symlink(candidate):
                found.append(candidate)
            current = self.host.realpath(candidate)
        return found

    def pin_workspace_roots(self) -> None:
        """Pin each workspace root and every directory between it and a writable parent.

        Renaming any of them (or replacing it with a symlink) would move the ground under the
        rules of every later command for that workspace; pinned paths cannot be moved.
        """
        for root in self.intent.workspace_roots:
            current = self.host.realpath(root)
            while current != "/":
                parent = posixpath.dirname(current)
                if (
                    self._effective(parent) is Access.WRITE
                    and self.host.kind(current) is PathKind.DIRECTORY
                ):
                    self.pinned.add(current)
                current = parent

    def protect_names(self, names: tuple[str, ...]) -> None:
        """Protected names stay read-only (and uncreatable) under every writable root and
        every pinned directory: a ``.git`` planted in the workspace's parent is found by git
        on the host just as one in the workspace is."""
        writable = [rule.path for rule in self.rules.values() if rule.access is Access.WRITE]
        anchors = dict.fromkeys([*writable, *sorted(self.pinned)])
        for root in anchors:
            for name in names:
                self._protect(posixpath.join(root, name))
            gitdir = self.host.gitdir_pointer(posixpath.join(root, ".git"))
            if (
                gitdir is not None
                and gitdir not in self.rules
                and self._effective(gitdir) is Access.WRITE
            ):
                self._add(gitdir, Access.READ, RuleOrigin.GITDIR)

    def _protect(self, path: str) -> None:
        if path in self.rules or self._effective(path) is not Access.WRITE:
            return
        if not self.host.is_symlink(path):
            # Its directory is a rule path or a pin (both real), and the name is no symlink.
            self._add(path, Access.READ, RuleOrigin.PROTECTED, resolved=True)
            return
        # A symlinked name: the link itself is pinned (it cannot be removed or replaced), and
        # its target is narrowed to read-only where it was writable — never widened: the link
        # may have been planted by an earlier command, pointing at a denied directory.
        self.pinned.add(path)
        target = self.host.realpath(path)
        if target not in self.rules and self._effective(target) is Access.WRITE:
            self._add(target, Access.READ, RuleOrigin.PROTECTED)

    def hide_executor_state(self) -> None:
        for path in self.host.hidden_paths:
            if self._effective(path) is not Access.DENY:
                self._add(path, Access.DENY, RuleOrigin.EXECUTOR_STATE)

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


def _static_prefix(pattern: str) -> str:
    """The directory part of ``pattern`` before its first glob character."""
    match = _MAGIC.search(pattern)
    head = pattern if match is None else pattern[: match.start()]
    return posixpath.dirname(head) if not head.endswith("/") else head.rstrip("/") or "/"
