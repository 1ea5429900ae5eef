"""One process of a session: output pumps, exit vs. close, its event log, read, signals.

Each process has one ``OutputLog``; output chunks, the exit and the close share its sequence
counter and are pushed to the session in that order. Exit is reported the moment the command
exits (its supervisor says so on the status pipe), not when its pipes close; output that
descendants write afterwards is still captured; ``closed`` comes once, after the exit and EOF
on every stream. A process's notifications are held until its ``process/start`` response has
been sent, so a client never hears of a process before it knows it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from executor import audit, proctree
from executor.output import DetachedOutput, OutputLog
from executor.process.confinement import ConfinedCommand
from executor.process.output_wire import OutputEncoder
from executor.process.stdin import Stdin
from executor.process.streams import FLOOD_PIPE_BYTES, pipe_growth
from executor.protocol.jsonrpc import Spliced
from executor.protocol.messages import (
    ProcessClosed,
    ProcessEvent,
    ProcessExited,
    ProcessOutput,
    ReadParams,
    ReadResult,
    Stream,
    WriteStatus,
)
from executor.sandbox.denial import Verdict, classify
from executor.spawn.child import set_window_size
from executor.spawn.spawner import Launch

if TYPE_CHECKING:
    from executor.process.table import ProcessTable

__all__ = ["MAX_WAIT_MS", "ManagedProcess", "Notifier", "exit_code_from_status"]

#: Longest ``process/read`` long poll; larger ``waitMs`` values are clamped to it.
MAX_WAIT_MS = 3_600_000
#: The verdict on every unsandboxed exit.
_NOT_DENIED = Verdict(False)


class Notifier(Protocol):
    """Where a session's notifications go (the attached connection, or nowhere)."""

    def notify(self, method: str, params: dict[str, Any] | Spliced) -> None:
        """Send a notification now, or drop it if no connection is attached."""

    @property
    def congested(self) -> bool:
        """The connection has more queued than it should; producers should pause."""

    def on_drain(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the congestion clears (or the connection goes away)."""

    @property
    def attachment_id(self) -> int | None:
        """The connection notifications go to now (new number per connection); None: none."""


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
        self._output_wire = OutputEncoder(process_id)
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
        #: Read sizes of readers found full once, and which of their pipes were grown.
        self._read_sizes: dict[int, int] = {}
        self._grown: set[int] = set()
        self.stdin = Stdin(self._loop)
        self._held: list[ProcessEvent] | None = []
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
        #: Who started it, for the audit line of its exit.
        self.origin: audit.Origin | None = None
        self._started_at = 0.0

    # --- lifecycle ---------------------------------------------------------------------------

    def attach_streams(self, readers: dict[int, Stream], stdin: int | None) -> None:
        """Start pumping the parent ends of the child's streams."""
        self._readers = dict(readers)
        for fd in readers:
            os.set_blocking(fd, False)
            self._loop.add_reader(fd, self._on_readable, fd)
        self.stdin.attach(stdin)

    def started(self, pid: int, supervisor: int, launch: Launch) -> None:
        """The command runs; watch for its exit."""
        self.pid, self.supervisor, self.launch = pid, supervisor, launch
        self.starting = False
        self._started_at = time.monotonic()
        launch.when_exited(self._on_exit_status)

    def announce(self) -> None:
        """The start response is out: release the notifications held until now."""
        held, self._held = self._held, None
        for event in held or ():
            self.table.notifier.notify(event.method, self._wire(event))

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
        size = self._read_sizes.get(fd, self.table.limits.read_chunk)
        try:
            data = os.read(fd, size)
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
        if len(data) == size and fd not in self._read_sizes:
            self._flooded(fd, size)
        if self._block:
            self._keep_unread()
        chunk = self.log.append(self._readers[fd], data)
        self._emit(ProcessOutput(self.process_id, chunk))
        self._wake()
        if self._held is None and self.table.notifier.congested and not self._paused:
            self._pause()
        if self._block and self.log.holding and not self._blocked:
            self._blocked = True
            for reader in self._readers:
                self._loop.remove_reader(reader)

    def _flooded(self, fd: int, size: int) -> None:
        """A read filled the buffer: grow the pipe and read more at a time (once per pipe)."""
        self._read_sizes[fd] = size
        if size < FLOOD_PIPE_BYTES and pipe_growth().grow(fd):
            self._read_sizes[fd] = FLOOD_PIPE_BYTES
            self._grown.add(fd)

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
        self._read_sizes.pop(fd, None)
        if fd in self._grown:
            self._grown.discard(fd)
            pipe_growth().release()
        self._loop.remove_reader(fd)
        if fd == self.stdin.fd:
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
            self._read_written_output()
            self._record_exit()

    def _read_written_output(self) -> None:
        """Output the command wrote before it exited comes before its exit: one read of each
        pipe still open. (The exit is handled right from its status line, which the loop may
        report ahead of the output pipes' own events.)"""
        for fd in list(self._readers):
            if self._paused or self._blocked:
                return  # reading stopped: what is unread waits, as it would have
            if fd in self._readers:
                self._on_readable(fd)

    def _record_exit(self) -> None:
        if self.log.exited or self._exit_status is None:
            return
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        code = exit_code_from_status(self._exit_status)
        self.exit_code = code
        evidence = self.confined.evidence
        if not self.confined.sandboxed:
            verdict = _NOT_DENIED  # what classify says, without joining the output for it
        else:
            verdict = classify(
                sandboxed=True,
                exit_code=code,
                output=self.log.all_output(),
                linux=self.confined.linux,
                # A refusal the command shrugged off (exit 0) did not make it fail.
                evidence=evidence() if evidence is not None and code != 0 else None,
            )
        self.sandbox_denied = verdict.denied
        if audit.enabled():
            # A denial comes with what was enforced: an operator can tell which layer said no.
            audit.record(
                "process.exit",
                self.origin,
                processId=audit.bounded(self.process_id),
                pid=self.pid,
                **audit.exit_fields(self._exit_status),
                sandboxDenied=verdict.denied,
                denial=verdict.reason if verdict.denied else None,
                enforcement=(self.enforced or self.confined.summary) if verdict.denied else None,
                failure=self.failure,
                durationMs=audit.duration_ms(self._started_at),
            )
        seq = self.log.mark_exited(code)
        self._emit(
            ProcessExited(
                process_id=self.process_id, seq=seq, exit_code=code, sandbox_denied=verdict.denied
            )
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
        self._emit(ProcessClosed(process_id=self.process_id, seq=seq))
        self._wake()
        self._close_stdin()
        self.table.process_closed(self)

    def _emit(self, event: ProcessEvent) -> None:
        if self._held is not None:
            self._held.append(event)
        else:
            self.table.notifier.notify(event.method, self._wire(event))

    def _wire(self, event: ProcessEvent) -> dict[str, Any] | Spliced:
        if type(event) is ProcessOutput:
            return self._output_wire(event.chunk)
        return event.to_wire()

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

    def write(self, data: bytes, write_id: str, *, close: bool = False) -> WriteStatus:
        """Queue ``data`` for the child's stdin (pipe or terminal), once per ``write_id``;
        ``close``: then close the pipe (the command reads EOF once it has read ``data``)."""
        if self.starting:
            return WriteStatus.STARTING
        return self.stdin.write(data, write_id, exited=self._exit_status is not None, close=close)

    def resize(self, rows: int, cols: int) -> None:
        """Resize the terminal (through its master, which is also stdin) if it is still open."""
        if self.stdin.fd is not None:
            with contextlib.suppress(OSError):
                set_window_size(self.stdin.fd, rows, cols)

    def _close_stdin(self) -> None:
        # A terminal's master is stdin and output at once: it closes with its reader.
        self.stdin.close(still_reading=self.stdin.fd in self._readers)

    # --- signals ----------------------------------------------------------------------------

    def interrupt(self) -> None:
        """SIGINT to the process group (for a terminal: its foreground group)."""
        if not self.running or self.pid is None:
            return
        target = self.pid
        if self.tty and self.stdin.fd is not None:
            try:
                target = os.tcgetpgrp(self.stdin.fd)
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
