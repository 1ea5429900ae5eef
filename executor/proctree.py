"""Signalling whole process trees, including descendants that left the process group.

Every command runs under its own supervisor, a child subreaper (see ``spawn/zygote.py``), so
descendants that escape the command's process group with ``setsid`` or a double fork stay in
the supervisor's subtree. Killing a tree therefore means: the command's process group, plus
every descendant of the supervisor, repeated until nothing new appears.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable

import psutil

__all__ = ["signal_group", "signal_tree"]

_ROUNDS = 8


def signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to process group ``pgid``; False if the group is gone."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True


def _descendants(supervisor: int) -> list[int]:
    try:
        return [child.pid for child in psutil.Process(supervisor).children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def signal_tree(pgid: int, supervisor: int | None, signum: int = signal.SIGKILL) -> int:
    """Signal the group and every descendant of ``supervisor``; returns how many were hit.

    The tree is read *before* anything is signalled: /proc is read one process at a time,
    and while members die a child can be read under a parent that is gone by the time the
    parent is read (before its reparenting to the supervisor shows), so a walk of a dying
    tree can miss it. With SIGKILL, further walks catch children forked meanwhile; the walk
    stops after two rounds in a row find nothing new.
    """
    seen: set[int] = set(_descendants(supervisor)) if supervisor is not None else set()
    hit = 1 if signal_group(pgid, signum) else 0
    hit += _signal_all(seen, signum)
    if supervisor is None or signum != signal.SIGKILL:
        return hit
    quiet = 0
    for _ in range(_ROUNDS):
        fresh = [pid for pid in _descendants(supervisor) if pid not in seen]
        if not fresh:
            quiet += 1
            if quiet == 2:
                break
            continue
        quiet = 0
        seen.update(fresh)
        hit += _signal_all(fresh, signum)
    return hit


def _signal_all(pids: Iterable[int], signum: int) -> int:
    hit = 0
    for pid in pids:
        try:
            os.kill(pid, signum)
            hit += 1
        except (ProcessLookupError, PermissionError):
            continue
    return hit
