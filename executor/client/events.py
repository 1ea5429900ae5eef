"""One process's events, published strictly in ``seq`` order, exactly once.

The server numbers every output chunk, the exit and the close of a process with one counter.
Events may reach the client out of order (the reference sends a process's streams from
different tasks) and twice (a live notification and the same chunk fetched by a catch-up
``process/read``), so each is held until every lower seq has been published, and anything
at or below the last published seq is dropped. A catch-up after a reconnect fills the gap
from what the server still retains, and reconstructs the exit and close, which
``process/read`` reports as flags rather than as numbered events, at the seqs they used.

What is published waits for its reader in a buffer bounded per process (``limit`` bytes).
A chunk that would take it over the bound is not kept: the run of seqs dropped so is
remembered as a *gap*, and every later chunk joins it until the reader has emptied the
buffer; then the gap is fetched again, ``limit`` bytes at a time, with ``process/read`` from
what the server retains. Only when the server no longer has it does the process fail
(``ProcessLost`` naming the seqs), after everything before the gap was read.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from executor.client.errors import ClientError, ProcessLost
from executor.protocol import b64codec

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

#: ``fetch(after_seq, max_bytes)``: a ``process/read`` of the process's retained output.
Fetch = Callable[[int, int | None], Awaitable[dict[str, Any]]]


class RecoveryGap(ClientError):
    """The catch-up cannot account for every event the client missed."""


def event_from_notification(method: str, params: dict[str, Any]) -> Event | None:
    """The event a ``process/*`` notification carries (``None`` for other methods)."""
    seq = int(params["seq"])
    if method == "process/output":
        return OutputChunk(seq, params["stream"], b64codec.decode(params["chunk"]))
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

    def __init__(
        self, process_id: str, *, limit: int | None = None, fetch: Fetch | None = None
    ) -> None:
        self.process_id = process_id
        #: Most bytes of published output kept for the reader (``None``: no bound; a bound
        #: needs ``fetch``, to get back what it did not keep).
        self.limit = limit if fetch is not None else None
        self._fetch = fetch
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
        #: Bytes in ``_chunks``, and the most there ever were.
        self.buffered = 0
        self.peak_buffered = 0
        #: ``[after, through]``: published chunks with seqs in (after, through] were not
        #: kept (the buffer was full); everything up to ``after`` was.
        self._gap: list[int] | None = None
        #: The seq of the exit, once published (a gap may span it: it holds no chunk).
        self._exit_seq: int | None = None
        #: The close's seq, published while a gap was open: the close is the reader's only
        #: once the gap is filled.
        self._close_seq: int | None = None
        self._changes = Changes()
        #: Called once, when the close has been published (the owner forgets the process).
        self.on_closed: Any = None
        #: Called once, when output the reader did not keep is gone for good.
        self.on_lost: Any = None

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
                chunk = OutputChunk(seq, raw["stream"], b64codec.decode(raw["chunk"]))
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

    def adopt(self, read: dict[str, Any]) -> None:
        """Follow a process this client did not start, from a ``process/read`` answer for
        ``afterSeq = 0``: what the server no longer retains is skipped (the output starts
        at its oldest retained chunk), the rest is published as a catch-up would."""
        chunks = read.get("chunks") or ()
        target = int(read["nextSeq"]) - 1
        if chunks:
            start = int(chunks[0]["seq"]) - 1
        else:
            # Nothing retained: only the exit and the close, if they happened, are left.
            start = target - bool(read.get("exited")) - bool(read.get("closed"))
        self.last_published = max(0, start)
        inside = target - self.last_published - len(chunks) - bool(read.get("closed"))
        if read.get("exited") and inside == 0 and read.get("exitCode") is not None:
            # The exit came before the oldest retained chunk (output that outlived it).
            denied = bool(read.get("sandboxDenied", False))
            self.exit = ExitResult(int(read["exitCode"]), denied)
        self.catch_up(read)

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
                chunk = self._chunks.popleft()
                self.buffered -= len(chunk.data)
                return chunk
            if self.closed:
                return None
            if self.failure is not None:
                raise self.failure
            if self._gap is not None:
                await self._fill_gap()
                continue
            await self._changes.wait()

    async def _fill_gap(self) -> None:
        """Fetch the next part of the gap (at most ``limit`` bytes) from the server."""
        assert self._gap is not None and self._fetch is not None
        try:
            read = await self._fetch(self._gap[0], self.limit)
        except ClientError as exc:
            if not self.finished and self._gap is not None:
                self._lose(f"reading it again failed: {exc}")
            return
        gap = self._gap
        if self.finished or gap is None:
            return
        progressed = False
        for raw in read.get("chunks") or ():
            seq = int(raw["seq"])
            if seq <= gap[0]:
                continue
            if seq > gap[1]:
                break  # published after the gap: it has its place already
            if any(missing != self._exit_seq for missing in range(gap[0] + 1, seq)):
                break  # evicted: the server keeps only the newest output
            self._keep(OutputChunk(seq, raw["stream"], b64codec.decode(raw["chunk"])))
            gap[0] = seq
            progressed = True
        if gap[0] >= gap[1]:
            self._gap = None
            if self._close_seq is not None:
                self._publish_close()
            self._changes.notify()
        elif not progressed:
            self._lose("the server no longer retains it")

    def _lose(self, reason: str) -> None:
        assert self._gap is not None
        first, last = self._gap[0] + 1, self._gap[1]
        self.fail(
            ProcessLost(
                self.process_id,
                f"its output from seq {first} to seq {last} was not kept (its reader fell "
                f"more than {self.limit} bytes behind) and {reason}",
                recovering=False,
            )
        )
        if self.on_lost is not None:
            self.on_lost(self)

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
                self._publish_chunk(event)
            elif isinstance(event, Exited):
                self.exit = event.result
                self._exit_seq = event.seq
            else:
                self.pending.clear()
                if self._gap is None:
                    self._publish_close()
                else:
                    self._close_seq = event.seq
                break
        if published:
            self._changes.notify()

    def _publish_chunk(self, chunk: OutputChunk) -> None:
        if self._gap is not None:
            self._gap[1] = chunk.seq  # after a gap, nothing is kept until it is filled
        elif (
            self.limit is not None and self._chunks and self.buffered + len(chunk.data) > self.limit
        ):
            self._gap = [chunk.seq - 1, chunk.seq]
        else:
            self._keep(chunk)

    def _keep(self, chunk: OutputChunk) -> None:
        self._chunks.append(chunk)
        self.buffered += len(chunk.data)
        self.peak_buffered = max(self.peak_buffered, self.buffered)

    def _publish_close(self) -> None:
        self.closed = True
        self._close_seq = None
        if self.on_closed is not None:
            self.on_closed(self)
