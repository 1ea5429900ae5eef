"""A ``HostView`` describing an imaginary host, so materialization tests are exact."""

from __future__ import annotations

import posixpath
import re
import time
from collections.abc import Iterable

from executor.sandbox.globscan import GlobScan, ScanLimits, Truncation
from executor.sandbox.rules import PathKind


class FakeHost:
    """Directories and files that "exist", plus ``.git`` pointer files."""

    def __init__(
        self,
        dirs: Iterable[str] = (),
        files: Iterable[str] = (),
        gitdirs: dict[str, str] | None = None,
        hidden: tuple[str, ...] = ("/run/executor",),
        cwd: str = "/srv/executor",
        home: str = "/home/u",
        symlinks: dict[str, str] | None = None,
        shared: Iterable[str] = ("/tmp",),
    ) -> None:
        self.dirs = {"/"}
        for start in (*dirs, *hidden, "/tmp", "/bin", "/etc", "/lib", "/usr"):
            directory = start
            while directory != "/":
                self.dirs.add(directory)
                directory = posixpath.dirname(directory)
        self.files = set(files) | set((gitdirs or {}).keys())
        for path in self.files:
            parent = posixpath.dirname(path)
            while parent != "/":
                self.dirs.add(parent)
                parent = posixpath.dirname(parent)
        self.gitdirs = gitdirs or {}
        #: link path -> absolute target; ``realpath`` follows them.
        self.symlinks = symlinks or {}
        self.shared = set(shared)
        self.minimal_paths: tuple[str, ...] = ("/bin", "/etc", "/lib", "/usr")
        self.hidden_paths = hidden
        self.cwd = cwd
        self.home: str | None = home

    def kind(self, path: str) -> PathKind:
        """What is at ``path`` (symlinks followed)."""
        path = self.realpath(path)
        if path in self.dirs:
            return PathKind.DIRECTORY
        if path in self.files:
            return PathKind.FILE
        return PathKind.MISSING

    def realpath(self, path: str) -> str:
        """``path`` with the host's symlinks followed (they hold absolute targets)."""
        resolved = "/"
        for part in posixpath.normpath(path).split("/"):
            if not part:
                continue
            candidate = posixpath.join(resolved, part)
            for _ in range(40):
                if candidate not in self.symlinks:
                    break
                candidate = posixpath.normpath(self.symlinks[candidate])
            resolved = candidate
        return resolved

    def is_symlink(self, path: str) -> bool:
        """Whether ``path`` is one of the host's symlinks."""
        return posixpath.normpath(path) in self.symlinks

    def is_shared_directory(self, path: str) -> bool:
        """The directories named ``shared`` (``/tmp`` by default)."""
        return path in self.shared

    def gitdir_pointer(self, path: str) -> str | None:
        """The git dir a ``.git`` file names."""
        return self.gitdirs.get(path)

    def glob_matches(self, base: str, regex: str, limits: ScanLimits) -> GlobScan:
        """Known paths under ``base`` within ``limits.max_depth`` levels that match."""
        prefix = base.rstrip("/") + "/"
        below = [
            (path, path[len(prefix) :].count("/") + 1)
            for path in self.dirs | self.files
            if path != base and path.startswith(prefix)
        ]
        return bounded_scan(below, regex, limits)


def bounded_scan(below: Iterable[tuple[str, int]], regex: str, limits: ScanLimits) -> GlobScan:
    """What ``LocalHost.glob_matches`` reports for a tree of ``(path, depth below base)``:
    level by level, not entering matches, stopping at the first bound of ``limits`` hit."""
    if limits.deadline is not None and time.monotonic() > limits.deadline:
        return GlobScan((), 0, Truncation.TIME)
    pattern = re.compile(regex)
    found: list[str] = []
    entries = 0
    for path, depth in sorted(below, key=lambda item: (item[1], item[0])):
        if any(path.startswith(match + "/") for match in found):
            continue  # a matching directory is not entered
        if depth > limits.max_depth:
            return GlobScan(tuple(found), entries, Truncation.DEPTH)
        entries += 1
        if entries > limits.max_entries:
            return GlobScan(tuple(found), entries, Truncation.ENTRIES)
        if pattern.match(path):
            found.append(path)
            if len(found) > limits.max_matches:
                return GlobScan(tuple(found), entries, Truncation.MATCHES)
    return GlobScan(tuple(found), entries)
