"""Refuse write access derived through a symlink that an earlier sandbox could have planted.

``mv ws ws.o; ln -s ~/.ssh ws`` inside one command would otherwise hand the *next* command
for that workspace write access to the link's target: rules are derived from resolved paths,
so the links met on the way decide them. A link is trusted only where no sandbox of these
rules could have created it, and not below a directory where anyone may create entries
(``/tmp``: an earlier sandbox may have written there).
"""

from __future__ import annotations

import posixpath

from executor.errors import SandboxUnavailable
from executor.protocol.intent import Access
from executor.sandbox.draft import RuleDraft

__all__ = ["refuse_planted_symlinks"]


def refuse_planted_symlinks(draft: RuleDraft, workspace_roots: tuple[str, ...]) -> None:
    """Raise ``SandboxUnavailable`` if a writable path or workspace root resolves through a
    symlink in a directory these rules (or another user) could have written."""
    requested = [*draft.resolved_writes, *workspace_roots]
    for path in requested:
        for link in _symlinks_on(draft, path):
            parent = posixpath.dirname(link)
            if draft.effective(parent) is Access.WRITE or _below_shared(draft, parent):
                raise SandboxUnavailable(
                    f"{path} resolves through the symlink {link}, which lies in {parent}, "
                    "where a sandboxed command (or another user) may create entries; "
                    "refusing to derive the sandbox's rules from it (name the real path)"
                )


def _below_shared(draft: RuleDraft, directory: str) -> bool:
    """``directory`` is, or lies below, one where anyone may create entries (``/tmp``):
    an earlier sandbox that could write there may have made any of it."""
    current = directory
    while True:
        if draft.host.is_shared_directory(current):
            return True
        if current == "/":
            return False
        current = posixpath.dirname(current)


def _symlinks_on(draft: RuleDraft, path: str) -> list[str]:
    """The symlinks met while resolving ``path``, each as the path it was met at."""
    found: list[str] = []
    current = "/"
    for part in posixpath.normpath(path).split("/"):
        if not part:
            continue
        candidate = posixpath.join(current, part)
        if draft.host.is_symlink(candidate):
            found.append(candidate)
        current = draft.host.realpath(candidate)
    return found
