"""Keep the ground of later commands out of a sandbox's reach: pins, protected names, state.

A sandboxed command that can write a workspace must not be able to plant code that runs
later outside the sandbox (git hooks, agent configuration), nor move the directories that
the rules of every later command for that workspace are derived from, nor see the
executor's own state. These steps run after entries and deny globs, on the rules so far.
"""

from __future__ import annotations

import posixpath
from typing import Final

from executor.protocol.intent import Access
from executor.sandbox.draft import RuleDraft
from executor.sandbox.rules import PathKind, RuleOrigin

__all__ = ["PROTECTED_NAMES", "hide_executor_state", "pin_workspace_roots", "protect_names"]

#: Names that stay read-only under every writable root: planting code there would let a
#: sandboxed command run code later, outside the sandbox (git hooks, agent configuration).
PROTECTED_NAMES: Final = (".git", ".agents", ".codex", ".aws")


def pin_workspace_roots(draft: RuleDraft, workspace_roots: tuple[str, ...]) -> None:
    """Pin each workspace root and every directory between it and a writable parent.

    Renaming any of them (or replacing it with a symlink) would move the ground under the
    rules of every later command for that workspace; pinned paths cannot be moved.
    """
    for root in workspace_roots:
        current = draft.host.realpath(root)
        while current != "/":
            parent = posixpath.dirname(current)
            if (
                draft.effective(parent) is Access.WRITE
                and draft.host.kind(current) is PathKind.DIRECTORY
            ):
                draft.pinned.add(current)
            current = parent


def protect_names(draft: RuleDraft, names: tuple[str, ...]) -> None:
    """Protected names stay read-only (and uncreatable) under every writable root and
    every pinned directory: a ``.git`` planted in the workspace's parent is found by git
    on the host just as one in the workspace is."""
    writable = [rule.path for rule in draft.rules.values() if rule.access is Access.WRITE]
    anchors = dict.fromkeys([*writable, *sorted(draft.pinned)])
    for root in anchors:
        for name in names:
            _protect(draft, posixpath.join(root, name))
        gitdir = draft.host.gitdir_pointer(posixpath.join(root, ".git"))
        if (
            gitdir is not None
            and gitdir not in draft.rules
            and draft.effective(gitdir) is Access.WRITE
        ):
            draft.add(gitdir, Access.READ, RuleOrigin.GITDIR)


def _protect(draft: RuleDraft, path: str) -> None:
    if path in draft.rules or draft.effective(path) is not Access.WRITE:
        return
    if not draft.host.is_symlink(path):
        # Its directory is a rule path or a pin (both real), and the name is no symlink.
        draft.add(path, Access.READ, RuleOrigin.PROTECTED, resolved=True)
        return
    # A symlinked name: the link itself is pinned (it cannot be removed or replaced), and
    # its target is narrowed to read-only where it was writable — never widened: the link
    # may have been planted by an earlier command, pointing at a denied directory.
    draft.pinned.add(path)
    target = draft.host.realpath(path)
    if target not in draft.rules and draft.effective(target) is Access.WRITE:
        draft.add(target, Access.READ, RuleOrigin.PROTECTED)


def hide_executor_state(draft: RuleDraft) -> None:
    """Deny the executor's own state directories, whatever the entries granted."""
    for path in draft.host.hidden_paths:
        if draft.effective(path) is not Access.DENY:
            draft.add(path, Access.DENY, RuleOrigin.EXECUTOR_STATE)
