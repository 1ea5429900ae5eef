"""Signalling whole process trees, including descendants that left the process group.

Every command runs under its own supervisor, a child subreaper (see ``spawn/zygote.py``), so
descendants that escape the command's process group with ``setsid`` or a double fork stay in
the supervisor's subtree. Killing a tree therefore means: the command's process group, plus
every descendant of the supervisor, repeated until nothing new appears. The one definition
of that is ``spawn/treekill.py``, shared with the supervisors; this module gives it the
daemon's process table.
"""

from __future__ import annotations

import signal
import sys

import psutil

from executor.spawn import treekill
from executor.spawn.treekill import signal_group

__all__ = ["signal_group", "signal_tree"]


def _psutil_table() -> dict[int, tuple[int, float]]:
    """The process table where there is no /proc (macOS)."""
    table: dict[int, tuple[int, float]] = {}
    for process in psutil.process_iter(["ppid", "create_time"]):
        parent, started = process.info["ppid"], process.info["create_time"]
        if parent is not None and started is not None:  # None: access denied
            table[process.pid] = (parent, started)
    return table


_TABLE = treekill.proc_table if sys.platform.startswith("linux") else _psutil_table


def signal_tree(pgid: int, supervisor: int | None, signum: int = signal.SIGKILL) -> int:
    """Signal the group and every descendant of ``supervisor``; returns how many were hit
    (see ``treekill.signal_tree``: the tree is read before anything is signalled, and a
    SIGKILL repeats the walk until nothing new appears)."""
    return treekill.signal_tree(pgid, supervisor, signum, table=_TABLE)
