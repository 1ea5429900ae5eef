"""Supervisors kept for reuse (``launcher.c``: "supervisors kept for reuse"): the native
launcher's supervisor of a plain launch takes the next plain launch instead of exiting.

A kept supervisor must be indistinguishable from a fresh one to the next command, must never
let the daemon's kill of an ended launch reach the next command, and must not outlive the
launcher.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from executor import proctree
from executor.spawn.spawner import Spawner, native_launcher, native_slots
from tests.spawn.test_launchers import command, launch, run, sh
from tests.support.enforcement import skip_unless
from tests.support.processes import eventually, gone


@pytest.fixture
def spawner() -> Iterator[Spawner]:
    skip_unless(native_launcher() is not None, "the native launcher is not built")
    assert native_slots() > 0, "the native launcher offers no kept supervisors"
    created = Spawner()
    try:
        yield created
    finally:
        created.close()


async def _run_to_end(spawner: Spawner, script: str) -> tuple[int, int, str]:
    """Launch ``sh -c script`` and wait for its end: (pid, supervisor, stdout)."""
    started, captured = launch(spawner, sh(script))
    pid, supervisor = await started.started
    await started.gone
    return pid, supervisor, captured.read()


def test_one_supervisor_takes_launch_after_launch(spawner: Spawner) -> None:
    async def scenario() -> list[int]:
        return [(await _run_to_end(spawner, "true"))[1] for _ in range(3)]

    supervisors = run(scenario)
    assert len(set(supervisors)) == 1
    assert psutil.Process(supervisors[0]).name() == "executor-sup"


def test_between_launches_it_holds_nothing_of_the_last_command(
    spawner: Spawner, tmp_path: Path
) -> None:
    """No descriptor but the launcher's stdio and its socket to the launcher, "/" as its
    working directory (a kept supervisor must not hold a workspace busy), no child."""
    workdir = tmp_path / "workdir"
    workdir.mkdir()

    async def scenario() -> int:
        started, captured = launch(spawner, command("/bin/pwd", cwd=str(workdir)))
        _, supervisor = await started.started
        await started.gone
        assert captured.read() == f"{workdir}\n"
        return supervisor

    assert_holds_nothing(run(scenario))


def assert_holds_nothing(supervisor: int) -> None:
    """A kept supervisor between launches: cwd "/", no child, the launcher's stdio and one
    socket (its own to the launcher: not another slot's, not a command's descriptor)."""
    kept = psutil.Process(supervisor)
    assert eventually(lambda: kept.cwd() == "/")  # its chdir comes right after the end
    assert kept.children() == []

    def descriptors(pid: int) -> dict[int, str]:
        return {
            int(fd): os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")
        }

    own = descriptors(supervisor)
    stdio = {fd: target for fd, target in descriptors(kept.ppid()).items() if fd < 3}
    assert {fd: target for fd, target in own.items() if fd < 3} == stdio
    rest = [target for fd, target in own.items() if fd >= 3]
    assert len(rest) == 1 and rest[0].startswith("socket:"), own


def test_commands_at_once_get_supervisors_of_their_own(spawner: Spawner) -> None:
    async def scenario() -> set[int]:
        launched = [launch(spawner, sh("sleep 0.3")) for _ in range(3)]
        supervisors = {(await started.started)[1] for started, _ in launched}
        for started, captured in launched:
            await started.gone
            captured.read()
        return supervisors

    supervisors = run(scenario)
    assert len(supervisors) == 3
    for supervisor in supervisors:
        assert_holds_nothing(supervisor)


def test_a_kill_of_an_ended_launch_never_reaches_the_next_command(spawner: Spawner) -> None:
    """The daemon's kill path (``ManagedProcess.kill_tree``) signals the supervisor's
    descendants only while the launch has not ended; the slot is reused only after that end
    was read. So the next command on the same supervisor is out of reach of the last one's
    kill."""

    async def scenario() -> tuple[int, int, bool]:
        first, first_out = launch(spawner, sh("true"))
        _, supervisor = await first.started
        await first.gone
        first_out.read()
        second, second_out = launch(spawner, sh("echo ready; exec sleep 30"))
        pid, second_supervisor = await second.started
        assert os.read(second_out.out_r, 64) == b"ready\n"
        # What kill_tree does for the first launch: nothing, its end has been read.
        assert first.gone.done()
        still_running = psutil.Process(pid).is_running()
        os.kill(pid, signal.SIGKILL)
        await second.gone
        second_out.read()
        return supervisor, second_supervisor, still_running

    supervisor, second_supervisor, still_running = run(scenario)
    assert supervisor == second_supervisor
    assert still_running


def test_a_kept_supervisor_that_was_killed_is_replaced(spawner: Spawner) -> None:
    async def scenario() -> tuple[int, int, str]:
        _, supervisor, _ = await _run_to_end(spawner, "true")
        os.kill(supervisor, signal.SIGKILL)
        for _ in range(200):
            if gone(supervisor):
                break
            await asyncio.sleep(0.01)
        _, replacement, out = await _run_to_end(spawner, "echo again")
        return supervisor, replacement, out

    supervisor, replacement, out = run(scenario)
    assert out == "again\n"
    assert replacement != supervisor


def test_a_tree_ended_by_sigterm_ends_its_supervisor_too(spawner: Spawner) -> None:
    """SIGTERM to a supervisor is the launcher's death (its parent-death signal): it kills the
    tree and exits instead of waiting for another launch; the next launch gets a new one."""

    async def scenario() -> tuple[int, int, str]:
        started, captured = launch(spawner, sh("echo ready; exec sleep 30"))
        _, supervisor = await started.started
        assert os.read(captured.out_r, 64) == b"ready\n"
        os.kill(supervisor, signal.SIGTERM)
        await started.gone
        captured.read()
        _, replacement, out = await _run_to_end(spawner, "echo next")
        return supervisor, replacement, out

    supervisor, replacement, out = run(scenario)
    assert gone(supervisor)
    assert (replacement != supervisor, out) == (True, "next\n")


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_idle_kept_supervisors_die_with_the_launcher(spawner: Spawner, how: int) -> None:
    async def scenario() -> int:
        return (await _run_to_end(spawner, "true"))[1]

    supervisor = run(scenario)
    assert psutil.Process(supervisor).status() != psutil.STATUS_ZOMBIE
    launcher = psutil.Process(supervisor).ppid()
    os.kill(launcher, how)
    assert gone(supervisor)


def test_a_descendant_left_behind_keeps_its_supervisor_from_the_next_command(
    spawner: Spawner,
) -> None:
    """A command that exits leaving a descendant running (as a hostile one would, to share a
    supervisor with the next command): the slot is not handed out again until that tree is
    gone, so the next command gets a supervisor of its own and starts at once, and the
    daemon's kill of the first tree does not reach it."""

    async def scenario() -> tuple[int, int, bool]:
        first, first_out = launch(spawner, sh("sleep 30 >/dev/null 2>&1 & echo $!"))
        first_pid, first_supervisor = await first.started
        await first.exited
        sleeper = int(os.read(first_out.out_r, 64))
        assert not first.gone.done()
        second, second_out = launch(spawner, sh("echo ready; exec sleep 30"))
        pid, second_supervisor = await asyncio.wait_for(second.started, 5)
        assert os.read(second_out.out_r, 64) == b"ready\n"
        proctree.signal_tree(first_pid, first_supervisor)  # what kill_tree does for the first
        await first.gone
        first_out.read()
        spared = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        os.kill(pid, signal.SIGKILL)
        await second.gone
        second_out.read()
        assert gone(sleeper)
        return first_supervisor, second_supervisor, spared

    first_supervisor, second_supervisor, spared = run(scenario)
    assert first_supervisor != second_supervisor
    assert spared
