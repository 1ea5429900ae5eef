"""``executor run``: one command, locally, under a profile — exactly the daemon's launch path.

The command goes through the same confinement as a ``process/start`` (intent parsing,
materialization, backend selection, launch plan, launcher server); its stdin is ours, its
stdout and stderr are relayed (and kept, bounded, for the denial classifier), and its exit
code becomes ours.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass

from executor import envpolicy
from executor.errors import spawn_error
from executor.output import OutputLog
from executor.paths import to_uri
from executor.process import ConfinedCommand, exit_code_from_status
from executor.protocol.messages import StartParams, Stream
from executor.sandbox.confine import SandboxConfinement
from executor.sandbox.denial import classify
from executor.sandbox.host import LocalHost, state_directory
from executor.sandbox.manager import SandboxManager, blocked_from_env, get_plugin_manager
from executor.sandbox.profiles import Profile
from executor.spawn.spawner import Spawner, SpawnRequest

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


def _sandbox_context(request: RunRequest) -> dict[str, object] | None:
    context = request.profile.wire_context(workspace_roots=request.workspace_roots, cwd=request.cwd)
    permissions = dict(context["permissions"])
    if permissions.get("type") == "disabled":
        return context
    if request.network is not None:
        permissions["network"] = "enabled" if request.network else "restricted"
    context["permissions"] = permissions
    return context


def confine(request: RunRequest, manager: SandboxManager | None = None) -> ConfinedCommand:
    """Resolve and confine the command as the daemon would (raises to refuse)."""
    manager = manager or SandboxManager(get_plugin_manager(blocked_from_env()))
    confinement = SandboxConfinement(manager, LocalHost(hidden_paths=(state_directory(),)))
    env = dict(os.environ)
    try:
        executable = envpolicy.find_program(request.argv[0], env, env)
    except OSError as exc:
        raise spawn_error(exc) from None
    command = SpawnRequest(
        executable=executable, argv=request.argv, env=env, cwd=request.cwd, tty=False
    )
    params = StartParams(
        process_id="run",
        argv=request.argv,
        cwd=to_uri(request.cwd),
        env=env,
        tty=False,
        sandbox=_sandbox_context(request),
    )
    return confinement.confine(params, command)


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
        return await _run(confined, spawner)
    finally:
        spawner.close()
        if confined.release is not None:
            confined.release()


async def _run(confined: ConfinedCommand, spawner: Spawner) -> int:
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
    for index, (fd, stream, sink) in enumerate(
        ((out_r, Stream.STDOUT, sys.stdout), (err_r, Stream.STDERR, sys.stderr))
    ):
        _relay(loop, fd, stream, sink.fileno(), log, ended[index])
    try:
        await launch.started
    except BaseException:
        await asyncio.gather(*ended)
        raise
    code = exit_code_from_status(await launch.exited)
    await asyncio.wait(ended, timeout=5)
    verdict = classify(
        sandboxed=confined.sandboxed, exit_code=code, output=log.all_output(), linux=confined.linux
    )
    if verdict.denied:
        print(
            f"executor: the sandbox denied an operation (exit {code}, {verdict.reason})",
            file=sys.stderr,
        )
    return code


def _relay(
    loop: asyncio.AbstractEventLoop,
    fd: int,
    stream: Stream,
    sink: int,
    log: OutputLog,
    done: asyncio.Future[None],
) -> None:
    os.set_blocking(fd, False)

    def readable() -> None:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        if data:
            log.append(stream, data)
            os.write(sink, data)
            return
        loop.remove_reader(fd)
        os.close(fd)
        done.set_result(None)

    loop.add_reader(fd, readable)
