"""The real ``HostView``: what materialization learns about this machine's filesystem."""

from __future__ import annotations

import functools
import os
import posixpath
import re
import stat
import sys
import time
from collections.abc import Iterable
from typing import Any, Final

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
#: ``_read_off``: the method itself must be asked.
_ASK: Final = object()
#: The methods whose answers ``LocalHost.answers_again`` may read off an ``lstat``.
_METHODS: Final = frozenset(
    {"kind", "realpath", "is_symlink", "is_shared_directory", "gitdir_pointer"}
)
#: What they answer for a path that cannot be ``lstat``-ed (``stat`` fails on it too).
_UNREACHABLE: Final[dict[str, Any]] = {
    "kind": PathKind.MISSING,
    "is_shared_directory": False,
    "gitdir_pointer": None,
}


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

    def answers_again(self, questions: Iterable[tuple[str, tuple[Any, ...], Any]]) -> bool:
        """Whether each question (a method's name, its arguments, an answer) gets its answer
        again now (``memo.py`` asks before it reuses a rule set), exactly as asking each
        method would tell, with fewer system calls: every path is ``lstat``-ed at most once
        here, and what a method would learn from a path that is not a symlink (whether it
        is one, its kind, whether it is shared, that ``realpath`` keeps it, that it is no
        ``.git`` file) is read off that ``lstat``. Whatever needs more (a symlink on the
        way, a file to read, a path that is not absolute and normal) is asked of the method.
        Overridden methods are always asked."""
        if type(self) is not LocalHost or not _METHODS.isdisjoint(vars(self)):
            return all(getattr(self, name)(*args) == answer for name, args, answer in questions)
        seen: dict[str, os.stat_result | None] = {}
        for name, args, answer in questions:
            found = _read_off(name, args, seen)
            if found is _ASK:
                found = getattr(self, name)(*args)
            if found != answer:
                return False
        return True

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


def _lstat(path: str, seen: dict[str, os.stat_result | None]) -> os.stat_result | None:
    """``os.lstat(path)`` (None when it fails), once per ``seen``."""
    try:
        return seen[path]
    except KeyError:
        pass
    try:
        found: os.stat_result | None = os.lstat(path)
    except (OSError, ValueError):
        found = None
    seen[path] = found
    return found


@functools.lru_cache(maxsize=1024)
def _prefixes(path: str) -> tuple[str, ...] | None:
    """``/a/b/c`` -> ``/a``, ``/a/b``, ``/a/b/c``: what ``realpath`` ``lstat``s, in order;
    None unless ``path`` is absolute and normal (only then does ``realpath`` walk exactly
    its prefixes, and ``stat`` differ from ``lstat`` only when the path is a symlink).
    Remembered: the memo checks the same paths launch after launch."""
    if (
        not path.startswith("/")
        or path.startswith("//")
        or "\0" in path
        or posixpath.normpath(path) != path
    ):
        return None
    parts = path.split("/")
    return tuple("/".join(parts[:end]) for end in range(2, len(parts) + 1)) if path != "/" else ()


def _read_off(name: str, args: tuple[Any, ...], seen: dict[str, os.stat_result | None]) -> Any:
    """What ``LocalHost.<name>(*args)`` answers, read off ``lstat``s, or ``_ASK``."""
    if len(args) != 1 or type(args[0]) is not str:
        return _ASK
    path: str = args[0]
    if name == "is_symlink":  # os.path.islink: one lstat of the same string
        found = _lstat(path, seen)
        return found is not None and stat.S_ISLNK(found.st_mode)
    prefixes = _prefixes(path)
    if prefixes is None:
        return _ASK
    if name == "realpath":
        # realpath lstats each prefix and changes the path only at a symlink (a prefix
        # that cannot be lstat-ed is kept as it is, like one that is no symlink).
        for prefix in prefixes:
            found = _lstat(prefix, seen)
            if found is not None and stat.S_ISLNK(found.st_mode):
                return _ASK
        return path
    found = _lstat(path, seen)
    if found is None:
        # lstat and stat resolve the same parents and look up the same last name: when
        # lstat fails, so does stat (and os.path.isfile).
        return _UNREACHABLE.get(name, _ASK)
    mode = found.st_mode
    if stat.S_ISLNK(mode):
        return _ASK
    if name == "kind":
        if stat.S_ISDIR(mode):
            return PathKind.DIRECTORY
        return PathKind.FILE if stat.S_ISREG(mode) else PathKind.OTHER
    if name == "is_shared_directory":
        return bool(mode & (stat.S_IWOTH | stat.S_ISVTX))
    if name == "gitdir_pointer" and not stat.S_ISREG(mode):
        return None
    return _ASK
