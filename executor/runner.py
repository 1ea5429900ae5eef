"""``executor run``: one command, locally, under a profile — exactly the daemon's launch path.

The command goes through the same confinement as a ``process/start`` (intent parsing,
materialization, backend selection, launch plan, launcher server); its stdin is ours, its
stdout and stderr are relayed (and kept, bounded, for the denial classifier), and its exit
code becomes ours.

In a terminal (stdin and stdout both are one, or ``--tty``) the command gets a terminal of
its own, as a ``tty: true`` process does: ours is put in raw mode and every byte is relayed
both ways, so shells, editors and ^C work inside the sandbox; the size follows ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import pty
import signal
import struct
import sys
import termios
import tty
from collections.abc import Callable
from dataclasses import dataclass

from executor import envpolicy, proctree
from executor.errors import spawn_error
from executor.output import OutputLog
from executor.process import ConfinedCommand, exit_code_from_status
from executor.process.confinement import SandboxConfinement
from executor.protocol.messages import Stream
from executor.sandbox.command import Command
from executor.sandbox.denial import classify
from executor.sandbox.host import LocalHost, ensure_state_directory
from executor.sandbox.manager import SandboxManager, blocked_from_env, get_plugin_manager
from executor.sandbox.profiles import Profile
from executor.spawn.spawner import Launch, Spawner

__all__ = ["RunRequest", "run_command"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRequest:
    """What ``executor run`` was asked to do."""

    profile: Profile
    argv: tuple[str, ...]
    workspace_roots: tuple[str, ...]
    cwd: str
    network: bool | None = None
    verbose: bool = False
    #: Give the command a terminal of its own (relayed through ours).
    tty: bool = False


def confine(request: RunRequest, manager: SandboxManager | None = None) -> ConfinedCommand:
    """Resolve and confine the command as the daemon would (raises to refuse)."""
    manager = manager or SandboxManager(get_plugin_manager(blocked_from_env()))
    confinement = SandboxConfinement(
        manager, LocalHost(hidden_paths=(ensure_state_directory(),)), limits=request.profile.limits
    )
    env = dict(os.environ)
    try:
        executable = envpolicy.find_program(request.argv[0], env, env)
    except OSError as exc:
        raise spawn_error(exc) from None
    command = Command(
        executable=executable, argv=request.argv, env=env, cwd=request.cwd, tty=request.tty
    )
    intent = request.profile.intent(
        workspace_roots=request.workspace_roots, cwd=request.cwd, network=request.network
    )
    return confinement.enforce(intent, command, label="executor run")


async def run_command(request: RunRequest) -> int:
    """Run ``request`` and return the command's exit code."""
    confined = confine(request)
    if request.verbose:
        print(
            f"executor: sandbox {confined.sandbox_type.value}: "
            f"{confined.summary or 'nothing enforced'}",
            file=sys.stderr,
        )
    spawner = Spawner()
    try:
        if request.tty:
            return await _run_in_terminal(confined, spawner, request.verbose)
        return await _run(confined, spawner, request.verbose)
    finally:
        spawner.close()
        if confined.release is not None:
            confined.release()


def _print_observed(launch: Launch, verbose: bool) -> None:
    """What the layers looked like from inside, once applied (backends that report it)."""
    if verbose and launch.observed:
        print(f"executor: observed in the command: {launch.observed}", file=sys.stderr)


async def _run(confined: ConfinedCommand, spawner: Spawner, verbose: bool) -> int:
    loop = asyncio.get_running_loop()
    log = OutputLog()
    out_r, out_w = os.pipe()  # non-inheritable (PEP 446); macOS has no pipe2
    err_r, err_w = os.pipe()  # non-inheritable (PEP 446); macOS has no pipe2
    try:
        launch = spawner.launch(confined.request, (sys.stdin.fileno(), out_w, err_w))
    finally:
        os.close(out_w)
        os.close(err_w)
    ended = [loop.create_future(), loop.create_future()]
    broken = _signal_command(launch, signal.SIGPIPE)
    for index, (fd, stream, sink) in enumerate(
        ((out_r, Stream.STDOUT, sys.stdout), (err_r, Stream.STDERR, sys.stderr))
    ):
        # Our stdout or stderr closed: the command gets SIGPIPE, as if it wrote there itself.
        _relay(loop, fd, stream, sink.fileno(), log, ended[index], broken)
    try:
        await launch.started
    except BaseException:
        await asyncio.gather(*ended)
        raise
    _print_observed(launch, verbose)
    code = exit_code_from_status(await launch.exited)
    await asyncio.wait(ended, timeout=5)
    return _verdict(confined, code, log)


def _verdict(confined: ConfinedCommand, code: int, log: OutputLog) -> int:
    verdict = classify(
        sandboxed=confined.sandboxed, exit_code=code, output=log.all_output(), linux=confined.linux
    )
    if verdict.denied:
        print(
            f"executor: the sandbox denied an operation (exit {code}, {verdict.reason})",
            file=sys.stderr,
        )
    return code


async def _run_in_terminal(confined: ConfinedCommand, spawner: Spawner, verbose: bool) -> int:
    """The command on a terminal of its own; ours relays keys in and output out, raw."""
    loop = asyncio.get_running_loop()
    log = OutputLog()
    controller, terminal = pty.openpty()
    os.set_inheritable(controller, False)
    ours = sys.stdin.fileno()
    _copy_window_size(ours, terminal)
    try:
        launch = spawner.launch(confined.request, (terminal, terminal, terminal))
    finally:
        os.close(terminal)
    saved = termios.tcgetattr(ours) if os.isatty(ours) else None
    ended: asyncio.Future[None] = loop.create_future()
    loop.add_signal_handler(signal.SIGWINCH, _copy_window_size, ours, controller)
    try:
        if saved is not None:
            tty.setraw(ours, termios.TCSANOW)
        # Our terminal went away: the command's terminal hangs up too.
        hangup = _signal_command(launch, signal.SIGHUP)
        _relay(loop, controller, Stream.PTY, sys.stdout.fileno(), log, ended, hangup)
        with contextlib.suppress(OSError):  # a regular file cannot be watched: no keys then
            loop.add_reader(ours, _forward_keys, loop, ours, controller)
        await launch.started
        _print_observed(launch, verbose)
        code = exit_code_from_status(await launch.exited)
        await asyncio.wait([ended], timeout=5)  # the terminal's last output
    finally:
        loop.remove_reader(ours)
        loop.remove_signal_handler(signal.SIGWINCH)
        if saved is not None:
            termios.tcsetattr(ours, termios.TCSAFLUSH, saved)
        if not ended.done():
            loop.remove_reader(controller)
            os.close(controller)
    return _verdict(confined, code, log)


def _forward_keys(loop: asyncio.AbstractEventLoop, source: int, controller: int) -> None:
    try:
        data = os.read(source, 65536)
    except OSError:
        data = b""
    if not data:  # our stdin ended: the command keeps its terminal, we stop reading
        loop.remove_reader(source)
        return
    try:
        os.write(controller, data)
    except OSError:
        loop.remove_reader(source)


def _copy_window_size(source: int, target: int) -> None:
    """Give the command's terminal the size of ours (80x24 when ours has none)."""
    try:
        size = fcntl.ioctl(source, termios.TIOCGWINSZ, b"\0" * 8)
    except OSError:
        size = struct.pack("HHHH", 24, 80, 0, 0)
    with contextlib.suppress(OSError):
        fcntl.ioctl(target, termios.TIOCSWINSZ, size)


def _relay(
    loop: asyncio.AbstractEventLoop,
    fd: int,
    stream: Stream,
    sink: int,
    log: OutputLog,
    done: asyncio.Future[None],
    on_broken: Callable[[], None],
) -> None:
    """Copy ``fd`` to ``sink`` until EOF. If ``sink`` breaks (``| head`` exited, the terminal
    went away), stop and call ``on_broken``, which tells the command as a direct writer
    would have been told."""
    os.set_blocking(fd, False)

    def finish() -> None:
        loop.remove_reader(fd)
        os.close(fd)
        done.set_result(None)

    def readable() -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:  # a terminal whose last holder is gone reads EIO: its end
            data = b""
        if not data:
            finish()
            return
        log.append(stream, data)
        try:
            os.write(sink, data)
        except OSError:
            finish()
            on_broken()

    loop.add_reader(fd, readable)


def _signal_command(launch: Launch, signum: int) -> Callable[[], None]:
    """A callback that sends ``signum`` to the command's process group, once it runs."""

    def send() -> None:
        if launch.started.done() and launch.started.exception() is None:
            pid, _supervisor = launch.started.result()
            proctree.signal_group(pid, signum)

    return send
