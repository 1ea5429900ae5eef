"""The processes of one session, by client-chosen id: start, and the requests on them."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from typing import Any

from executor import audit, envpolicy, proctree
from executor.errors import InvalidParams, InvalidRequest, spawn_error
from executor.netproxy.session import SessionNetwork
from executor.process.confinement import ConfinedCommand, Confinement
from executor.process.limits import LiveProcessCounter, ProcessLimits
from executor.process.managed import ManagedProcess, Notifier
from executor.process.streams import close_all, close_child_ends, open_streams
from executor.protocol.messages import (
    ReadParams,
    ReadResult,
    ResizePtyParams,
    SignalParams,
    StartParams,
    StartResult,
    Stream,
    TerminateParams,
    WriteParams,
    WriteStatus,
)
from executor.protocol.paths import ForeignPathError, parse_path_uri
from executor.sandbox.command import Command
from executor.spawn.spawner import Launch, Spawner

__all__ = ["ProcessTable"]

log = logging.getLogger("executor.process")


class ProcessTable:
    """The processes of one session, by client-chosen id."""

    def __init__(
        self,
        *,
        spawner: Spawner,
        confinement: Confinement,
        notifier: Notifier,
        counter: LiveProcessCounter,
        limits: ProcessLimits | None = None,
        executor_env: dict[str, str] | None = None,
        reaped: Callable[[], None] | None = None,
        env_deny: tuple[str, ...] = (),
        network: SessionNetwork | None = None,
    ) -> None:
        self.spawner = spawner
        self.confinement = confinement
        self.notifier = notifier
        self.counter = counter
        self.limits = limits if limits is not None else ProcessLimits()
        self.executor_env = dict(os.environ) if executor_env is None else executor_env
        #: Called after an exited process's retained output was dropped (memory to reclaim).
        self.reaped = reaped
        #: Variables never passed to a command, whatever its ``envPolicy`` (``--env-deny``).
        self.env_deny = env_deny
        #: The session's network (its proxies, relays and private namespace).
        self.network = network
        self._processes: dict[str, ManagedProcess] = {}
        self._live = 0

    def __len__(self) -> int:
        return len(self._processes)

    def get(self, process_id: str) -> ManagedProcess | None:
        """The process with this id, if the table has it."""
        return self._processes.get(process_id)

    def _lookup(self, process_id: str) -> ManagedProcess:
        process = self._processes.get(process_id)
        if process is None:
            raise InvalidRequest(f"unknown process id {process_id}")
        return process

    # --- start ------------------------------------------------------------------------------

    def _command(self, params: StartParams) -> Command:
        try:
            cwd = parse_path_uri(params.cwd)
        except (InvalidParams, ForeignPathError) as exc:
            raise InvalidParams(
                f"cwd URI `{params.cwd}` is not valid on this exec-server host: {exc.message}"
            ) from None
        env = envpolicy.build_environment(params.env, params.env_policy, self.executor_env)
        if self.env_deny:  # (build_environment's dict is already the command's own)
            env = envpolicy.deny_variables(env, self.env_deny)
        envpolicy.validate_command(params.argv, env, self.limits.max_command_bytes, params.arg0)
        try:
            executable = envpolicy.find_program(params.argv[0], env, self.executor_env, cwd)
        except OSError as exc:
            raise spawn_error(exc) from None
        argv = params.argv if params.arg0 is None else (params.arg0, *params.argv[1:])
        return Command(executable=executable, argv=argv, env=env, cwd=cwd, tty=params.tty)

    async def start(
        self, params: StartParams, origin: audit.Origin | None = None
    ) -> tuple[StartResult, ManagedProcess]:
        """Start a process for ``origin``; nothing is added to the table if it fails to start.

        One audit line says what started, under what; a refusal carries the same fields.
        """
        with audit.operation("process.start", origin, lambda: _start_fields(params)) as fields:
            result, process = await self._start(params)
            process.origin = origin
            confined = process.confined
            fields["cwd"] = audit.bounded(confined.request.cwd)
            fields["pid"] = process.pid
            fields["sandboxType"] = confined.sandbox_type.value
            fields["enforcement"] = process.enforced or confined.summary
        return result, process

    async def _start(self, params: StartParams) -> tuple[StartResult, ManagedProcess]:
        if params.process_id in self._processes:
            raise InvalidRequest(f"process {params.process_id} already exists")
        if params.size is not None and not params.tty:
            raise InvalidParams("size requires tty: true")
        command = self._command(params)
        # Limits before confinement: a sandbox plan may hold resources (``release``) that a
        # refusal after it would leak.
        if self._live >= self.limits.max_per_session:
            raise InvalidRequest(
                f"this session already runs {self.limits.max_per_session} processes, its limit"
            )
        self.counter.reserve()
        try:
            confined = await self.confinement.confine(params, command, self.network)
        except BaseException:
            self.counter.release()
            raise
        try:
            launch, readers, stdin = self._send(confined, params)
        except BaseException:
            self.counter.release()
            if confined.release is not None:
                confined.release()
            raise
        # The command is on its way: the table's side of it is set up while it starts (no
        # await since the check above, so the id is still free).
        process = ManagedProcess(self, params.process_id, confined)
        self._processes[params.process_id] = process
        self._live += 1
        process.attach_streams(readers, stdin)
        try:
            await self._started(process, launch)
        except BaseException:
            self._drop(process)
            if confined.release is not None:
                confined.release()
            raise
        return StartResult(
            process_id=params.process_id, sandbox_type=confined.sandbox_type
        ), process

    def _send(
        self, confined: ConfinedCommand, params: StartParams
    ) -> tuple[Launch, dict[int, Stream], int | None]:
        """Open the child's streams and hand the command to its launcher: the launch, the
        parent's readers and its stdin end."""
        size = None if params.size is None else (params.size.rows, params.size.cols)
        child_fds, readers, stdin = open_streams(confined.request.tty, params.pipe_stdin, size)
        try:
            launch = self.spawner.launch(confined.request, child_fds)
        except BaseException:
            close_all({*readers, *([stdin] if stdin is not None else [])})
            raise
        finally:
            close_child_ends(child_fds)
        return launch, readers, stdin

    async def _started(self, process: ManagedProcess, launch: Launch) -> None:
        try:
            pid, supervisor = await launch.started
        except asyncio.CancelledError:
            launch.started.add_done_callback(_kill_late_start)
            process.discard()
            raise
        except BaseException:
            process.discard()
            raise
        if launch.observed:
            log.info("process %s: observed in the command: %s", process.process_id, launch.observed)
            process.enforced = launch.observed
        process.started(pid, supervisor, launch)

    # --- the other requests -------------------------------------------------------------------

    async def read(self, params: ReadParams) -> ReadResult:
        """``process/read``."""
        return await self._lookup(params.process_id).read(params)

    def write(self, params: WriteParams) -> WriteStatus:
        """``process/write``: a status; the only error is an empty ``writeId`` (as the reference).

        The id is what makes a retried write idempotent; an empty one would turn every write
        after the first into a "retry".
        """
        if not params.write_id:
            raise InvalidParams("writeId must not be empty")
        process = self._processes.get(params.process_id)
        if process is None:
            return WriteStatus.UNKNOWN_PROCESS
        if params.close_stdin and process.tty:
            # Closing a terminal's master would hang it up; its input ends with ^D.
            raise InvalidParams("closeStdin needs a stdin pipe; a terminal's input ends with ^D")
        return process.write(params.chunk, params.write_id, close=params.close_stdin)

    def resize_pty(self, params: ResizePtyParams) -> None:
        """``process/resizePty`` (ours): the terminal's new size; its foreground process
        group gets SIGWINCH. Nothing happens once the terminal is gone."""
        process = self._lookup(params.process_id)
        if not process.tty:
            raise InvalidRequest(f"process {params.process_id} has no terminal")
        process.resize(params.size.rows, params.size.cols)

    def signal(self, params: SignalParams) -> None:
        """``process/signal``: unknown ids are ignored, as the reference does."""
        process = self._processes.get(params.process_id)
        if process is not None:
            process.interrupt()

    def terminate(self, params: TerminateParams) -> bool:
        """``process/terminate``: SIGKILL to the whole tree; True if it was running."""
        process = self._processes.get(params.process_id)
        if process is None:
            return False
        return process.kill_tree()

    # --- bookkeeping --------------------------------------------------------------------------

    def process_closed(self, process: ManagedProcess) -> None:
        """A process exited and its streams ended: keep it readable for a while."""
        self._live -= 1
        self.counter.release()
        process.schedule_reap(self.limits.exited_retention, lambda: self._reap(process))

    def _reap(self, process: ManagedProcess) -> None:
        if self._processes.get(process.process_id) is process:
            del self._processes[process.process_id]
            process.forget()
            if self.reaped is not None:
                self.reaped()

    def _drop(self, process: ManagedProcess) -> None:
        if self._processes.get(process.process_id) is process:
            del self._processes[process.process_id]
        self._live -= 1
        self.counter.release()

    async def close(self) -> None:
        """Stop every tree: SIGTERM, a grace period, then SIGKILL; then forget everything."""
        processes = list(self._processes.values())
        for process in processes:
            process.kill_tree(signal.SIGTERM)
        pending = [
            p.launch.gone for p in processes if p.launch is not None and not p.launch.gone.done()
        ]
        if pending:
            _done, still = await asyncio.wait(pending, timeout=self.limits.stop_grace)
            if still:
                for process in processes:
                    process.kill_tree(signal.SIGKILL)
                await asyncio.wait(still, timeout=self.limits.stop_grace)
        for process in processes:
            if not process.log.closed and self._processes.get(process.process_id) is process:
                self._live -= 1
                self.counter.release()
            process.forget()
        self._processes.clear()
        if self.network is not None:
            await self.network.close()


def _start_fields(params: StartParams) -> dict[str, Any]:
    """What a ``process.start`` audit line (or refusal) says of the request."""
    return {
        "processId": audit.bounded(params.process_id),
        **audit.bounded_argv(params.argv),
        "arg0": None if params.arg0 is None else audit.bounded(params.arg0),
        "cwd": audit.bounded(params.cwd),
        "tty": params.tty,
    }


def _kill_late_start(future: asyncio.Future[tuple[int, int]]) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    pid, supervisor = future.result()
    proctree.signal_tree(pid, supervisor)
