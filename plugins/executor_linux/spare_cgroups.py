"""The one command cgroup set a daemon makes ahead for its next launch (daemon side).

Creating a command's cgroups (a directory per hierarchy and its limit files, ``cgroups.py``)
costs a launch ~0.35-0.8 ms. In the daemon (a running event loop) one spare set is made
ahead, on the loop shortly after a launch took the last one, for the same limits: the next
launch takes it. Not on the loop's next turn: that turn comes while the launch is still
starting, and the launcher's processes are mostly woken on the daemon's CPU, so they would
wait for it (~0.4 ms of a sandboxed /bin/true on the test VM). A spare was never joined by
anything; it is checked empty when taken (else removed, not used), never reused after a
command (``release`` removes a command's cgroups), and removed when the daemon exits.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from executor.sandbox import ResourceLimits

if TYPE_CHECKING:
    from executor_linux.cgroups import CommandCgroup

__all__ = ["SpareCgroups"]

#: How long after a launch took the spare the next one is made (seconds): long enough for
#: a launch to be under way, short enough for the next command of an agent to find it.
REFILL_DELAY = 0.01

log = logging.getLogger("executor.sandbox.linux")


class SpareCgroups:
    """At most one command cgroup set made ahead, and the limits it was made for."""

    def __init__(self, make: Callable[[ResourceLimits], CommandCgroup | None]) -> None:
        #: Creates a command's cgroups (``OSError`` on failure, None: none needed).
        self._make = make
        self._lock = threading.Lock()
        #: The limits the spare was made for, and the spare (never joined by anything).
        self._spare: tuple[ResourceLimits, CommandCgroup] | None = None
        self._refilling = False
        atexit.register(self.drop)

    def take(self, limits: ResourceLimits) -> CommandCgroup | None:
        """The spare if it was made for ``limits`` and nothing joined it, else None (a spare
        that does not qualify is removed)."""
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is None:
            return None
        made_for, group = spare
        if made_for == limits and all(_unused(join) for join in group.joins):
            return group
        group.release()  # other limits now, or something joined it: never handed out
        return None

    def refill_later(self, limits: ResourceLimits) -> None:
        """Make the next launch's spare on the event loop, once this launch is under way
        (``REFILL_DELAY`` from now)."""
        if self._refilling:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no daemon loop (executor run, tests): every launch creates its own
        self._refilling = True
        loop.call_later(REFILL_DELAY, self._refill, limits)

    def _refill(self, limits: ResourceLimits) -> None:
        self._refilling = False
        with self._lock:
            if self._spare is not None and self._spare[0] == limits:
                return
        try:
            group = self._make(limits)
        except OSError as exc:
            log.debug("no spare command cgroup made ahead: %s", exc)
            return
        if group is None:
            return
        with self._lock:
            previous, self._spare = self._spare, (limits, group)
        if previous is not None:
            previous[1].release()

    def drop(self) -> None:
        """Remove the spare cgroups (at exit)."""
        with self._lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            spare[1].release()


def _unused(join: str) -> bool:
    """Whether no process has joined the cgroup whose join file is ``join`` (its
    ``tasks``/``cgroup.procs`` lists none); False when it cannot be read."""
    try:
        with open(join, "rb") as handle:
            return not handle.read(1)
    except OSError:
        return False
