"""Where a directory's git checkout and main repository are, read from files only (no git).

Project trust can come from the main repository of a linked worktree, and a linked
worktree's hooks come from the main checkout, so the reference locates both. Observed on
0.171.0 and kept here:

* a ``.git`` *directory* counts only if it holds ``HEAD`` (an empty ``.git`` directory is
  not a repository, not even as a project-root marker); a ``.git`` *file* always counts;
* a ``.git`` file leads to the main repository only through a consistent linked-worktree
  record: ``gitdir: <common>/worktrees/<name>``, whose ``gitdir`` file points back at this
  ``.git`` and whose ``commondir`` names ``<common>``; the main checkout is ``<common>``'s
  parent, and its own ``.git`` must be ``<common>`` (or a file pointing there). Anything
  else — a moved worktree not yet repaired, a missing or symlinked record — is no
  repository for trust.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Iterator
from typing import Final

__all__ = ["ancestors", "checkout_root", "has_git_entry", "repo_root_for_trust"]

#: The most read of a worktree record file (``gitdir``, ``commondir``, a ``.git`` file).
_MAX_RECORD: Final = 64 * 1024


def ancestors(path: str) -> Iterator[str]:
    """``path`` and each parent up to ``/``, lexically."""
    while True:
        yield path
        parent = posixpath.dirname(path)
        if parent == path:
            return
        path = parent


def has_git_entry(directory: str) -> bool:
    """Whether ``directory/.git`` is a repository entry (see the module notes)."""
    dot_git = posixpath.join(directory, ".git")
    try:
        info = os.stat(dot_git)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        return True
    return os.path.lexists(posixpath.join(dot_git, "HEAD"))


def _start(cwd: str) -> str:
    return cwd if os.path.isdir(cwd) else posixpath.dirname(cwd)


def checkout_root(cwd: str) -> str | None:
    """The nearest directory at or above ``cwd`` with a ``.git`` entry."""
    return next((d for d in ancestors(_start(cwd)) if has_git_entry(d)), None)


def repo_root_for_trust(cwd: str) -> str | None:
    """The main checkout of the repository ``cwd`` is in (itself for a plain checkout)."""
    root = checkout_root(cwd)
    if root is None:
        return None
    dot_git = posixpath.join(root, ".git")
    if os.path.isdir(dot_git):
        return root
    admin = _gitdir_of(dot_git, root)
    if admin is None or posixpath.basename(posixpath.dirname(admin)) != "worktrees":
        return None
    common = posixpath.dirname(posixpath.dirname(admin))
    back = _record(posixpath.join(admin, "gitdir"), admin)
    shared = _record(posixpath.join(admin, "commondir"), admin)
    if back is None or shared is None:
        return None
    if not (_same(back, dot_git) and _same(shared, common)):
        return None
    main = posixpath.dirname(common)
    main_git = posixpath.join(main, ".git")
    if os.path.isdir(main_git):
        owned = _same(main_git, common)
    else:
        pointer = _gitdir_of(main_git, main)
        owned = pointer is not None and _same(pointer, common)
    return main if owned else None


def _gitdir_of(dot_git: str, base: str) -> str | None:
    text = _read_small(dot_git, follow=True)
    if text is None:
        return None
    text = text.strip()
    if not text.startswith("gitdir:"):
        return None
    target = text[len("gitdir:") :].strip()
    return posixpath.normpath(posixpath.join(base, target)) if target else None


def _record(path: str, base: str) -> str | None:
    # Worktree records must be plain files: a symlinked record could point anywhere.
    text = _read_small(path, follow=False)
    if text is None or not text.strip():
        return None
    return posixpath.normpath(posixpath.join(base, text.strip()))


def _read_small(path: str, *, follow: bool) -> str | None:
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, _MAX_RECORD + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > _MAX_RECORD:
        return None
    return data.decode("utf-8", "surrogateescape")


def _same(first: str, second: str) -> bool:
    try:
        return os.path.realpath(first, strict=True) == os.path.realpath(second, strict=True)
    except OSError:
        return False
