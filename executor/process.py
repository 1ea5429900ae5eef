"""Processes of one session: start, output pumps, exit vs. close, read, write, signal, stop.

Each process has one ``OutputLog``; output chunks, the exit and the close share its sequence
counter and are pushed to the session in that order. Exit is reported the moment the command
exits (its supervisor says so on the status pipe), not when its pipes close; output that
descendants write afterwards is still captured; ``closed`` comes once, after the exit and EOF
on every stream. A process's notifications are held until its ``process/start`` response has
been sent, so a client never hears of a process before it knows it started.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import pty
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from executor import envpolicy, proctree
from executor.errors import InvalidParams, InvalidRequest, spawn_error
from executor.output import DEFAULT_RETAINED_BYTES, DetachedOutput, OutputLog
from executor.protocol import jsonrpc, methods
from executor.protocol.messages import (
    OutputChunk,
    ReadParams,
    ReadResult,
    SandboxType,
    SignalParams,
    StartParams,
    StartResult,
    Stream,
    TerminateParams,
    WriteParams,
    WriteStatus,
)
from executor.protocol.paths import ForeignPathError, parse_path_uri
from executor.sandbox.denial import classify
from executor.spawn.child import set_window_size
from executor.spawn.spawner import Launch, Spawner, SpawnRequest
from executor.write_ids import AcceptedWriteIds

__all__ = [
    "ConfinedCommand",
    "Confinement",
    "LiveProcessCounter",
    "ManagedProcess",
    "Notifier",
    "ProcessLimits",
    "ProcessTable",
    "RefuseSandbox",
]

log = logging.getLogger("executor.process")

#: Longest ``process/read`` long poll; larger ``waitMs`` values are clamped to it.
MAX_WAIT_MS = 3_600_000
PTY_ROWS, PTY_COLUMNS = 24, 80


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessLimits:
    """Bounds and timers of the process family (defaults follow the reference)."""

    retained_bytes: int = DEFAULT_RETAINED_BYTES
    exited_retention: float = 80.0
    max_per_session: int = 256
    max_total: int = 1024
    max_command_bytes: int = 1024 * 1024
    read_chunk: int = 65536
    denial_grace: float = 0.020
    stop_grace: float = 2.0
    detached_output: DetachedOutput = DetachedOutput.EVICT


class Notifier(Protocol):
    """Where a session's notifications go (the attached connection, or nowhere)."""

    def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send a notification now, or drop it if no connection is attached."""

    @property
    def congested(self) -> bool:
        """The connection has more queued than it should; producers should pause."""

    def on_drain(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the congestion clears (or the connection goes away)."""

    @property
    def attachment_id(self) -> int | None:
        """The connection notifications go to now (new number per connection); None: none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfinedCommand:
    """A command as it will be launched, after the sandbox decision."""

    request: SpawnRequest
    sandbox_type: SandboxType
    sandboxed: bool
    linux: bool = True
    release: Callable[[], None] | None = None
    summary: str | None = None


class Confinement(Protocol):
    """Turns a start request into a launch: unsandboxed, sandboxed, or refused (raises)."""

    def confine(self, params: StartParams, command: SpawnRequest) -> ConfinedCommand:
        """Decide how ``command`` runs; raise ``SandboxUnavailable`` to refuse it."""


class RefuseSandbox:
    """The confinement used when no sandbox support is configured: refuse every sandbox."""

    def confine(self, params: StartParams, command: SpawnRequest) -> ConfinedCommand:
        """Run unsandboxed requests as they are; refuse any request carrying a sandbox."""
        from executor.errors import SandboxUnavailable

        if params.sandbox is not None:
            raise SandboxUnavailable("no sandbox backend is configured")
        if params.enforce_managed_network:
            raise InvalidParams(
                "enforceManagedNetwork requires a sandbox, and managed networking is not supported"
            )
        return ConfinedCommand(request=command, sandbox_type=SandboxType.NONE, sandboxed=False)


class LiveProcessCounter:
    """Live (not yet closed) processes across the daemon, against one limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0

    def reserve(self) -> None:
        """Take a slot or refuse the start."""
        if self.count >= self.limit:
            raise InvalidRequest(f"the executor already runs {self.limit} processes, its limit")
        self.count += 1

    def release(self) -> None:
        """Give a slot back."""
        self.count -= 1


def exit_code_from_status(status: int) -> int:
    """A wait status as the protocol reports it: the code, or 128 + signal."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


class ManagedProcess:
    """One process of a session and its event log."""

    def __init__(self, table: ProcessTable, process_id: str, confined: ConfinedCommand) -> None:
        self.table = table
        self.process_id = process_id
        self.confined = confined
        self.log = OutputLog(max_bytes=table.limits.retained_bytes)
        self.starting = True
        self.pid: int | None = None
        self.supervisor: int | None = None
        self.exit_code: int | None = None
        self.sandbox_denied = False
        self.failure: str | None = None
        #: What the sandbox layers looked like from inside the command (when reported).
        self.enforced: str | None = None
        self.tty = confined.request.tty
        self._loop = asyncio.get_running_loop()
        self._readers: dict[int, Stream] = {}
        self._stdin: int | None = None
        self._stdin_pending = bytearray()
        self._stdin_broken = False
        self._write_ids = AcceptedWriteIds()
        self._held: list[tuple[str, dict[str, Any]]] | None = []
        self._waiters: set[asyncio.Future[None]] = set()
        self._paused = False
        # DetachedOutput.BLOCK: what the client has read (its highest afterSeq), which
        # attachment the chunks from ``_live_from`` on were pushed to, reading stopped or not.
        self._block = table.limits.detached_output is DetachedOutput.BLOCK
        self._confirmed = 0
        self._live_attachment: int | None = None
        self._live_from = 0
        self._blocked = False
        self._exit_status: int | None = None
        self._grace: asyncio.TimerHandle | None = None
        self._reap: asyncio.TimerHandle | None = None
        self.launch: Launch | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    def attach_streams(self, readers: dict[int, Stream], stdin: int | None) -> None:
        """Start pumping the parent ends of the child's streams."""
        self._readers = dict(readers)
        self._stdin = stdin
        for fd in readers:
            os.set_blocking(fd, False)
            self._loop.add_reader(fd, self._on_readable, fd)
        if stdin is not None:
            os.set_blocking(stdin, False)

    def started(self, pid: int, supervisor: int, launch: Launch) -> None:
        """The command runs; watch for its exit."""
        self.pid, self.supervisor, self.launch = pid, supervisor, launch
        self.starting = False
        launch.exited.add_done_callback(self._on_exit_status)

    def announce(self) -> None:
        """The start response is out: release the notifications held until now."""
        held, self._held = self._held, None
        for method, params in held or ():
            self.table.notifier.notify(method, params)

    def discard(self) -> None:
        """Forget a process whose start failed: close every descriptor."""
        for fd in list(self._readers):
            self._close_reader(fd)
        self._close_stdin()

    @property
    def running(self) -> bool:
        """Started and not yet exited."""
        return not self.starting and not self.log.exited and self._exit_status is None

    # --- output -----------------------------------------------------------------------------

    def _on_readable(self, fd: int) -> None:
        try:
            data = os.read(fd, self.table.limits.read_chunk)
        except BlockingIOError:
            return
        except OSError as exc:
            # A pty master reads EIO once no slave descriptor is left: that is its EOF.
            if exc.errno not in (errno.EIO, errno.EBADF):
                self.failure = f"reading output failed: {exc}"
            data = b""
        if not data:
            self._close_reader(fd)
            self._maybe_finish()
            return
        if self._block:
            self._keep_unread()
        chunk = self.log.append(self._readers[fd], data)
        self._emit(methods.PROCESS_OUTPUT, _output_params(self.process_id, chunk))
        self._wake()
        if self._held is None and self.table.notifier.congested and not self._paused:
            self._pause()
        if self._block and self.log.holding and not self._blocked:
            self._blocked = True
            for reader in self._readers:
                self._loop.remove_reader(reader)

    def _pause(self) -> None:
        self._paused = True
        for fd in self._readers:
            self._loop.remove_reader(fd)
        self.table.notifier.on_drain(self._resume)

    def _resume(self) -> None:
        if not self._paused:
            return
        self._paused = False
        if not self._blocked:
            for fd in self._readers:
                self._loop.add_reader(fd, self._on_readable, fd)

    # DetachedOutput.BLOCK: output no client has seen is kept, and the process waits for one.
    # Chunks pushed to the attached connection may be evicted as usual (its client has them
    # as notifications); the others, produced while detached or pushed to a connection that
    # has since gone, are kept until a client reads past them (process/read's afterSeq).

    def _keep_unread(self) -> None:
        """Set the log's floor before an append: keep every chunk no client has seen."""
        attachment = self.table.notifier.attachment_id
        if attachment is not None and attachment != self._live_attachment:
            self._live_attachment = attachment
            self._live_from = self.log.next_seq  # this chunk is the first pushed to it
        self.log.set_floor(self._unread_floor())

    def _unread_floor(self) -> int | None:
        first_unread = self._confirmed + 1
        live = self.table.notifier.attachment_id
        if live is not None and live == self._live_attachment and self._live_from <= first_unread:
            return None  # everything unread was pushed to the attached client
        return first_unread

    def _confirm(self, after_seq: int) -> None:
        """A client read after ``after_seq``: it has the output up to there."""
        self._confirmed = max(self._confirmed, min(after_seq, self.log.next_seq - 1))
        self.log.set_floor(self._unread_floor())
        if self._blocked and not self.log.holding:
            self._blocked = False
            if not self._paused:
                for fd in self._readers:
                    self._loop.add_reader(fd, self._on_readable, fd)

    def _close_reader(self, fd: int) -> None:
        if self._readers.pop(fd, None) is None:
            return
        self._loop.remove_reader(fd)
        if fd == self._stdin:
            return  # a pty master is also stdin; it closes with the process
        os.close(fd)

    # --- exit and close ---------------------------------------------------------------------

    def _on_exit_status(self, future: asyncio.Future[int]) -> None:
        if future.cancelled() or future.exception() is not None:
            self.failure = "the executor lost track of the process"
            self._exit_status = 255 << 8
        else:
            self._exit_status = future.result()
        self._close_stdin()
        if self.confined.sandboxed and self._readers:
            # The reference waits this long for output still in flight before classifying.
            self._grace = self._loop.call_later(self.table.limits.denial_grace, self._record_exit)
        else:
            self._record_exit()

    def _record_exit(self) -> None:
        if self.log.exited or self._exit_status is None:
            return
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        code = exit_code_from_status(self._exit_status)
        self.exit_code = code
        verdict = classify(
            sandboxed=self.confined.sandboxed,
            exit_code=code,
            output=self.log.all_output(),
            linux=self.confined.linux,
        )
        self.sandbox_denied = verdict.denied
        if verdict.denied:
            # The verdict with what was enforced: an operator can tell which layer said no.
            log.info(
                "process %s exited %s: sandbox denial (%s) under %s",
                self.process_id,
                code,
                verdict.reason,
                self.enforced or self.confined.summary,
            )
        seq = self.log.mark_exited(code)
        self._emit(
            methods.PROCESS_EXITED,
            {
                "processId": self.process_id,
                "seq": seq,
                "exitCode": code,
                "sandboxDenied": verdict.denied,
            },
        )
        self._wake()
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if self._exit_status is not None and not self.log.exited and not self._readers:
            self._record_exit()  # every stream ended during the grace period
            return
        if not self.log.exited or self._readers or self.log.closed:
            return
        # Release sandbox resources (host placeholders) first: once a client hears `closed`,
        # nothing of the process may be left on the host.
        if self.confined.release is not None:
            self.confined.release()
        seq = self.log.mark_closed()
        self._emit(methods.PROCESS_CLOSED, {"processId": self.process_id, "seq": seq})
        self._wake()
        self._close_stdin()
        self.table.process_closed(self)

    def _emit(self, method: str, params: dict[str, Any]) -> None:
        if self._held is not None:
            self._held.append((method, params))
        else:
            self.table.notifier.notify(method, params)

    # --- read -------------------------------------------------------------------------------

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()

    async def read(self, params: ReadParams) -> ReadResult:
        """Retained output after ``afterSeq``, waiting up to ``waitMs`` if there is none."""
        after = params.after_seq or 0
        if self._block:
            self._confirm(after)
        wait_ms = min(params.wait_ms or 0, MAX_WAIT_MS)
        if wait_ms and not self.log.has_after(after) and not self.log.exited:
            waiter = self._loop.create_future()
            self._waiters.add(waiter)
            try:
                await asyncio.wait_for(waiter, wait_ms / 1000)
            except TimeoutError:
                pass
            finally:
                self._waiters.discard(waiter)
        window = self.log.read(after, params.max_bytes)
        return ReadResult(
            chunks=window.chunks,
            next_seq=window.next_seq,
            exited=self.log.exited,
            exit_code=self.log.exit_code,
            closed=self.log.closed,
            failure=self.failure,
            sandbox_denied=self.sandbox_denied,
        )

    # --- stdin ------------------------------------------------------------------------------

    def write(self, data: bytes, write_id: str) -> WriteStatus:
        """Queue ``data`` for the child's stdin (pipe or terminal), once per ``write_id``.

        A repeated id (a client retrying after a reconnect) is ``accepted`` again, even once
        stdin has closed since, and writes nothing: it was accepted the first time.
        """
        if self.starting:
            return WriteStatus.STARTING
        if write_id in self._write_ids:
            return WriteStatus.ACCEPTED
        if self._stdin is None or self._stdin_broken or self._exit_status is not None:
            return WriteStatus.STDIN_CLOSED
        self._write_ids.remember(write_id)
        was_empty = not self._stdin_pending
        self._stdin_pending += data
        if was_empty:
            self._flush_stdin()
        return WriteStatus.ACCEPTED

    def _flush_stdin(self) -> None:
        fd = self._stdin
        if fd is None:
            return
        while self._stdin_pending:
            try:
                written = os.write(fd, self._stdin_pending)
            except BlockingIOError:
                self._loop.add_writer(fd, self._flush_stdin)
                return
            except OSError:
                self._stdin_broken = True
                self._stdin_pending.clear()
                break
            del self._stdin_pending[:written]
        self._loop.remove_writer(fd)

    def _close_stdin(self) -> None:
        fd, self._stdin = self._stdin, None
        self._stdin_pending.clear()
        if fd is None:
            return
        self._loop.remove_writer(fd)
        if fd in self._readers:
            self._stdin = fd  # pty master: still the output source; closed with the reader
            self._stdin_broken = True
            return
        os.close(fd)

    # --- signals ----------------------------------------------------------------------------

    def interrupt(self) -> None:
        """SIGINT to the process group (for a terminal: its foreground group)."""
        if not self.running or self.pid is None:
            return
        target = self.pid
        if self.tty and self._stdin is not None:
            try:
                target = os.tcgetpgrp(self._stdin)
            except OSError:
                target = self.pid
        proctree.signal_group(target, signal.SIGINT)

    def kill_tree(self, signum: int = signal.SIGKILL) -> bool:
        """Signal the whole tree; True if the command itself was still running.

        Once the supervisor has reported its end (``launch.gone``), every descendant is gone
        and the pids we hold may already belong to unrelated processes: nothing is signalled.
        """
        if self.pid is None or self.launch is None or self.launch.gone.done():
            return False
        was_running = self.running
        proctree.signal_tree(self.pid, self.supervisor, signum)
        return was_running

    def forget(self) -> None:
        """Drop the entry: cancel timers, wake readers, close what is left."""
        for handle in (self._grace, self._reap):
            if handle is not None:
                handle.cancel()
        self._wake()
        self.discard()

    def schedule_reap(self, delay: float, callback: Callable[[], None]) -> None:
        """Remove the entry after ``delay`` seconds (exited-process retention)."""
        self._reap = self._loop.call_later(delay, callback)


def _output_params(process_id: str, chunk: OutputChunk) -> dict[str, Any]:
    return {
        "processId": process_id,
        "seq": chunk.seq,
        "stream": chunk.stream.value,
        "chunk": jsonrpc.base64_value(chunk.data),
    }


class ProcessTable:
    """The processes of one session, by client-chosen id."""

    def __init__(
        self,
        *,
        spawner: Spawner,
        confinement: Confinement,
        notifier: Notifier,
        counter: LiveProcessCounter,
        limits: ProcessLimits = ProcessLimits(),
        executor_env: dict[str, str] | None = None,
        reaped: Callable[[], None] | None = None,
    ) -> None:
        self.spawner = spawner
        self.confinement = confinement
        self.notifier = notifier
        self.counter = counter
        self.limits = limits
        self.executor_env = dict(os.environ) if executor_env is None else executor_env
        #: Called after an exited process's retained output was dropped (memory to reclaim).
        self.reaped = reaped
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

    def _command(self, params: StartParams) -> SpawnRequest:
        try:
            cwd = parse_path_uri(params.cwd)
        except (InvalidParams, ForeignPathError) as exc:
            raise InvalidParams(
                f"cwd URI `{params.cwd}` is not valid on this exec-server host: {exc.message}"
            ) from None
        env = envpolicy.build_environment(params.env, params.env_policy, self.executor_env)
        envpolicy.validate_command(params.argv, env, self.limits.max_command_bytes, params.arg0)
        try:
            executable = envpolicy.find_program(params.argv[0], env, self.executor_env)
        except OSError as exc:
            raise spawn_error(exc) from None
        argv = params.argv if params.arg0 is None else (params.arg0, *params.argv[1:])
        return SpawnRequest(executable=executable, argv=argv, env=env, cwd=cwd, tty=params.tty)

    async def start(self, params: StartParams) -> tuple[StartResult, ManagedProcess]:
        """Start a process; nothing is added to the table if it fails to start."""
        if params.process_id in self._processes:
            raise InvalidRequest(f"process {params.process_id} already exists")
        command = self._command(params)
        # Limits before confinement: a sandbox plan may hold resources (``release``) that a
        # refusal after it would leak.
        if self._live >= self.limits.max_per_session:
            raise InvalidRequest(
                f"this session already runs {self.limits.max_per_session} processes, its limit"
            )
        self.counter.reserve()
        try:
            confined = self.confinement.confine(params, command)
        except BaseException:
            self.counter.release()
            raise
        process = ManagedProcess(self, params.process_id, confined)
        self._processes[params.process_id] = process
        self._live += 1
        try:
            await self._launch(process, confined, pipe_stdin=params.pipe_stdin)
        except BaseException:
            self._drop(process)
            if confined.release is not None:
                confined.release()
            raise
        return StartResult(
            process_id=params.process_id, sandbox_type=confined.sandbox_type
        ), process

    async def _launch(
        self, process: ManagedProcess, confined: ConfinedCommand, *, pipe_stdin: bool
    ) -> None:
        child_fds, readers, stdin = _open_streams(confined.request.tty, pipe_stdin)
        try:
            launch = self.spawner.launch(confined.request, child_fds)
        except BaseException:
            _close_all({*readers, *([stdin] if stdin is not None else [])})
            raise
        finally:
            _close_all(set(child_fds))
        process.attach_streams(readers, stdin)
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
        return process.write(params.chunk, params.write_id)

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


def _open_streams(
    tty: bool, pipe_stdin: bool
) -> tuple[tuple[int, int, int], dict[int, Stream], int | None]:
    """Child ends (stdin, stdout, stderr), parent readers, and the parent's stdin end."""
    if tty:
        master, slave = pty.openpty()
        os.set_inheritable(master, False)
        set_window_size(slave, PTY_ROWS, PTY_COLUMNS)
        return (slave, slave, slave), {master: Stream.PTY}, master
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    if pipe_stdin:
        in_r, in_w = os.pipe()
        stdin_parent: int | None = in_w
    else:
        in_r, stdin_parent = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), None
    return (in_r, out_w, err_w), {out_r: Stream.STDOUT, err_r: Stream.STDERR}, stdin_parent


def _close_all(fds: Any) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            continue


def _kill_late_start(future: asyncio.Future[tuple[int, int]]) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    pid, supervisor = future.result()
    proctree.signal_tree(pid, supervisor)
