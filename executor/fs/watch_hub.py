"""The daemon's one inotify descriptor, shared by every ``fs/watchMissing`` watch.

A directory watched by several watches is one kernel watch (inotify gives the same inode the
same descriptor; ``IN_MASK_ADD`` merges the masks), counted here by who holds it. The
descriptor is opened for the first watch and closed with the last, so an idle daemon holds
no inotify instance at all. Everything runs on the event loop: events are dispatched from
``loop.add_reader``; adding and removing kernel watches are single system calls.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Final, Protocol

from executor.fs import inotify

__all__ = ["HubWatch", "WatchHub"]

log = logging.getLogger("executor.fs.watch")

_ADD_FLAGS: Final = inotify.IN_ONLYDIR | inotify.IN_DONT_FOLLOW | 0x20000000  # IN_MASK_ADD
# Events that mean the watched directory itself is gone (or its filesystem is).
_GONE: Final = inotify.IN_IGNORED


class HubWatch(Protocol):
    """What the hub needs of a watch: the paths that count, and a way to tell it."""

    @property
    def triggers(self) -> frozenset[str]:
        """Paths whose events fire the watch."""

    def trigger(self) -> None:
        """Something relevant changed."""


class _Directory:
    """One kernel watch and who holds it, under which path(s)."""

    __slots__ = ("holders",)

    def __init__(self) -> None:
        #: Each watch holding this descriptor -> the path(s) it knows the directory by (a
        #: bind mount can make two paths one inode).
        self.holders: dict[HubWatch, list[str]] = {}


class WatchHub:
    """Kernel watches on directories, shared, with a daemon-wide cap on how many."""

    def __init__(self, max_directories: int) -> None:
        self.max_directories = max_directories
        self._inotify: inotify.Inotify | None = None
        self._directories: dict[int, _Directory] = {}
        self._held: dict[HubWatch, list[int]] = {}

    @property
    def descriptor(self) -> int | None:
        """The inotify descriptor while any watch exists (tests check it is released)."""
        return self._inotify.fd if self._inotify is not None else None

    def __len__(self) -> int:
        """Kernel watches held now."""
        return len(self._directories)

    def acquire(self, watch: HubWatch, directories: dict[str, int]) -> bool:
        """Watch ``directories`` (path -> event mask) for ``watch``; False if refused.

        Refused: inotify is unavailable, a directory vanished or changed into something else
        since it was examined, or the kernel's or our own limit on watches is reached. What
        was added is released again.
        """
        if not inotify.AVAILABLE:
            return False
        if self._inotify is None:
            try:
                self._inotify = inotify.Inotify(asyncio.get_running_loop(), self._dispatch)
            except OSError as exc:
                log.warning("fs/watchMissing: cannot open inotify: %s", exc)
                return False
        held = self._held.setdefault(watch, [])
        try:
            for path, mask in directories.items():
                wd = self._inotify.add_watch(path, mask | _ADD_FLAGS)
                entry = self._directories.get(wd)
                if entry is None:
                    if len(self._directories) >= self.max_directories:
                        self._inotify.rm_watch(wd)
                        log.warning("fs/watchMissing: %d directories watched", len(self))
                        raise OSError("too many watched directories")
                    entry = self._directories[wd] = _Directory()
                paths = entry.holders.setdefault(watch, [])
                if not paths:
                    held.append(wd)
                paths.append(path)
        except OSError as exc:
            log.info("fs/watchMissing: not watching: %s", exc)
            self.release(watch)
            return False
        return True

    def release(self, watch: HubWatch) -> None:
        """Drop ``watch``'s kernel watches that nobody else holds; close an idle descriptor."""
        for wd in self._held.pop(watch, ()):
            entry = self._directories.get(wd)
            if entry is None:
                continue
            entry.holders.pop(watch, None)
            if not entry.holders:
                del self._directories[wd]
                if self._inotify is not None:
                    try:
                        self._inotify.rm_watch(wd)
                    except OSError:  # pragma: no cover - nothing else can go wrong here
                        log.exception("inotify_rm_watch failed")
        if not self._held and self._inotify is not None:
            self._inotify.close()
            self._inotify = None

    def _dispatch(self, events: list[inotify.Event]) -> None:
        for event in events:
            if event.mask & inotify.IN_Q_OVERFLOW:
                # Events were lost; any watch may have missed its change.
                for watch in list(self._held):
                    watch.trigger()
                continue
            entry = self._directories.get(event.wd)
            if entry is None:
                continue
            if event.mask & _GONE:
                # The kernel dropped the watch (its DELETE_SELF or UNMOUNT came first).
                del self._directories[event.wd]
                for watch in entry.holders:
                    held = self._held.get(watch)
                    if held is not None and event.wd in held:
                        held.remove(event.wd)
                continue
            name = os.fsdecode(event.name)
            for watch, paths in list(entry.holders.items()):
                if any(_child(path, name) in watch.triggers for path in paths):
                    watch.trigger()


def _child(directory: str, name: str) -> str:
    """The path an event names: the directory itself, or an entry in it."""
    if not name:
        return directory
    return directory + name if directory == "/" else directory + "/" + name
