"""A ``HostView`` describing an imaginary host, so materialization tests are exact."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable

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
        self.minimal_paths = ("/bin", "/etc", "/lib", "/usr")
        self.hidden_paths = hidden
        self.cwd = cwd
        self.home = home

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

    def glob_matches(self, base: str, regex: str, max_depth: int) -> list[str]:
        """Known paths under ``base`` within ``max_depth`` levels that match."""
        pattern = re.compile(regex)
        found = []
        for path in sorted(self.dirs | self.files):
            if path == base or not path.startswith(base.rstrip("/") + "/"):
                continue
            depth = path[len(base.rstrip("/")) + 1 :].count("/") + 1
            if depth <= max_depth and pattern.match(path):
                found.append(path)
        return found
