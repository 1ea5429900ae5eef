"""Placeholders shared by several executor processes (``/tmp/.git`` for every command that
may write ``/tmp``): none is removed while another process still needs it, none of the user's
own directories is ever removed, and the last user leaves nothing behind."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import fcntl
import multiprocessing
import os
import subprocess
import time
from pathlib import Path

import pytest
from executor_linux.backend import LinuxBackend
from executor_linux.placeholders import Placeholders

from executor.process import exit_code_from_status
from executor.protocol.intent import Access
from executor.sandbox.api import Command, HostInfo
from executor.sandbox.rules import PathKind, PathRule, RuleSet
from executor.spawn.spawner import Spawner
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


def test_an_exclusive_lock_held_on_purpose_fails_the_acquire_soon(tmp_path: Path) -> None:
    """Whoever can open a placeholder directory can hold an exclusive ``flock`` on it (a
    sandboxed command that sees it, another user): the acquire then fails within about half
    a second, naming the directory, instead of stalling every launch that needs it; once the
    lock is let go, the same place is usable again."""
    locks, target = str(tmp_path / "locks"), tmp_path / "ws" / ".codex"
    target.mkdir(parents=True)
    placeholders = Placeholders(lambda: locks, grace=0)
    hostile = os.open(target, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(hostile, fcntl.LOCK_EX)
        started = time.monotonic()
        with pytest.raises(OSError, match=str(target)) as refused:
            placeholders.acquire([str(target)])
        assert refused.value.errno == errno.EBUSY
        assert time.monotonic() - started < 3.0
    finally:
        os.close(hostile)
    placeholders.acquire([str(target)])()
    assert target.is_dir(), "the user's own directory stays"


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


def test_a_placeholder_in_use_outlives_another_registrys_release(tmp_path: Path) -> None:
    """Executors of another user (or another state directory) keep another registry, and
    ``/tmp/.git`` is everyone's: a directory one registry made and another one uses stays
    while it is used, and its maker removes it once nobody uses it."""
    target = tmp_path / "ws" / ".codex"
    (tmp_path / "ws").mkdir()
    theirs = Placeholders(lambda: str(tmp_path / "their-locks"), grace=0)
    mine = Placeholders(lambda: str(tmp_path / "my-locks"), grace=0)
    theirs.acquire([str(target)])()  # made and removed: the maker's own use
    assert not target.exists()
    release_theirs = theirs.acquire([str(target)])
    release_mine = mine.acquire([str(target)])
    release_theirs()
    assert target.is_dir(), "still used through the other registry"
    release_mine()
    assert target.is_dir(), "not made by this registry: not removed by it"
    theirs.acquire([str(target)])()
    assert not target.exists(), "its maker removed it once nobody used it"


def test_two_clients_in_one_process_do_not_release_each_others_holds(tmp_path: Path) -> None:
    """Record locks belong to the process: one client's release must not end another's
    hold (two backends in one process: tests, an embedding, two managers)."""
    locks, target = str(tmp_path / "locks"), tmp_path / "ws" / ".codex"
    (tmp_path / "ws").mkdir()
    first = Placeholders(lambda: locks, grace=0)
    second = Placeholders(lambda: locks, grace=0)
    release_first = first.acquire([str(target)])
    release_second = second.acquire([str(target)])
    release_first()
    assert target.is_dir(), "the second client still uses it"
    release_second()
    assert not target.exists()


def test_a_created_parent_that_is_itself_a_placeholder_in_use_stays(tmp_path: Path) -> None:
    """Releasing ``a/b`` removes the parent ``a`` it created, unless ``a`` is in use."""
    locks, ws = str(tmp_path / "locks"), tmp_path / "ws"
    ws.mkdir()
    placeholders = Placeholders(lambda: locks, grace=0)
    release_inner = placeholders.acquire([str(ws / "a" / "b")])
    release_outer = placeholders.acquire([str(ws / "a")])
    release_inner()
    assert (ws / "a").is_dir(), "still used as a placeholder of its own"
    release_outer()
    assert list(ws.iterdir()) == []


@pytest.mark.enforcement
def test_a_launch_mounts_over_a_placeholder_another_registry_made(tmp_path: Path) -> None:
    """The backend plans a read-only ``.codex`` over a directory that an executor with
    another registry made; that one releases it between the plan and the launch. The
    launch must still mount over it (before, it failed: ``mounts: ENOENT``)."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    ws = tmp_path / "ws"
    ws.mkdir()
    target = ws / ".codex"
    theirs = Placeholders(lambda: str(tmp_path / "their-locks"), grace=0)
    release_theirs = theirs.acquire([str(target)])
    rules = RuleSet(
        filesystem_restricted=True,
        rules=(
            PathRule("/", Access.READ),
            PathRule(str(ws), Access.WRITE, kind=PathKind.DIRECTORY),
            PathRule(str(target), Access.READ, kind=PathKind.DIRECTORY),
        ),
    )
    backend = LinuxBackend(state_dir=str(tmp_path / "state"))
    assert backend.probe(HostInfo.current()).available
    command = Command(
        executable="/bin/sh",
        argv=("sh", "-c", f"mkdir {target}/x 2>/dev/null && exit 3; exit 0"),
        env={},
        cwd="/",
        tty=False,
    )
    plan = backend.prepare(rules, command)
    release_theirs()

    async def launch() -> int:
        spawner = Spawner()
        try:
            request = dataclasses.replace(command, setup=plan.setup)
            started = spawner.launch(request, (0, 1, 2))
            await started.started
            return exit_code_from_status(await started.exited)
        finally:
            spawner.close()

    try:
        assert asyncio.run(launch()) == 0, "mounted over it, read-only"
    finally:
        assert plan.release is not None
        plan.release()
        backend.placeholders.flush()
    assert target.is_dir(), "made by the other registry: left to it"
    theirs.acquire([str(target)])()
    assert not target.exists()
