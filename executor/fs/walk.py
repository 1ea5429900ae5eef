"""``fs/walk``: a breadth-first listing of a tree, bounded, with per-directory errors.

Semantics follow the reference (protocol.md §5.17 plus our observations, docs/filesystem.md):
children of the root are depth 0; names sort by their bytes; regular files are ``file``,
directories ``directory``; symlinks to files, dangling symlinks and special files are never
listed, directory symlinks only with ``followDirectorySymlinks`` (and descended into only if
their target was not seen before). ``maxEntries`` counts every name looked at, listed or not,
except a symlink whose target does not resolve (dangling, looping; the reference skips those
uncounted);
``maxDirectories`` counts directories read, the root included. A directory that cannot be read
becomes an ``errors`` entry; only the root's failure fails the request.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections import deque
from dataclasses import dataclass, field
from typing import Final

from executor.errors import InvalidRequest, os_error_message
from executor.fs.directories import list_names, open_directory
from executor.fs.resolve import Location, Resolver
from executor.fs.view import Visibility
from executor.protocol.fs_messages import WalkEntry, WalkError, WalkKind, WalkOptions, WalkResult
from executor.protocol.paths import to_uri

__all__ = ["MAX_DEPTH", "MAX_DIRECTORIES", "MAX_ENTRIES", "check_options", "walk"]

#: The reference's upper bounds on the three limits.
MAX_DEPTH: Final = 64
MAX_DIRECTORIES: Final = 10_000
MAX_ENTRIES: Final = 50_000


def check_options(options: WalkOptions) -> None:
    """Refuse limits of zero or above the maxima (both ``-32600``, zero checked first)."""
    if options.max_directories == 0 or options.max_entries == 0:
        raise InvalidRequest("filesystem walk limits must be greater than zero")
    if (
        options.max_depth > MAX_DEPTH
        or options.max_directories > MAX_DIRECTORIES
        or options.max_entries > MAX_ENTRIES
    ):
        raise InvalidRequest(
            "filesystem walk limits exceed maximums: "
            f"depth={MAX_DEPTH}, directories={MAX_DIRECTORIES}, entries={MAX_ENTRIES}"
        )


@dataclass(slots=True)
class _Pending:
    """A directory waiting to be read: its path as listed, its real path, its children's depth."""

    shown: str
    real: str
    depth: int


@dataclass(slots=True)
class _Walk:
    resolver: Resolver
    options: WalkOptions
    entries: list[WalkEntry] = field(default_factory=list)
    errors: list[WalkError] = field(default_factory=list)
    queue: deque[_Pending] = field(default_factory=deque)
    seen: set[tuple[int, int]] = field(default_factory=set)
    read_count: int = 0
    looked_at: int = 0
    truncated: bool = False

    def run(self, root_fd: int, root: _Pending) -> None:
        self._read(root_fd, root)
        while self.queue and not self.truncated:
            if self.read_count >= self.options.max_directories:
                self.truncated = True
                return
            directory = self.queue.popleft()
            try:
                fd = self._open(directory.real)
            except OSError as exc:
                self.read_count += 1
                self.errors.append(
                    WalkError(path=to_uri(directory.shown), message=os_error_message(exc))
                )
                continue
            self._read(fd, directory)

    def _open(self, real: str) -> int:
        # The real path has no symlink in it; one swapped in since is refused, not followed.
        fd, found = self.resolver.open_dir(real, follow=False)
        with Location(fd, ".", found) as location:
            return open_directory(self.resolver, location)

    def _read(self, fd: int, directory: _Pending) -> None:
        self.read_count += 1
        try:
            names = sorted(list_names(fd), key=os.fsencode)
            for name in names:
                if (
                    self.resolver.visibility(posixpath.join(directory.real, name))
                    is Visibility.INVISIBLE
                ):
                    continue
                found = self._look(fd, directory, name)
                if found is None:
                    continue  # nothing there to count (the reference's rule too)
                if self.looked_at >= self.options.max_entries:
                    self.truncated = True
                    return
                self.looked_at += 1
                self._list(directory, *found)
        finally:
            os.close(fd)

    def _look(
        self, fd: int, directory: _Pending, name: str
    ) -> tuple[str, str, os.stat_result, bool] | None:
        """``name``'s shown and real path, what it is (a symlink's target) and whether it is a
        symlink; None if it vanished or is a symlink whose target does not resolve in the
        view (dangling, looping, invisible): such a name is not counted against
        ``maxEntries``, as in the reference."""
        shown = posixpath.join(directory.shown, name)
        real = posixpath.join(directory.real, name)
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode):
                return shown, real, st, False
            real, st = self._target(real)
        except OSError:
            return None
        return shown, real, st, True

    def _list(
        self, directory: _Pending, shown: str, real: str, st: os.stat_result, link: bool
    ) -> None:
        if link and not (self.options.follow_directory_symlinks and stat.S_ISDIR(st.st_mode)):
            return  # symlinks to files are never listed, to directories only when followed
        if stat.S_ISREG(st.st_mode):
            self.entries.append(WalkEntry(path=to_uri(shown), kind=WalkKind.FILE))
        elif stat.S_ISDIR(st.st_mode):
            self.entries.append(WalkEntry(path=to_uri(shown), kind=WalkKind.DIRECTORY))
            self._enqueue(_Pending(shown, real, directory.depth + 1), st, directory.depth)

    def _target(self, path: str) -> tuple[str, os.stat_result]:
        with self.resolver.locate(path) as target:
            self.resolver.require_visible(target.path)
            st = os.stat(target.name, dir_fd=target.dir_fd, follow_symlinks=False)
            return target.path, st

    def _enqueue(self, pending: _Pending, st: os.stat_result, depth: int) -> None:
        identity = (st.st_dev, st.st_ino)
        if depth >= self.options.max_depth or identity in self.seen:
            return
        self.seen.add(identity)
        self.queue.append(pending)


def walk(resolver: Resolver, path: str, options: WalkOptions) -> WalkResult:
    """``fs/walk`` from ``path`` (limits already checked)."""
    with resolver.locate(path, follow_final=options.follow_directory_symlinks) as location:
        resolver.require_visible(location.path)
        st = os.stat(location.name, dir_fd=location.dir_fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            return WalkResult(entries=(), errors=(), truncated=False)  # a file, or a symlink
        fd = open_directory(resolver, location)
        real = location.path
    state = _Walk(resolver, options)
    state.seen.add((st.st_dev, st.st_ino))
    state.run(fd, _Pending(path, real, 0))
    return WalkResult(
        entries=tuple(state.entries), errors=tuple(state.errors), truncated=state.truncated
    )
