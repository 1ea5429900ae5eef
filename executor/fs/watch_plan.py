"""What one ``fs/watchMissing`` call watches: its directories and the paths that trigger it.

The reference (v0.171.0) walks every path from ``/`` one component at a time without
following symlinks. Every component that exists must be a real directory (a symlink, a file,
a FIFO on the way makes the call answer ``watching: false``); each of them is watched. A
``missing`` path must not exist itself (not even as a dangling symlink); ``present`` must
exist and not be a symlink. An event then counts when the path it names is one of these
paths or an ancestor of one — a missing path or its first missing ancestor appearing, an
ancestor renamed, removed or ``chmod``-ed, ``present`` changed or removed.

``make_plan`` only reads (``lstat``), so it runs in a worker thread.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from executor.fs import inotify

__all__ = ["BASE_MASK", "Plan", "make_plan", "prefixes"]

#: What changes a watched directory reports: entries created, removed, renamed, and metadata
#: (``chmod``, ``utime``) of the directory or an entry. Opens, reads and closes do not count
#: (the reference ignores them), so they are not even queued.
BASE_MASK: Final = (
    inotify.IN_ATTRIB
    | inotify.IN_CREATE
    | inotify.IN_DELETE
    | inotify.IN_MOVED_FROM
    | inotify.IN_MOVED_TO
    | inotify.IN_DELETE_SELF
    | inotify.IN_MOVE_SELF
)
#: The directory holding a ``present`` file also reports writes to it (the reference fires).
PRESENT_PARENT_MASK: Final = BASE_MASK | inotify.IN_MODIFY


@dataclass(frozen=True, slots=True)
class Plan:
    """The directories to watch (with their event masks) and the paths whose events count."""

    directories: dict[str, int]
    triggers: frozenset[str]


class _Unwatchable(Exception):
    """The call answers ``watching: false``."""


def prefixes(path: str) -> list[str]:
    """``/a/b`` -> ``["/", "/a", "/a/b"]`` (``path`` is absolute and normalized)."""
    out = ["/"]
    if path != "/":
        current = ""
        for part in path[1:].split("/"):
            current += "/" + part
            out.append(current)
    return out


def make_plan(missing: Iterable[str], present: str | None, max_directories: int) -> Plan | None:
    """What to watch for ``missing`` and ``present``, or None when the answer is false.

    None means: a missing path exists, ``present`` does not (or is a symlink), a component on
    the way is not a real directory, a path cannot be examined, or more than
    ``max_directories`` directories would be watched.
    """
    directories: dict[str, int] = {}
    triggers: set[str] = set()
    try:
        for path in missing:
            chain = prefixes(path)
            triggers.update(chain)
            for directory in _existing_directories(chain, last_must_exist=False):
                directories.setdefault(directory, BASE_MASK)
        if present is not None:
            chain = prefixes(present)
            triggers.update(chain)
            mode = _present_mode(chain)
            watched = chain[:-1] or chain  # "/" has no parent: it reports its own changes
            for directory in watched:
                directories.setdefault(directory, BASE_MASK)
            if not stat.S_ISDIR(mode):
                directories[watched[-1]] = PRESENT_PARENT_MASK
    except _Unwatchable:
        return None
    if len(directories) > max_directories:
        return None
    return Plan(directories, frozenset(triggers))


def _lstat_mode(path: str) -> int | None:
    """``lstat``'s mode, None if the path does not exist; other failures are unwatchable."""
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise _Unwatchable from exc


def _existing_directories(chain: list[str], *, last_must_exist: bool) -> list[str]:
    """The existing leading components of ``chain``, all real directories."""
    found: list[str] = []
    for index, path in enumerate(chain):
        mode = _lstat_mode(path)
        if mode is None:
            if last_must_exist or index == 0:
                raise _Unwatchable
            return found
        if index == len(chain) - 1 and not last_must_exist:
            raise _Unwatchable  # the missing path exists
        if not stat.S_ISDIR(mode):
            raise _Unwatchable
        found.append(path)
    return found


def _present_mode(chain: list[str]) -> int:
    """``present``'s mode; its ancestors must be real directories and it must not be a link."""
    if len(chain) > 1:
        _existing_directories(chain[:-1], last_must_exist=True)
    mode = _lstat_mode(chain[-1])
    if mode is None or stat.S_ISLNK(mode):
        raise _Unwatchable
    return mode
