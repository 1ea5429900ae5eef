"""The launcher contract, for both launcher servers: the native one and ``zygote.py`` (and
the latter's fork path, which macOS uses for every command).

Each test starts real commands through a ``Spawner`` and reads the supervisor's reports:
started (pid and supervisor), the exit status the moment the command exits, and the end once
the command and every descendant are gone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import pty
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import psutil
import pytest

from executor import proctree
from executor.sandbox import ChildSetup, Command
from executor.spawn.spawner import Launch, LaunchFailed, Spawner, native_launcher
from tests.support.enforcement import skip_unless
from tests.support.processes import gone

T = TypeVar("T")
BASE_ENV = {"PATH": "/usr/bin:/bin"}


PASS_THROUGH = ChildSetup(
    module_path=str(Path(__file__).with_name("passthrough_setup.py")), function="run", payload=None
)


class ForkingSpawner(Spawner):
    """Every launch through the launcher's fork path (the one macOS uses for all commands)."""

    def launch(self, request: Command, stdio: tuple[int, int, int]) -> Launch:
        return super().launch(dataclasses.replace(request, setup=PASS_THROUGH), stdio)


@pytest.fixture(params=["native", "python", "python-fork"])
def spawner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Spawner]:
    if request.param == "native":
        skip_unless(native_launcher() is not None, "the native launcher is not built")
    else:
        monkeypatch.setenv("EXECUTOR_NATIVE_LAUNCHER", "off")
    created = ForkingSpawner() if request.param == "python-fork" else Spawner()
    assert created.supervisor == request.param.removesuffix("-fork")
    try:
        yield created
    finally:
        created.close()


def run(step: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(step(), 30))


def command(*argv: str, env: dict[str, str] | None = None, cwd: str = "/") -> Command:
    return Command(
        executable=argv[0], argv=argv, env=BASE_ENV if env is None else env, cwd=cwd, tty=False
    )


def sh(script: str, **kwargs: str) -> Command:
    return command("/bin/sh", "-c", script, **kwargs)  # type: ignore[arg-type]


class Captured:
    """A command's stdout and stderr pipes, readable once the command's tree is gone."""

    def __init__(self) -> None:
        self.out_r, self.out_w = os.pipe()
        self.err_r, self.err_w = os.pipe()
        self.stdin = os.open(os.devnull, os.O_RDONLY)

    def stdio(self) -> tuple[int, int, int]:
        return (self.stdin, self.out_w, self.err_w)

    def handed_over(self) -> None:
        """The launcher has its copies: close ours so EOF comes when the command's end."""
        for fd in (self.stdin, self.out_w, self.err_w):
            os.close(fd)

    def read(self) -> str:
        data = b""
        while chunk := os.read(self.out_r, 65536):
            data += chunk
        os.close(self.out_r)
        os.close(self.err_r)
        return data.decode()


def launch(spawner: Spawner, request: Command) -> tuple[Launch, Captured]:
    captured = Captured()
    started = spawner.launch(request, captured.stdio())
    captured.handed_over()
    return started, captured


def test_reports_start_exit_status_and_end(spawner: Spawner) -> None:
    async def scenario() -> tuple[int, int, int, str]:
        started, captured = launch(spawner, sh("echo $$; exit 3"))
        pid, supervisor = await started.started
        status = await started.exited
        await started.gone
        return pid, supervisor, status, captured.read()

    pid, supervisor, status, out = run(scenario)
    assert int(out) == pid
    assert supervisor not in (pid, os.getpid())
    assert os.waitstatus_to_exitcode(status) == 3


def test_signal_death_is_reported_as_such(spawner: Spawner) -> None:
    async def scenario() -> int:
        started, captured = launch(spawner, sh("kill -TERM $$"))
        status = await started.exited
        await started.gone
        captured.read()
        return status

    assert os.waitstatus_to_exitcode(run(scenario)) == -signal.SIGTERM


def test_exit_comes_when_the_command_exits_and_the_end_when_its_tree_is_gone(
    spawner: Spawner,
) -> None:
    async def scenario() -> tuple[bool, str]:
        started, captured = launch(spawner, sh("(sleep 0.4; echo late) & exit 0"))
        await started.exited
        tree_still_running = not started.gone.done()
        await started.gone
        return tree_still_running, captured.read()

    tree_still_running, out = run(scenario)
    assert tree_still_running
    assert out == "late\n"


def test_a_missing_program_fails_the_exec_stage(spawner: Spawner) -> None:
    async def scenario() -> LaunchFailed:
        started, captured = launch(spawner, command("/nonexistent/program"))
        with pytest.raises(LaunchFailed) as failure:
            await started.started
        await started.gone
        captured.read()
        return failure.value

    failure = run(scenario)
    assert (failure.stage, failure.error) == ("exec", errno.ENOENT)


def test_a_missing_cwd_fails_the_chdir_stage(spawner: Spawner) -> None:
    async def scenario() -> LaunchFailed:
        started, captured = launch(spawner, command("/bin/true", cwd="/nonexistent/dir"))
        with pytest.raises(LaunchFailed) as failure:
            await started.started
        captured.read()
        return failure.value

    failure = run(scenario)
    assert (failure.stage, failure.error) == ("chdir", errno.ENOENT)


def test_the_command_gets_exactly_its_argv_env_and_cwd(spawner: Spawner, tmp_path: str) -> None:
    request = Command(
        executable="/bin/sh",
        argv=("custom-arg0", "-c", 'echo "$0|$ONLY|$(pwd)"; env | sort'),
        env={"ONLY": "one value", "PATH": "/usr/bin:/bin"},
        cwd=str(tmp_path),
        tty=False,
    )

    async def scenario() -> str:
        started, captured = launch(spawner, request)
        await started.gone
        return captured.read()

    first, *env = run(scenario).splitlines()
    assert first == f"custom-arg0|one value|{tmp_path}"
    assert [line for line in env if not line.startswith(("PWD=", "SHLVL=", "_="))] == [
        "ONLY=one value",
        "PATH=/usr/bin:/bin",
    ]


def test_the_command_leads_a_new_session_with_default_signals(spawner: Spawner) -> None:
    # The command itself reads its own state (no shell in between: a shell blocks every
    # signal around its forks, which a reader could catch it doing).
    request = command("/bin/cat", "/proc/self/stat", "/proc/self/status")

    async def scenario() -> tuple[int, str]:
        started, captured = launch(spawner, request)
        pid, _ = await started.started
        await started.gone
        return pid, captured.read()

    pid, out = run(scenario)
    stat, *status = out.splitlines()
    _state, _parent, group, session = stat[stat.rindex(")") + 2 :].split()[:4]
    assert (int(group), int(session)) == (pid, pid)
    fields = dict(line.split(":\t", 1) for line in status if ":\t" in line)
    assert int(fields["SigBlk"], 16) == 0
    # The launchers ignore SIGCHLD, SIGINT and SIGPIPE themselves; the command must not. Only
    # glibc's two internal signals (32 and 33) may be: its posix_spawn child sets them to
    # SIG_IGN, which survives execve, and glibc programs install their own handlers anyway.
    glibc_internal = 1 << 31 | 1 << 32
    assert int(fields["SigIgn"], 16) & ~glibc_internal == 0


def command_signals(spawner: Spawner) -> tuple[int, int]:
    """(SigIgn, SigBlk) of a command launched by ``spawner``, read by the command itself."""

    async def scenario() -> str:
        started, captured = launch(spawner, command("/bin/cat", "/proc/self/status"))
        await started.gone
        return captured.read()

    fields = dict(line.split(":\t", 1) for line in run(scenario).splitlines() if ":\t" in line)
    return int(fields["SigIgn"], 16), int(fields["SigBlk"], 16)


def test_signals_the_daemon_ignored_are_default_in_the_command(spawner: Spawner) -> None:
    # Under nohup (or a service manager that ignores some) the daemon, and so the launcher
    # server it starts, inherit ignored signals; an ignored disposition survives execve. The
    # native launcher resets them when it starts, its supervisors the ones it sets itself.
    passed_on = (signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT, signal.SIGUSR1, signal.SIGALRM)
    previous = {number: signal.signal(number, signal.SIG_IGN) for number in passed_on}
    try:
        ignored, blocked = command_signals(spawner)  # the launch starts the launcher server
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    glibc_internal = 1 << 31 | 1 << 32
    assert (ignored & ~glibc_internal, blocked) == (0, 0)

    # The counterpart: a command can still be made to ignore one (a disposition the command
    # sets itself is its own).
    async def scenario() -> str:
        started, captured = launch(spawner, sh("trap '' HUP; exec cat /proc/self/status"))
        await started.gone
        return captured.read()

    status = dict(line.split(":\t", 1) for line in run(scenario).splitlines() if ":\t" in line)
    assert int(status["SigIgn"], 16) & 1 << (signal.SIGHUP - 1)


def test_a_terminal_becomes_the_controlling_terminal(spawner: Spawner) -> None:
    controller, terminal = pty.openpty()
    request = Command(
        executable="/bin/sh",
        argv=("sh", "-c", "tty; exec 3</dev/tty && echo has-controlling-terminal"),
        env=BASE_ENV,
        cwd="/",
        tty=True,
    )

    async def scenario() -> str:
        started = spawner.launch(request, (terminal, terminal, terminal))
        os.close(terminal)
        await started.gone
        data = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the terminal's last holder is gone
                break
            if not chunk:
                break
            data += chunk
        os.close(controller)
        return data.decode()

    lines = run(scenario).split()
    assert lines[0].startswith("/dev/pts/")
    assert lines[1] == "has-controlling-terminal"


def test_descendants_that_escape_with_setsid_stay_under_the_supervisor(spawner: Spawner) -> None:
    # Double fork plus setsid: the escapee is orphaned into a new session; the subreaper
    # supervisor adopts it, and SIGTERM to the supervisor kills it.
    script = "(setsid sleep 30 & echo $!) ; exit 0"

    async def scenario() -> tuple[int, int, bool]:
        started, captured = launch(spawner, sh(script))
        _, supervisor = await started.started
        await started.exited
        escapee = int(os.read(captured.out_r, 64))
        for _ in range(100):
            if psutil.Process(escapee).ppid() == supervisor:
                break
            await asyncio.sleep(0.01)
        adopted = psutil.Process(escapee).ppid()
        alive_after_exit = not started.gone.done()
        os.kill(supervisor, signal.SIGTERM)
        await started.gone
        captured.read()
        return escapee, adopted, alive_after_exit

    escapee, adopted, alive_after_exit = run(scenario)
    assert alive_after_exit
    assert adopted != 1
    assert gone(escapee)


#: A command whose children outlive it when only it is killed: both sleepers ignore SIGHUP
#: and SIGTERM, and one has left the command's session and group.
STUBBORN_TREE = 'trap "" HUP TERM; sleep 300 & setsid sleep 300 & echo ready; wait'


async def _stubborn_tree(spawner: Spawner) -> tuple[Launch, Captured, int, list[int]]:
    """Launch ``STUBBORN_TREE``; its launch, pipes, supervisor and both sleepers' pids."""
    started, captured = launch(spawner, sh(STUBBORN_TREE))
    _, supervisor = await started.started
    assert os.read(captured.out_r, 64) == b"ready\n"
    for _ in range(500):  # until both sleepers have exec'd
        sleepers = _sleepers_below(supervisor)
        if len(sleepers) == 2:
            return started, captured, supervisor, sleepers
        await asyncio.sleep(0.01)
    raise AssertionError(f"the sleepers did not start: {_sleepers_below(supervisor)}")


def _sleepers_below(supervisor: int) -> list[int]:
    found = []
    for process in psutil.Process(supervisor).children(recursive=True):
        try:
            if process.name() == "sleep":
                found.append(process.pid)
        except psutil.NoSuchProcess:
            continue
    return found


def test_sigterm_to_the_launcher_server_kills_every_tree(spawner: Spawner) -> None:
    # What the daemon's Spawner.close() sends; each supervisor then gets SIGTERM as its
    # parent-death signal and kills everything below it.
    async def scenario() -> list[int]:
        started, captured, _, sleepers = await _stubborn_tree(spawner)
        os.kill(_launcher_of(spawner), signal.SIGTERM)
        await started.gone
        captured.read()
        return sleepers

    assert all(gone(pid) for pid in run(scenario))


def test_the_daemons_kill_path_kills_the_whole_tree(spawner: Spawner) -> None:
    async def scenario() -> tuple[int, list[int]]:
        started, captured, supervisor, sleepers = await _stubborn_tree(spawner)
        pid, _ = await started.started
        proctree.signal_tree(pid, supervisor)
        status = await started.exited
        await started.gone
        captured.read()
        return status, sleepers

    status, sleepers = run(scenario)
    assert os.waitstatus_to_exitcode(status) == -signal.SIGKILL
    assert all(gone(pid) for pid in sleepers)


def test_a_tree_that_forks_while_its_supervisor_kills_it_dies(spawner: Spawner) -> None:
    # The shell forks all the time, so children forked after the supervisor's first walk of
    # /proc are likely: only walking again until nothing new appears catches them. Bounded:
    # a few hundred sleepers at most, and whatever survives is killed at the end.
    script = "i=0; while [ $i -lt 400 ]; do sleep 300 & i=$((i+1)); done; wait"

    async def scenario() -> None:
        started, captured = launch(spawner, sh(script))
        _, supervisor = await started.started
        try:
            for _ in range(500):  # until the shell is well into its loop
                if len(_sleepers_below(supervisor)) >= 20:
                    break
                await asyncio.sleep(0.01)
            os.kill(supervisor, signal.SIGTERM)
            await asyncio.wait_for(started.gone, 10)
        finally:
            for pid in _sleepers_below(supervisor) if not started.gone.done() else []:
                os.kill(pid, signal.SIGKILL)
        captured.read()

    run(scenario)


def test_when_the_launcher_dies_every_tree_is_killed_and_the_next_launch_restarts_it(
    spawner: Spawner,
) -> None:
    async def scenario() -> tuple[int, int]:
        started, captured = launch(spawner, sh("sleep 30 & echo $!; wait"))
        await started.started
        child = int(os.read(captured.out_r, 64))
        launcher = _launcher_of(spawner)
        os.kill(launcher, signal.SIGKILL)
        await started.gone
        captured.read()
        again, captured_again = launch(spawner, sh("echo again"))
        await again.gone
        assert captured_again.read() == "again\n"
        return child, launcher

    child, launcher = run(scenario)
    assert gone(child)
    assert _launcher_of(spawner) != launcher


def _launcher_of(spawner: Spawner) -> int:
    """The launcher server that runs plain commands: a direct child of this process."""
    me = psutil.Process()
    wanted = "executor-launcher" if spawner.supervisor == "native" else "zygote.py"
    for child in me.children():
        if any(wanted in part for part in child.cmdline()):
            return int(child.pid)
    raise AssertionError(f"no {wanted} child")


def test_many_commands_at_once_each_get_their_own_status(spawner: Spawner) -> None:
    async def scenario() -> list[tuple[int, str]]:
        launches = [launch(spawner, sh(f"echo {n}; exit {n}")) for n in range(40)]
        results = []
        for started, captured in launches:
            status = await started.exited
            await started.gone
            results.append((os.waitstatus_to_exitcode(status), captured.read()))
        return results

    assert run(scenario) == [(n, f"{n}\n") for n in range(40)]


def test_the_command_inherits_no_descriptor_beyond_its_stdio(spawner: Spawner) -> None:
    # The shell lists its own descriptors; the launcher's control socket, the status pipe
    # and anything else the daemon or launcher holds must not leak into commands.
    async def scenario() -> str:
        started, captured = launch(spawner, sh("ls /proc/$$/fd"))
        await started.gone
        return captured.read()

    assert sorted(int(fd) for fd in run(scenario).split()) == [0, 1, 2]
