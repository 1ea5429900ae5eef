"""``fs/remove``: unlink a file or symlink, or remove a directory (recursively by default).

A symlink is always removed itself, never its target. Trees are removed through directory
descriptors opened with ``O_NOFOLLOW``, so a symlink swapped in during the removal is unlinked,
not descended into. Under a sandbox the top-level entry and its directory must be writable,
and a tree that holds a narrower rule (a protected ``.git``, a read-only or denied path) is
refused before anything is deleted; deny globs are checked per entry as the tree is removed.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Callable
from typing import Final

from executor.fs import failures
from executor.fs.directories import list_names
from executor.fs.resolve import Location, Resolver
from executor.fs.view import denial
from executor.protocol.intent import Access
from executor.sandbox.rules import is_within

__all__ = ["remove"]

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove(resolver: Resolver, path: str, *, recursive: bool, force: bool, follow: bool) -> None:
    """``fs/remove``; with ``force`` a missing path is success."""
    if recursive and not follow:
        raise failures.no_follow_recursive_removal()
    if path == "/":
        raise failures.remove_root()
    try:
        with resolver.locate(path, follow_parents=follow, follow_final=False) as location:
            _remove_at(resolver, location, recursive=recursive, follow=follow)
    except FileNotFoundError:
        if not force:
            raise


def _remove_at(resolver: Resolver, location: Location, *, recursive: bool, follow: bool) -> None:
    resolver.require_visible(location.path)
    st = os.stat(location.name, dir_fd=location.dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode) and not follow:
        raise failures.symlink_in_path()
    resolver.require_entry_change(location.path)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(location.name, dir_fd=location.dir_fd)
    elif recursive:
        _refuse_protected_inside(resolver, location.path)
        _remove_tree(resolver, location)
    else:
        os.rmdir(location.name, dir_fd=location.dir_fd)


def _refuse_protected_inside(resolver: Resolver, root: str) -> None:
    """Refuse, before deleting anything, a tree holding a path the sandbox does not let go."""
    if resolver.view is None:
        return
    for rule in resolver.view.rules.rules:
        if rule.access is not Access.WRITE and rule.path != root and is_within(rule.path, root):
            raise denial(errno.EROFS)


def _remove_tree(resolver: Resolver, location: Location) -> None:
    """Depth-first removal of the directory at ``location`` (iterative: no recursion limit)."""
    top = os.open(location.name, _DIR_FLAGS, dir_fd=location.dir_fd)
    stack: list[tuple[int, str, list[str]]] = [(top, location.path, [])]
    try:
        stack[0][2].extend(list_names(top))
        while stack:
            fd, directory, names = stack[-1]
            if names:
                child = _remove_child(resolver, fd, directory, names.pop())
                if child is not None:
                    stack.append(child)
                continue
            stack.pop()
            os.close(fd)
            parent_fd = stack[-1][0] if stack else location.dir_fd
            name = posixpath.basename(directory) if stack else location.name
            _ignore_missing(os.rmdir, name, parent_fd)
    finally:
        for fd, _directory, _names in stack:
            os.close(fd)


def _remove_child(
    resolver: Resolver, fd: int, directory: str, name: str
) -> tuple[int, str, list[str]] | None:
    """Unlink ``name``, or open it when it is a directory to empty first."""
    path = posixpath.join(directory, name)
    resolver.require_entry_change(path)
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            # Swapped for a non-directory since: unlink that instead.
        else:
            try:
                return child, path, list_names(child)
            except BaseException:
                os.close(child)
                raise
    _ignore_missing(os.unlink, name, fd)
    return None


def _ignore_missing(remove_name: Callable[..., None], name: str, dir_fd: int) -> None:
    try:
        remove_name(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
