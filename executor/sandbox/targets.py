"""Bind an entry's symbolic target to this host's paths (protocol.md §7.4).

The wire speaks of ``:project_roots``, ``:tmpdir``, ``:slash_tmp``, ``:root``, ``:minimal``,
globs relative to the cwd or to ``~``; only here do they become native absolute paths, so
that the rest of materialization works on paths alone. Binding needs the request (workspace
roots, home, temporary directories), the host, the purpose and the policy cwd, nothing else.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from executor.protocol.intent import (
    PROJECT_ROOTS_GLOB_PREFIX,
    Entry,
    GlobTarget,
    PathTarget,
    SandboxIntent,
    SpecialKind,
    SpecialTarget,
)
from executor.sandbox.denyglobs import static_prefix
from executor.sandbox.draft import RuleDraft
from executor.sandbox.hostview import HostView
from executor.sandbox.purpose import Purpose
from executor.sandbox.rules import PathKind, RuleOrigin

__all__ = ["Binding"]


@dataclass(frozen=True)
class Binding:
    """What symbolic targets mean for one request on one host."""

    intent: SandboxIntent
    host: HostView
    purpose: Purpose
    #: The policy cwd: relative globs are joined to it.
    cwd: str
    #: The child's environment (``:tmpdir`` of a process is its ``TMPDIR``).
    env: Mapping[str, str]

    def add_entry(self, entry: Entry, draft: RuleDraft) -> None:
        """Add ``entry`` to ``draft``: its paths as rules, or its glob as deny globs."""
        target = entry.target
        if isinstance(target, GlobTarget):
            draft.deny_globs.extend(self._absolute_globs(target.pattern))
            return
        for path in self._paths(target, draft.notes):
            draft.add(path, entry.access, RuleOrigin.ENTRY, skip_if_missing=entry.skip_if_missing)

    def _paths(self, target: PathTarget | SpecialTarget, notes: list[str]) -> list[str]:
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
                notes.append(
                    ":project_roots expands to nothing: the request names no workspace roots"
                )
            return [
                posixpath.join(root, target.subpath) if target.subpath else root for root in roots
            ]
        if kind is SpecialKind.TMPDIR:
            return self._tmpdirs()
        if kind is SpecialKind.SLASH_TMP:
            return ["/tmp"] if self.host.kind("/tmp") is PathKind.DIRECTORY else []
        notes.append(f"ignored unknown special path {target.token or '?'}")
        return []

    def _tmpdirs(self) -> list[str]:
        if self.purpose is Purpose.FILESYSTEM:
            return list(self.intent.temporary_directories or ())
        tmpdir = self.env.get("TMPDIR", "")
        return [posixpath.normpath(tmpdir)] if tmpdir.startswith("/") else []

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
        prefix = static_prefix(glob)
        real = self.host.realpath(prefix)
        if real == prefix or not glob.startswith(prefix):
            return [glob]
        return [glob, real.rstrip("/") + glob[len(prefix.rstrip("/")) :]]
