"""``fs/createDirectory`` and ``fs/readDirectory``."""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from typing import Final

from executor.fs.resolve import Location, Resolver
from executor.fs.view import Visibility, denial
from executor.protocol.fs_messages import DirectoryEntry

__all__ = [
    "claim_name",
    "create_directory",
    "display_name",
    "list_names",
    "make_directories",
    "open_directory",
    "read_directory",
]

_LIST_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def create_directory(resolver: Resolver, path: str, *, recursive: bool, follow: bool) -> None:
    """Create ``path``; ``recursive`` also creates missing parents and accepts an existing dir."""
    if not recursive:
        with resolver.locate(path, follow_parents=follow, follow_final=False) as location:
            _make(resolver, location)
        return
    make_directories(resolver, path, follow=follow)


def claim_name(resolver: Resolver, location: Location) -> None:
    """Before creating an entry: ``EEXIST`` if this view shows something there, else the
    sandbox must let the entry be created (``EROFS`` otherwise)."""
    if resolver.visibility(location.path).exists:
        try:
            os.stat(location.name, dir_fd=location.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            raise denial(errno.EEXIST)
    resolver.require_entry_change(location.path)


def _make(resolver: Resolver, location: Location) -> None:
    """``mkdir`` at ``location``."""
    claim_name(resolver, location)
    os.mkdir(location.name, 0o777, dir_fd=location.dir_fd)


def make_directories(resolver: Resolver, path: str, *, follow: bool) -> None:
    """``create_dir_all``: create ``path``, first creating whatever parent is missing."""
    pending = [path]
    budget = 4 * path.count("/") + 4  # bounds retries if directories vanish concurrently
    while pending:
        budget -= 1
        current = pending[-1]
        try:
            with resolver.locate(current, follow_parents=follow, follow_final=False) as location:
                _make_or_accept(resolver, location, follow=follow)
        except FileNotFoundError:
            if current == "/" or budget <= 0:
                raise
            pending.append(posixpath.dirname(current))
            continue
        pending.pop()


def _make_or_accept(resolver: Resolver, location: Location, *, follow: bool) -> None:
    try:
        _make(resolver, location)
    except FileExistsError:
        if not _is_directory(resolver, location, follow=follow):
            # The reference walks no-follow paths with O_DIRECTORY, hence ENOTDIR there.
            raise denial(errno.EEXIST if follow else errno.ENOTDIR) from None


def _is_directory(resolver: Resolver, location: Location, *, follow: bool) -> bool:
    if not follow:
        st = os.stat(location.name, dir_fd=location.dir_fd, follow_symlinks=False)
        return stat.S_ISDIR(st.st_mode)
    try:
        with resolver.locate(location.path) as target:
            resolver.require_visible(target.path)
            st = os.stat(target.name, dir_fd=target.dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode)


def open_directory(resolver: Resolver, location: Location) -> int:
    """A readable descriptor of the directory at ``location`` (``ENOTDIR`` for anything else)."""
    resolver.require_readable(location.path)
    return os.open(location.name, _LIST_FLAGS, dir_fd=location.dir_fd)


def list_names(fd: int) -> list[str]:
    """The names in the open directory ``fd``."""
    with os.scandir(fd) as entries:
        return [entry.name for entry in entries]


def display_name(name: str) -> str:
    """A file name as the wire shows it: bytes that are not UTF-8 become U+FFFD."""
    return os.fsencode(name).decode("utf-8", "replace")


def read_directory(resolver: Resolver, path: str) -> list[DirectoryEntry]:
    """``fs/readDirectory``: immediate children, symlinks described by their targets."""
    with resolver.locate(path) as location:
        fd = open_directory(resolver, location)
        real = location.path
    try:
        entries = []
        for name in list_names(fd):
            kind = _entry_kind(resolver, fd, real, name)
            if kind is not None:
                entries.append(
                    DirectoryEntry(
                        file_name=display_name(name), is_directory=kind[0], is_file=kind[1]
                    )
                )
        return entries
    finally:
        os.close(fd)


def _entry_kind(resolver: Resolver, fd: int, directory: str, name: str) -> tuple[bool, bool] | None:
    """(is directory, is file) of a child, following symlinks; None hides it (dangling too)."""
    child = posixpath.join(directory, name)
    if resolver.visibility(child) is Visibility.INVISIBLE:
        return None
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            st = _target_stat(resolver, child)
    except OSError:
        return None
    return stat.S_ISDIR(st.st_mode), stat.S_ISREG(st.st_mode)


def _target_stat(resolver: Resolver, path: str) -> os.stat_result:
    with resolver.locate(path) as target:
        resolver.require_visible(target.path)
        return os.stat(target.name, dir_fd=target.dir_fd, follow_symlinks=False)
