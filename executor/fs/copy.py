"""``fs/copy``: a file, a symlink (as a symlink), or a directory tree (merged into the target).

Reference semantics: a directory needs ``recursive``; a directory never goes into itself or a
descendant (decided on real paths); missing destination parents of a *directory* copy are
created, those of a file copy are not; existing files are overwritten, existing extra files
kept; symlinks are copied as symlinks (an existing name is ``EEXIST``); special files inside a
tree are skipped; file permission bits are copied. Ours: a file copied onto itself is left
alone (the reference truncates it to nothing), and under a sandbox set-id bits are dropped.

The source is read through descriptors (``O_NOFOLLOW``), so nothing swapped in during the
copy is followed; every destination entry is resolved and checked like any other write.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from typing import Final

from executor.fs import failures
from executor.fs.directories import claim_name, list_names, make_directories
from executor.fs.files import open_for_read, open_for_replace
from executor.fs.resolve import Location, Resolver
from executor.fs.view import Visibility
from executor.sandbox.rules import is_within

__all__ = ["copy"]

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SETID_BITS: Final = stat.S_ISUID | stat.S_ISGID
_FALLBACK_ERRNOS: Final = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP})
_CHUNK: Final = 1024 * 1024


def copy(resolver: Resolver, source: str, destination: str, *, recursive: bool) -> None:
    """``fs/copy`` from ``source`` to ``destination``."""
    with resolver.locate(source, follow_final=False) as location:
        resolver.require_visible(location.path)
        st = os.stat(location.name, dir_fd=location.dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            if not recursive:
                raise failures.copy_needs_recursive()
            if is_within(_real_destination(resolver, destination), location.path):
                raise failures.copy_into_itself()
            resolver.require_readable(location.path)
            fd = os.open(location.name, _DIR_FLAGS, dir_fd=location.dir_fd)
            tree = (fd, location.path)
        else:
            tree = None
            _copy_entry(resolver, location, st, destination, tree_copy=False)
    if tree is not None:
        _copy_tree(resolver, tree[0], tree[1], destination)


def _real_destination(resolver: Resolver, destination: str) -> str:
    """Where ``destination`` really is: its deepest existing ancestor resolved, the rest kept."""
    path, rest = destination, list[str]()
    while True:
        try:
            with resolver.locate(path) as location:
                return posixpath.join(location.path, *reversed(rest))
        except FileNotFoundError:
            if path == "/":
                raise
            rest.append(posixpath.basename(path))
            path = posixpath.dirname(path)


def _copy_entry(
    resolver: Resolver, location: Location, st: os.stat_result, destination: str, *, tree_copy: bool
) -> None:
    """Copy one non-directory; special files fail alone and are skipped inside a tree."""
    if stat.S_ISLNK(st.st_mode):
        resolver.require_readable(location.path)
        target = os.readlink(location.name, dir_fd=location.dir_fd)
        with resolver.locate(destination, follow_final=False) as place:
            claim_name(resolver, place)
            os.symlink(target, place.name, dir_fd=place.dir_fd)
    elif stat.S_ISREG(st.st_mode):
        _copy_file(resolver, location, destination)
    elif not tree_copy:
        raise failures.copy_unsupported_kind()


def _copy_file(resolver: Resolver, location: Location, destination: str) -> None:
    source_fd, source = open_for_read(resolver, location, location.path)
    try:
        with resolver.locate(destination) as place:
            if _same_file(resolver, place, source):
                return
            target_fd = open_for_replace(resolver, place, destination)
        try:
            _transfer(source_fd, target_fd)
            mode = stat.S_IMODE(source.st_mode)
            os.fchmod(target_fd, mode & ~_SETID_BITS if resolver.sandboxed else mode)
        finally:
            os.close(target_fd)
    finally:
        os.close(source_fd)


def _same_file(resolver: Resolver, place: Location, source: os.stat_result) -> bool:
    if not resolver.visibility(place.path).exists:
        return False
    try:
        st = os.stat(place.name, dir_fd=place.dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (source.st_dev, source.st_ino)


def _transfer(source_fd: int, target_fd: int) -> None:
    """Copy the rest of ``source_fd`` into ``target_fd``, in the kernel when it can."""
    try:
        while os.copy_file_range(source_fd, target_fd, 1 << 30) > 0:
            pass
        return
    except OSError as exc:
        if exc.errno not in _FALLBACK_ERRNOS:
            raise
    while chunk := os.read(source_fd, _CHUNK):
        view = memoryview(chunk)
        while view:
            view = view[os.write(target_fd, view) :]


def _copy_tree(resolver: Resolver, top: int, source: str, destination: str) -> None:
    """Copy the open directory ``top`` (at real path ``source``) into ``destination``."""
    stack: list[tuple[int, str, str, list[str]]] = []
    try:
        make_directories(resolver, destination, follow=True)
        stack.append((top, source, _real_destination(resolver, destination), _pending(top)))
    except BaseException:
        os.close(top)
        raise
    try:
        while stack:
            fd, directory, target, names = stack[-1]
            if not names:
                os.close(stack.pop()[0])
                continue
            child = _copy_child(resolver, fd, directory, target, names.pop())
            if child is not None:
                stack.append(child)
    finally:
        for fd, *_rest in stack:
            os.close(fd)


def _pending(fd: int) -> list[str]:
    """Names of ``fd`` to copy, last first (so that ``pop()`` keeps directory order)."""
    names = list_names(fd)
    names.reverse()
    return names


def _copy_child(
    resolver: Resolver, fd: int, directory: str, target: str, name: str
) -> tuple[int, str, str, list[str]] | None:
    """Copy one child; a directory is created and returned to be filled."""
    path = posixpath.join(directory, name)
    if resolver.visibility(path) is Visibility.INVISIBLE:
        return None
    destination = posixpath.join(target, name)
    location = Location(fd, name, path)  # borrowed descriptor: never closed here
    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        _copy_entry(resolver, location, st, destination, tree_copy=True)
        return None
    resolver.require_readable(path)
    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
    try:
        make_directories(resolver, destination, follow=True)
        return child, path, _real_destination(resolver, destination), _pending(child)
    except BaseException:
        os.close(child)
        raise
