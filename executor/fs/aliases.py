"""Paths a sandbox names through a symlink, so that the name itself stays reachable.

Materialization resolves every rule path (``/bin`` becomes ``/usr/bin`` on a merged-/usr
host; a workspace root under a symlinked home becomes its real path). Where ``/`` is readable
that loses nothing, but under ``:minimal`` or a rule set without the root the requested name
would be invisible, while the reference (which mounts each entry at its requested path) shows
it. An *alias* is such a requested path: the view treats it and its ancestors as skeleton, so
resolution can traverse them and follow the symlinks to the real, classified, rule paths.
"""

from __future__ import annotations

import posixpath

from executor.protocol.intent import Entry, PathTarget, SandboxIntent, SpecialKind, SpecialTarget
from executor.sandbox.hostview import HostView

__all__ = ["alias_paths"]


def alias_paths(intent: SandboxIntent, host: HostView) -> frozenset[str]:
    """Requested entry paths of ``intent`` that differ from their real path on ``host``."""
    fs = intent.permissions.file_system
    if fs is None or not fs.restricted:
        return frozenset()
    found = set()
    for entry in fs.entries:
        for path in _requested(entry, intent, host):
            normalized = posixpath.normpath(path)
            if host.realpath(normalized) != normalized:
                found.add(normalized)
    return frozenset(found)


def _requested(entry: Entry, intent: SandboxIntent, host: HostView) -> list[str]:
    """The paths an entry names before symlinks are resolved (filesystem-call semantics)."""
    target = entry.target
    if isinstance(target, PathTarget):
        return [target.path]
    if not isinstance(target, SpecialTarget):
        return []  # globs are patterns, not places
    if target.kind is SpecialKind.MINIMAL:
        return list(host.minimal_paths)
    if target.kind in (SpecialKind.PROJECT_ROOTS, SpecialKind.CURRENT_WORKING_DIRECTORY):
        return [posixpath.join(root, target.subpath or "") for root in intent.workspace_roots]
    if target.kind is SpecialKind.TMPDIR:
        return list(intent.temporary_directories or ())
    if target.kind is SpecialKind.SLASH_TMP:
        return ["/tmp"]
    return []
