"""Placeholders shared by several executor processes (``/tmp/.git`` for every command that
may write ``/tmp``): none is removed while another process still needs it, none of the user's
own directories is ever removed, and the last user leaves nothing behind."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import time
from pathlib import Path

import pytest
from executor_linux.placeholders import Placeholders

from tests.executor_linux.conftest import linux_sandbox_available
from tests.support.daemon import executor_command
from tests.support.enforcement import skip_unless


def _hold(lock_dir: str, path: str, acquired: object, release: object) -> None:
    """In another process: acquire ``path``, report, wait for the word, release."""
    placeholders = Placeholders(lambda: lock_dir)
    done = placeholders.acquire([path])
    acquired.set()  # type: ignore[attr-defined]
    release.wait(10)  # type: ignore[attr-defined]
    done()


def test_the_last_process_removes_what_an_executor_created(tmp_path: Path) -> None:
    locks, target = str(tmp_path / "locks"), str(tmp_path / "ws" / ".codex")
    (tmp_path / "ws").mkdir()
    context = multiprocessing.get_context("spawn")
    acquired, release = context.Event(), context.Event()
    other = context.Process(target=_hold, args=(locks, target, acquired, release))
    other.start()
    try:
        assert acquired.wait(10)
        mine = Placeholders(lambda: locks, grace=0).acquire([target])
        assert os.path.isdir(target)
        release.set()
        other.join(10)
        assert other.exitcode == 0
        assert os.path.isdir(target), "still in use here: the other process left it"
        mine()
        assert not os.path.exists(target), "the last user removed it"
    finally:
        release.set()
        other.join(10)


def test_a_directory_the_user_made_is_never_removed(tmp_path: Path) -> None:
    mine = tmp_path / "ws" / ".codex"
    mine.mkdir(parents=True)
    release = Placeholders(lambda: str(tmp_path / "locks"), grace=0).acquire([str(mine)])
    release()
    assert mine.is_dir()


def test_a_forged_record_removes_nothing_else(tmp_path: Path) -> None:
    """The record may only name the placeholder and its ancestors."""
    locks = tmp_path / "locks"
    victim = tmp_path / "victim"
    victim.mkdir()
    placeholders = Placeholders(lambda: str(locks), grace=0)
    target = str(tmp_path / "ws" / ".codex")
    release = placeholders.acquire([target])
    (locks / "record").write_text(f"{victim}\n{target}\n")
    release()
    assert victim.is_dir() and not os.path.exists(target)


def test_an_unused_placeholder_lingers_briefly_and_is_reused(tmp_path: Path) -> None:
    """Back-to-back commands reuse a placeholder; it goes once none needed it for `grace`."""
    target = tmp_path / "ws" / ".codex"
    (tmp_path / "ws").mkdir()
    placeholders = Placeholders(lambda: str(tmp_path / "locks"), grace=0.3)
    placeholders.acquire([str(target)])()
    assert target.is_dir(), "lingers"
    inode = target.stat().st_ino
    release = placeholders.acquire([str(target)])
    assert target.stat().st_ino == inode, "reused, not made again"
    release()
    deadline = time.monotonic() + 5
    while target.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not target.exists()
    placeholders.acquire([str(target)])()
    placeholders.flush()
    assert not target.exists(), "flush removes what lingers at once"


@pytest.mark.enforcement
def test_concurrent_commands_share_placeholders_safely(tmp_path: Path) -> None:
    """Six `executor run` processes at once, each its own workspace in one writable parent:
    every one starts, every one finds the shared `.git` placeholders protected, and none is
    left afterwards."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    parent = tmp_path.resolve()
    runs = []
    for k in range(6):
        ws = parent / f"ws{k}"
        ws.mkdir()
        script = f"sleep 0.{k}; mkdir {parent}/.git/x 2>/dev/null || echo protected"
        argv = ["run", "--profile", "workspace", "--workspace", str(ws), "--no-tty", "--"]
        runs.append(
            subprocess.Popen(
                [*executor_command(), *argv, "/bin/sh", "-c", script],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for run in runs:
        out, err = run.communicate(timeout=60)
        assert run.returncode == 0 and out.strip() == "protected", err
    assert sorted(p.name for p in parent.iterdir()) == [f"ws{k}" for k in range(6)]
