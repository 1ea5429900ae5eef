"""The real ``HostView``: what materialization learns about this machine's filesystem."""

from __future__ import annotations

import os
import re
import stat
import sys
import time
from typing import Final

from executor.sandbox.globscan import GlobScan, ScanLimits, Truncation
from executor.sandbox.rules import PathKind
from executor.sandbox.statedir import ensure_state_directory, state_directory

__all__ = ["LocalHost", "ensure_state_directory", "minimal_paths", "state_directory"]

_LINUX_MINIMAL: Final = ("/bin", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/sbin", "/usr")
_MACOS_MINIMAL: Final = (
    "/bin",
    "/sbin",
    "/usr",
    "/etc",
    "/private/etc",
    "/System",
    "/Library/Apple",
    "/Library/Preferences",
    "/opt/homebrew/lib",
    "/usr/local/lib",
    "/dev",
)
_GITDIR: Final = re.compile(r"^gitdir:\s*(.+?)\s*$", re.MULTILINE)


def minimal_paths(platform: str = sys.platform) -> tuple[str, ...]:
    """Directories ``:minimal`` stands for on ``platform`` (those that exist)."""
    candidates = _MACOS_MINIMAL if platform == "darwin" else _LINUX_MINIMAL
    return tuple(path for path in candidates if os.path.exists(path))


class LocalHost:
    """``HostView`` of the machine this code runs on."""

    def __init__(self, hidden_paths: tuple[str, ...] = (), cwd: str | None = None) -> None:
        self.minimal_paths = minimal_paths()
        self.hidden_paths = hidden_paths
        self.cwd = cwd or os.getcwd()
        self.home: str | None = os.environ.get("HOME") or os.path.expanduser("~")

    def kind(self, path: str) -> PathKind:
        """What is at ``path`` (symlinks followed)."""
        try:
            st = os.stat(path)
        except OSError:
            return PathKind.MISSING
        if stat.S_ISDIR(st.st_mode):
            return PathKind.DIRECTORY
        if stat.S_ISREG(st.st_mode):
            return PathKind.FILE
        return PathKind.OTHER

    def realpath(self, path: str) -> str:
        """Symlinks resolved."""
        return os.path.realpath(path)

    def is_symlink(self, path: str) -> bool:
        """Whether ``path`` itself is a symlink."""
        return os.path.islink(path)

    def is_shared_directory(self, path: str) -> bool:
        """World-writable or sticky: other users (or other sandboxes) may add entries."""
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return False
        return bool(mode & (stat.S_IWOTH | stat.S_ISVTX))

    def gitdir_pointer(self, path: str) -> str | None:
        """The git dir a ``.git`` file names, if ``path`` is such a file."""
        if not os.path.isfile(path):
            return None
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                match = _GITDIR.search(handle.read(4096))
        except OSError:
            return None
        if match is None:
            return None
        target = os.path.join(os.path.dirname(path), match.group(1))
        return os.path.realpath(target)

    def glob_matches(self, base: str, regex: str, limits: ScanLimits) -> GlobScan:
        """Existing paths under ``base`` (``limits.max_depth`` directory levels) matching
        ``regex``, level by level; a matching directory is not entered (its match hides it).
        Stops, and says which bound stopped it, once a bound of ``limits`` is reached."""
        pattern = re.compile(regex)
        found: list[str] = []
        entries = 0
        level = [base]
        for _ in range(limits.max_depth):
            following: list[str] = []
            for directory in level:
                if limits.deadline is not None and time.monotonic() > limits.deadline:
                    return GlobScan(tuple(found), entries, Truncation.TIME)
                try:
                    with os.scandir(directory) as listing:
                        for entry in listing:
                            entries += 1
                            if entries > limits.max_entries:
                                return GlobScan(tuple(found), entries, Truncation.ENTRIES)
                            if pattern.match(entry.path):
                                found.append(entry.path)
                                if len(found) > limits.max_matches:
                                    return GlobScan(tuple(found), entries, Truncation.MATCHES)
                            elif entry.is_dir(follow_symlinks=False):
                                following.append(entry.path)
                except OSError:
                    # Unlistable (some /proc directories fail in readdir, not opendir): the
                    # executor's user cannot list it, and a sandbox has less than that.
                    continue
            level = following
            if not level:
                return GlobScan(tuple(found), entries)
        return GlobScan(tuple(found), entries, Truncation.DEPTH)
