"""Killing whole trees (executor/proctree.py over executor/spawn/treekill.py)."""

from __future__ import annotations

import signal
import subprocess
import time

import psutil
import pytest

from executor import proctree
from executor.spawn import treekill
from tests.support.processes import gone


def test_the_tree_is_read_before_anything_is_signalled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A walk of a dying tree can miss a child read under a parent already reaped (the race
    that once let a setsid escapee survive process/terminate under load), so the first walk
    happens while nothing has been signalled yet."""
    events: list[str] = []

    def walk(_root: int, _table: treekill.Table) -> list[int]:
        events.append("walk")
        return []

    def kill_group(_pgid: int, _signum: int) -> bool:
        events.append("kill")
        return True

    monkeypatch.setattr(treekill, "descendants", walk)
    monkeypatch.setattr(treekill, "signal_group", kill_group)
    proctree.signal_tree(12345, 67890)
    assert events[:2] == ["walk", "kill"]


def test_the_group_and_an_escapee_below_the_supervisor_all_die() -> None:
    # The shell stands in for the supervisor and leads the group; one sleeper stays in the
    # group, the other escapes it with setsid but stays below the shell.
    script = "setsid sleep 1013 & sleep 1014 & echo ready; wait"
    root = subprocess.Popen(
        ["/bin/sh", "-c", script], stdout=subprocess.PIPE, start_new_session=True
    )
    assert root.stdout is not None
    assert root.stdout.readline() == b"ready\n"
    tree: list[int] = []
    for _ in range(100):  # until both sleepers have exec'd
        tree = [child.pid for child in psutil.Process(root.pid).children(recursive=True)]
        if len(tree) == 2:
            break
        time.sleep(0.01)
    assert len(tree) == 2
    proctree.signal_tree(root.pid, root.pid)
    assert root.wait(timeout=10) == -signal.SIGKILL
    assert all(gone(pid) for pid in tree)
    root.stdout.close()


def test_descendants_follow_their_parents_and_leave_out_reused_pids() -> None:
    # 10 is the root; 11 and 12 are its children, 13 a grandchild. 14 names 12 as its parent
    # but started before the root: 12's pid was reused while /proc was read, so neither 14
    # nor its child 15 is below the root. 20 is unrelated.
    table = {
        1: (0, 0),
        10: (1, 100),
        11: (10, 101),
        12: (10, 102),
        13: (11, 103),
        14: (12, 50),
        15: (14, 104),
        20: (1, 105),
    }
    found = treekill.descendants(10, table)
    assert sorted(found) == [11, 12, 13]
    assert found.index(11) < found.index(13)
    assert treekill.descendants(99, table) == []  # the root is gone


def test_a_cycle_in_the_table_ends_the_walk() -> None:
    # Pid reuse during the read can make the root its own descendant's child.
    table = {10: (12, 100), 11: (10, 101), 12: (11, 102)}
    assert sorted(treekill.descendants(10, table)) == [11, 12]


def _sleepers(script: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    """A shell leading its own group (the supervisor's stand-in) and its two sleepers."""
    root = subprocess.Popen(
        ["/bin/sh", "-c", script], stdout=subprocess.PIPE, start_new_session=True
    )
    assert root.stdout is not None
    assert root.stdout.readline() == b"ready\n"
    tree: list[int] = []
    for _ in range(500):  # until both sleepers have exec'd
        tree = [child.pid for child in psutil.Process(root.pid).children(recursive=True)]
        if len(tree) == 2:
            break
        time.sleep(0.01)
    assert len(tree) == 2
    return root, tree


def test_a_sigkill_walks_again_until_two_walks_find_nothing_new() -> None:
    """A child forked after the first walk is caught by a later one: here the first table
    misses one sleeper, as if it had been forked just after /proc was read."""
    root, (first, late) = _sleepers("sleep 1015 & sleep 1016 & echo ready; wait")
    tables: list[int] = []

    def table() -> treekill.Table:
        read = treekill.proc_table()
        if not tables:
            del read[late]
        tables.append(len(read))
        return read

    try:
        hit = treekill.signal_tree(None, root.pid, table=table)
        assert gone(first) and gone(late)
        assert hit == 2  # the first sleeper, then the late one (the root is not its own)
        assert len(tables) == 4  # the first walk, the one that found `late`, two quiet ones
    finally:
        treekill.signal_tree(root.pid, root.pid)
        root.wait(timeout=10)
        assert root.stdout is not None
        root.stdout.close()


def test_other_signals_walk_once() -> None:
    root, tree = _sleepers("sleep 1017 & sleep 1018 & echo ready; wait")
    walks: list[None] = []

    def table() -> treekill.Table:
        walks.append(None)
        return treekill.proc_table()

    try:
        assert treekill.signal_tree(root.pid, root.pid, signal.SIGTERM, table=table) == 3
        assert len(walks) == 1
        assert all(gone(pid) for pid in tree)
    finally:
        treekill.signal_tree(root.pid, root.pid)
        root.wait(timeout=10)
        assert root.stdout is not None
        root.stdout.close()


def test_the_table_without_proc_finds_the_same_tree() -> None:
    """The daemon's table where there is no /proc (psutil; macOS) against the /proc one."""
    root, tree = _sleepers("sleep 1019 & setsid sleep 1020 & echo ready; wait")
    try:
        from_proc = treekill.descendants(root.pid, treekill.proc_table())
        from_psutil = treekill.descendants(root.pid, proctree._psutil_table())
        assert sorted(from_proc) == sorted(from_psutil) == sorted(tree)
    finally:
        proctree.signal_tree(root.pid, root.pid)
        root.wait(timeout=10)
        assert root.stdout is not None
        root.stdout.close()
