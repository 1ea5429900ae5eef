"""One process's events, published strictly in ``seq`` order, exactly once.

The server numbers every output chunk, the exit and the close of a process with one counter.
Events may reach the client out of order (the reference sends a process's streams from
different tasks) and twice (a live notification and the same chunk fetched by a catch-up
``process/read``), so each is held until every lower seq has been published, and anything
at or below the last published seq is dropped. A catch-up after a reconnect fills the gap
from what the server still retains, and reconstructs the exit and close, which
``process/read`` reports as flags rather than as numbered events, at the seqs they used.
"""

from __future__ import annotations

import asyncio
import base64
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

from executor.client.errors import ClientError

__all__ = ["Changes", "Closed", "Event", "ExitResult", "Exited", "OutputChunk", "ProcessEvents"]

Stream = Literal["stdout", "stderr", "pty"]


@dataclass(frozen=True, slots=True)
class OutputChunk:
    """One piece of a process's output, as the server numbered it."""

    seq: int
    #: ``stdout``, ``stderr``, or ``pty`` for a process with a terminal.
    stream: Stream
    data: bytes


@dataclass(frozen=True, slots=True)
class ExitResult:
    """How a process ended."""

    #: The exit status; a death by signal N is ``128 + N`` (SIGKILL: 137).
    exit_code: int
    #: The executor judged a failed exit to be the sandbox's doing.
    sandbox_denied: bool = False
    #: The executor's own failure text, when it reported one (``process/read`` ``failure``).
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class Exited:
    """The exit event at its seq."""

    seq: int
    result: ExitResult


@dataclass(frozen=True, slots=True)
class Closed:
    """The close event: no output will follow."""

    seq: int


Event = OutputChunk | Exited | Closed


class RecoveryGap(ClientError):
    """The catch-up cannot account for every event the client missed."""


def event_from_notification(method: str, params: dict[str, Any]) -> Event | None:
    """The event a ``process/*`` notification carries (``None`` for other methods)."""
    seq = int(params["seq"])
    if method == "process/output":
        return OutputChunk(seq, params["stream"], base64.b64decode(params["chunk"]))
    if method == "process/exited":
        denied = bool(params.get("sandboxDenied", False))
        return Exited(seq, ExitResult(int(params["exitCode"]), denied))
    if method == "process/closed":
        return Closed(seq)
    return None


class Changes:
    """Something changed: ``wait`` until the next ``notify`` (every waiter wakes)."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    async def wait(self) -> None:
        """Until the next ``notify``."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def notify(self) -> None:
        """Wake everyone waiting now."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class ProcessEvents:
    """The ordering buffer and the published state of one process."""

    def __init__(self, process_id: str) -> None:
        self.process_id = process_id
        #: Every event up to this seq has been published.
        self.last_published = 0
        #: Events above ``last_published``, waiting for the ones below them.
        self.pending: dict[int, Event] = {}
        #: The start was answered, so a reconnect catches this process up.
        self.recoverable = False
        self.exit: ExitResult | None = None
        self.closed = False
        #: Set when the process can no longer be followed (lost gap, session failed).
        self.failure: ClientError | None = None
        self._chunks: deque[OutputChunk] = deque()
        self._changes = Changes()
        #: Called once, when the close has been published (the owner forgets the process).
        self.on_closed: Any = None

    @property
    def finished(self) -> bool:
        """Nothing more will be published."""
        return self.closed or self.failure is not None

    def offer(self, event: Event) -> None:
        """A live event: publish it when its turn comes; ignore one already published."""
        if self.finished or event.seq <= self.last_published:
            return
        self.pending.setdefault(event.seq, event)
        self._publish_ready()

    def catch_up(self, read: dict[str, Any]) -> None:
        """Fill the gap from a ``process/read`` answer for ``afterSeq = last_published``.

        Raises ``RecoveryGap`` when the events the client missed cannot all be accounted
        for (the server evicted some of the output) or the answer contradicts itself.
        """
        failure = read.get("failure")
        if failure:
            raise RecoveryGap(f"the executor reported a failure: {failure}")
        target = int(read["nextSeq"]) - 1
        if self.finished or target <= self.last_published:
            return
        for raw in read.get("chunks") or ():
            seq = int(raw["seq"])
            if seq > target:
                raise RecoveryGap(f"chunk {seq} is past the read's end {target}")
            if seq > self.last_published:
                chunk = OutputChunk(seq, raw["stream"], base64.b64decode(raw["chunk"]))
                self.pending.setdefault(seq, chunk)
        if read.get("closed"):
            # The close is always the last event: it has the highest seq.
            at_target = self.pending.get(target)
            if at_target is not None and not isinstance(at_target, Closed):
                raise RecoveryGap(f"the close at {target} collides with another event")
            self.pending.setdefault(target, Closed(target))
        held = sum(1 for seq in self.pending if self.last_published < seq <= target)
        missing = target - self.last_published - held
        exit_known = self.exit is not None or any(
            isinstance(event, Exited) for event in self.pending.values()
        )
        if read.get("exited") and not exit_known:
            # The exit used exactly one seq; it must be the only one unaccounted for.
            if missing != 1 or read.get("exitCode") is None:
                raise RecoveryGap(f"output up to seq {target} is no longer retained")
            seq = self._first_missing(target)
            denied = bool(read.get("sandboxDenied", False))
            self.pending[seq] = Exited(seq, ExitResult(int(read["exitCode"]), denied))
        elif missing:
            raise RecoveryGap(
                f"{missing} event(s) up to seq {target} are no longer retained by the server"
            )
        self._publish_ready()

    def fail(self, error: ClientError) -> None:
        """End the process's stream with ``error`` (kept: the first failure wins)."""
        if self.finished:
            return
        self.failure = error
        self.pending.clear()
        self._changes.notify()

    async def next_chunk(self) -> OutputChunk | None:
        """The next published chunk; ``None`` after the close; the failure, raised."""
        while True:
            if self._chunks:
                return self._chunks.popleft()
            if self.closed:
                return None
            if self.failure is not None:
                raise self.failure
            await self._changes.wait()

    async def wait_exit(self) -> ExitResult:
        """The exit, once published; the failure, raised, if it never will be."""
        while True:
            if self.exit is not None:
                return self.exit
            if self.failure is not None:
                raise self.failure
            if self.closed:  # a close always follows an exit; defensive
                raise ClientError(f"process {self.process_id} closed without an exit")
            await self._changes.wait()

    def _first_missing(self, target: int) -> int:
        seq = self.last_published + 1
        while seq in self.pending and seq <= target:
            seq += 1
        return seq

    def _publish_ready(self) -> None:
        published = False
        while (event := self.pending.pop(self.last_published + 1, None)) is not None:
            self.last_published = event.seq
            published = True
            if isinstance(event, OutputChunk):
                self._chunks.append(event)
            elif isinstance(event, Exited):
                self.exit = event.result
            else:
                self.closed = True
                self.pending.clear()
                if self.on_closed is not None:
                    self.on_closed(self)
                break
        if published:
            self._changes.notify()
