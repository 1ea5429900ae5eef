"""``executor run``: one command, locally, under a profile — exactly the daemon's launch path.

The command goes through the same confinement as a ``process/start`` (intent parsing,
materialization, backend selection, launch plan, launcher server); its stdin is ours, its
stdout and stderr are relayed (and kept, bounded, for the denial classifier), and its exit
code becomes ours. A command that cannot start is reported naming what failed (the
program, the working directory) and nothing runs.

Its environment is ours without the variables the daemon's default secret excludes drop
(``envpolicy.DEFAULT_EXCLUDES``, as for an ``envPolicy`` without
``ignoreDefaultExcludes``), plus what ``--env`` sets (``child_environment``).

In a terminal (stdin and stdout both are one, or ``--tty``) the command gets a terminal of
its own, as a ``tty: true`` process does: ours is put in raw mode and every byte is relayed
both ways, so shells, editors and ^C work inside the sandbox; the size follows ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import pty
import re
import signal
import struct
import sys
import termios
import tty
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from executor import envpolicy, proctree
from executor.env_settings import env_settings
from executor.errors import InternalError
from executor.output import OutputLog
from executor.process import ConfinedCommand, exit_code_from_status
from executor.process.confinement import SandboxConfinement
from executor.protocol.messages import EnvPolicy, Inherit, Stream
from executor.sandbox.api import SandboxBackend
from executor.sandbox.command import Command
from executor.sandbox.denial import KEYWORDS, Verdict, classify
from executor.sandbox.host import LocalHost, ensure_state_directory
from executor.sandbox.manager import SandboxManager, blocked_from_env, get_plugin_manager
from executor.sandbox.profiles import Profile
from executor.sandbox.rules import RuleSet
from executor.spawn.spawner import Launch, LaunchFailed, Spawner

__all__ = ["ChildEnvironment", "RunRequest", "child_environment", "denial_line", "run_command"]


@dataclass(frozen=True, slots=True)
class ChildEnvironment:
    """The command's environment, and which of ours it does not get."""

    env: dict[str, str]
    #: Our variables left out because they look like secrets (names only, sorted).
    withheld: tuple[str, ...] = ()


def child_environment(
    ours: Mapping[str, str], settings: Sequence[str], *, clear: bool, inherit: bool
) -> ChildEnvironment:
    """The environment ``executor run`` gives the command.

    It starts from ``ours`` (nothing with ``clear``) minus the names the daemon's default
    secret excludes match (kept with ``inherit``), then applies ``settings``: ``NAME=VALUE``
    sets a variable, ``NAME`` copies ours (left unset when we have none). What ``settings``
    names always gets through, secret-looking or not: asking by name is the way to pass one.
    The filtering is the daemon's own (``envpolicy.build_environment``), so ``run`` and an
    ``envPolicy`` without ``ignoreDefaultExcludes`` agree on what a secret looks like.
    """
    explicit = env_settings(settings, ours)
    policy = EnvPolicy(
        inherit=Inherit.NONE if clear else Inherit.ALL,
        ignore_default_excludes=inherit,
        exclude=(),
        set={},
        include_only=(),
    )
    env = envpolicy.build_environment(explicit, policy, ours)
    withheld = () if clear else tuple(sorted(name for name in ours if name not in env))
    return ChildEnvironment(env, withheld)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRequest:
    """What ``executor run`` was asked to do."""

    profile: Profile
    argv: tuple[str, ...]
    workspace_roots: tuple[str, ...]
    cwd: str
    #: The command's environment (``child_environment``); ``None``: ours, unfiltered.
    env: ChildEnvironment | None = None
    network: bool | None = None
    #: Full network without loopback isolation (``--shared-loopback``).
    shared_loopback: bool = False
    verbose: bool = False
    #: Give the command a terminal of its own (relayed through ours).
    tty: bool = False


class _RecordingManager(SandboxManager):
    """The daemon's manager, remembering which backend it selected (for ``-v``)."""

    selected: SandboxBackend | None = None

    def select(self, rules: RuleSet) -> SandboxBackend:
        """Select as the daemon does; remember the choice."""
        self.selected = super().select(rules)
        return self.selected


async def confine(request: RunRequest) -> tuple[ConfinedCommand, str | None]:
    """Resolve and confine the command as the daemon would (raises to refuse); the
    confined command and the name of the backend that planned it (``None``: unsandboxed)."""
    manager = _RecordingManager(get_plugin_manager(blocked_from_env()))
    confinement = SandboxConfinement(
        manager,
        LocalHost(hidden_paths=(ensure_state_directory(),)),
        limits=request.profile.limits,
        shared_loopback=request.shared_loopback,
    )
    env = dict(os.environ) if request.env is None else dict(request.env.env)
    name = request.argv[0]
    try:
        executable = envpolicy.find_program(name, env, os.environ, request.cwd)
    except FileNotFoundError:
        raise InternalError(f"{name}: command not found") from None
    except PermissionError:
        raise InternalError(f"{name}: permission denied") from None
    command = Command(
        executable=executable, argv=request.argv, env=env, cwd=request.cwd, tty=request.tty
    )
    intent = request.profile.intent(
        workspace_roots=request.workspace_roots, cwd=request.cwd, network=request.network
    )
    confined = await confinement.enforce(
        intent,
        command,
        label="executor run",
        operator=request.profile.network_policy(request.network),
        process_id="run",
    )
    backend = manager.selected.name if confined.sandboxed and manager.selected else None
    return confined, backend


async def run_command(request: RunRequest) -> int:
    """Run ``request`` and return the command's exit code.

    A command that could not start raises ``InternalError`` naming what failed: the
    program, the working directory, or the sandbox layer (``LaunchFailed.stage``)."""
    confined, backend = await confine(request)
    if request.verbose:
        _print_plan(request, confined, backend)
    spawner = Spawner()
    try:
        if request.tty:
            return await _run_in_terminal(confined, spawner, request.verbose)
        return await _run(confined, spawner, request.verbose)
    except LaunchFailed as exc:
        raise InternalError(_launch_failure(exc, request, confined)) from None
    finally:
        spawner.close()
        if confined.release is not None:
            confined.release()


def _print_plan(request: RunRequest, confined: ConfinedCommand, backend: str | None) -> None:
    """``-v``: who enforces what, and which of our variables the command does not get."""
    if backend is None:
        print(f"executor: profile {request.profile.name}: no sandbox", file=sys.stderr)
    else:
        print(
            f"executor: profile {request.profile.name}: backend {backend}, sandbox "
            f"{confined.sandbox_type.value}: {confined.summary or 'nothing enforced'}",
            file=sys.stderr,
        )
    if request.env is not None and request.env.withheld:
        print(
            "executor: not passed to the command (they look like secrets; --env NAME passes"
            f" one, --inherit-env all): {', '.join(request.env.withheld)}",
            file=sys.stderr,
        )


def _launch_failure(exc: LaunchFailed, request: RunRequest, confined: ConfinedCommand) -> str:
    """One line naming what could not be used, and the likely cause when the sandbox is."""
    reason = os.strerror(exc.error) if exc.error else exc.detail or "failed"
    if exc.stage == "exec":
        path = confined.request.executable
        what = (
            f"{path}: {reason}"
            if exc.error == errno.ENOENT
            else f"{path}: cannot execute: {reason}"
        )
    elif exc.stage == "chdir":
        path = request.cwd
        what = f"working directory {path}: {reason}"
    else:
        return exc.message  # names the layer: "failed to start the command: <stage>: ..."
    outside = os.path.join(request.cwd, path)  # a relative program is relative to the cwd
    if not (os.path.exists(outside) and os.access(outside, os.X_OK)):
        return what  # the OS error says it all: not there, or not executable even outside
    interpreter = exc.stage == "exec" and exc.error == errno.ENOENT
    if not confined.sandboxed:
        return f"{what} (is the interpreter on its #! line missing?)" if interpreter else what
    if exc.error not in (errno.ENOENT, errno.EACCES):
        return what
    # It is there and usable outside: the profile hides it or withholds a right on it.
    name = request.profile.name
    cause = (
        f"profile {name} may hide it"
        if exc.error == errno.ENOENT
        else (f"profile {name} may not allow it")
    )
    if interpreter:
        cause += ", or the interpreter on its #! line is missing"
    return f"{what} (it exists outside the sandbox: {cause}; see `executor profile explain {name}`)"


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
    output = log.all_output()
    evidence = confined.evidence() if confined.evidence is not None and code != 0 else None
    verdict = classify(
        sandboxed=confined.sandboxed,
        exit_code=code,
        output=output,
        linux=confined.linux,
        evidence=evidence,
    )
    line = denial_line(verdict, code, output, evidence)
    if line is not None:
        print(line, file=sys.stderr)
    return code


def denial_line(
    verdict: Verdict, code: int, output: bytes, evidence: str | None = None
) -> str | None:
    """The line ``executor run`` (and ``executor exec``) prints when the sandbox denied
    something, or ``None``: the proxy's refusal (``evidence``), else the heuristic and what
    it went by."""
    if evidence:
        # Not a guess: the proxy refused a connection while the command ran.
        return f"executor: the sandbox's proxy {evidence.partition(': ')[2]}"
    if verdict.denied:
        return (
            "executor: the sandbox probably denied something "
            f"(heuristic: {_evidence(verdict, code, output)})"
        )
    return None


def _evidence(verdict: Verdict, code: int, output: bytes) -> str:
    """What the shared heuristic (``sandbox.denial``) went by, in words: the exit code and
    the keyword it found in the output, as the output spells it. It cannot tell a denial
    from a command that printed such a word and failed for another reason, hence "probably"."""
    text = output.decode("utf-8", "replace")
    for keyword, reason in KEYWORDS:
        if reason != verdict.reason:
            continue
        found = re.search(re.escape(keyword), text, re.IGNORECASE)
        if found is not None:
            return f'exit {code} and "{found.group()}" in the output'
    if verdict.reason == "sigsys":
        return f"exit {code}, that is SIGSYS, the signal seccomp kills forbidden system calls with"
    return f"exit {code}, {verdict.reason}"


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
