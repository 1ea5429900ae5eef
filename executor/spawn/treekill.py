"""Killing a process tree: the one Python definition, for the daemon and the supervisors.

STDLIB ONLY. The daemon uses it through ``executor.proctree``; the launcher server
(``zygote.py``, run as ``python -I -S``) loads this file by path, and each Python supervisor
calls ``signal_tree`` from its SIGTERM handler. ``launcher.c`` has the same algorithm in C
for the native supervisors.

Descendants come from one read of every ``/proc/<pid>/stat`` (parent pid and start time),
not from ``/proc/<pid>/task/<tid>/children``: that file exists only with
``CONFIG_PROC_CHILDREN``, lists each thread's children separately, and the kernel documents
it as imprecise unless the tasks are stopped or frozen (children that exit right after being
printed can hide the rest of the subtree).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterable, Mapping

__all__ = ["Table", "descendants", "proc_table", "signal_group", "signal_tree"]

#: ``pid -> (parent pid, start time)`` of every process; start times compare within a table.
Table = Mapping[int, tuple[int, float]]

#: Walks after the first, at most, when the kill is SIGKILL.
_ROUNDS = 8


def proc_table() -> dict[int, tuple[int, float]]:
    """Every process's parent and start time (clock ticks since boot) from /proc; empty
    where there is no /proc."""
    table: dict[int, tuple[int, float]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
            # The command name may hold spaces and parentheses: fields start after the last
            # ')'. There, 0 is the state, 1 the parent, 19 the start time.
            fields = stat[stat.rfind(b")") + 2 :].split()
            table[int(entry)] = (int(fields[1]), int(fields[19]))
        except (OSError, IndexError, ValueError):  # gone meanwhile, or unreadable
            continue
    return table


def descendants(root: int, table: Table) -> list[int]:
    """Every descendant of ``root`` in ``table``, each after its parent; [] if ``root`` is gone.

    A process that started before ``root`` cannot descend from it: its parent's pid was
    reused while the table was read, so it and its subtree are left out. The table is one
    snapshot, so a descendant that has died since it was read still links its children in.
    """
    if root not in table:
        return []
    started = table[root][1]
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found: list[int] = []
    visited = {root}  # a table read during pid reuse can hold a cycle
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child in visited or table[child][1] < started:
                continue
            visited.add(child)
            found.append(child)
            stack.append(child)
    return found


def signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to process group ``pgid``; False if the group is gone."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def signal_tree(
    pgid: int | None,
    root: int | None,
    signum: int = signal.SIGKILL,
    *,
    table: Callable[[], Table] = proc_table,
) -> int:
    """Signal group ``pgid`` and every descendant of ``root``; returns how many were hit.

    The tree is read *before* anything is signalled: /proc is read one process at a time,
    and while members die a child can be read under a parent that is gone by the time the
    parent is read (before its reparenting to ``root`` shows), so a walk of a dying tree can
    miss it. With SIGKILL, further walks catch children forked meanwhile; the walk stops
    after two rounds in a row find nothing new. Only SIGKILL repeats: any other signal may
    be handled, and children forked while handling it (to clean up, say) are not hit.
    """
    seen = descendants(root, table()) if root is not None else []
    hit = 1 if pgid is not None and signal_group(pgid, signum) else 0
    hit += _signal_all(seen, signum)
    if root is None or signum != signal.SIGKILL:
        return hit
    known = set(seen)
    quiet = 0
    for _ in range(_ROUNDS):
        fresh = [pid for pid in descendants(root, table()) if pid not in known]
        if not fresh:
            quiet += 1
            if quiet == 2:
                break
            continue
        quiet = 0
        known.update(fresh)
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
