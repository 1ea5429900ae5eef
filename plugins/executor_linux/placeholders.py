"""Host-side placeholders for protected paths that do not exist yet.

A mount needs an existing mount point, so a read-only ``.codex`` (or a denied path) that does
not exist inside a writable root is created on the host as an empty directory for as long as
some sandboxed command needs it, then removed if it is still empty. The reference does the
same; while a command runs, such empty directories are visible on the host.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable

__all__ = ["Placeholders"]

log = logging.getLogger("executor.sandbox.linux")


class Placeholders:
    """Reference-counted placeholder directories."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._created: dict[str, list[str]] = {}
        self._lock = threading.Lock()

    def acquire(self, paths: Iterable[str]) -> Callable[[], None]:
        """Make sure each path exists; returns the release callback."""
        held: list[str] = []
        try:
            for path in paths:
                self._acquire_one(path)
                held.append(path)
        except BaseException:
            self._release(held)
            raise
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._release(held)

        return release

    def _acquire_one(self, path: str) -> None:
        with self._lock:
            count = self._counts.get(path, 0)
            if count == 0:
                self._created[path] = _make_dirs(path)
            self._counts[path] = count + 1

    def _release(self, paths: list[str]) -> None:
        with self._lock:
            for path in paths:
                self._counts[path] -= 1
                if self._counts[path]:
                    continue
                del self._counts[path]
                for created in reversed(self._created.pop(path, [])):
                    try:
                        os.rmdir(created)
                    except OSError as exc:
                        log.info("placeholder %s left as it is: %s", created, exc.strerror)
                        break


def _make_dirs(path: str) -> list[str]:
    """Create ``path`` and missing parents; return what was created, outermost first."""
    missing: list[str] = []
    current = path
    while not os.path.lexists(current):
        missing.append(current)
        current = os.path.dirname(current)
    created: list[str] = []
    for directory in reversed(missing):
        os.mkdir(directory, 0o755)
        created.append(directory)
    return created
