"""Signalling whole process trees, including descendants that left the process group.

Every command runs under its own supervisor, a child subreaper (see ``spawn/zygote.py``), so
descendants that escape the command's process group with ``setsid`` or a double fork stay in
the supervisor's subtree. Killing a tree therefore means: the command's process group, plus
every descendant of the supervisor, repeated until nothing new appears.
"""

from __future__ import annotations

import os
import signal

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

    With SIGKILL the walk repeats a few rounds, so that children forked while the first
    round ran are caught too.
    """
    hit = 1 if signal_group(pgid, signum) else 0
    if supervisor is None:
        return hit
    seen: set[int] = set()
    for _ in range(_ROUNDS if signum == signal.SIGKILL else 1):
        fresh = [pid for pid in _descendants(supervisor) if pid not in seen]
        if not fresh:
            break
        for pid in fresh:
            seen.add(pid)
            try:
                os.kill(pid, signum)
                hit += 1
            except (ProcessLookupError, PermissionError):
                continue
    return hit
