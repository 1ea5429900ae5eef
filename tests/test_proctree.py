"""Killing whole trees (executor/proctree.py)."""

from __future__ import annotations

import signal
import subprocess
import time

import psutil
import pytest

from executor import proctree
from tests.support.processes import gone


def test_the_tree_is_read_before_anything_is_signalled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A walk of a dying tree can miss a child read under a parent already reaped (the race
    that once let a setsid escapee survive process/terminate under load), so the first walk
    happens while nothing has been signalled yet."""
    events: list[str] = []

    def walk(_supervisor: int) -> list[int]:
        events.append("walk")
        return []

    def kill_group(_pgid: int, _signum: int) -> bool:
        events.append("kill")
        return True

    monkeypatch.setattr(proctree, "_descendants", walk)
    monkeypatch.setattr(proctree, "signal_group", kill_group)
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
