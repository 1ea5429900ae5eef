"""The ordering buffer on its own: out-of-order and duplicate events, and catch-ups."""

from __future__ import annotations

import asyncio
import base64

import pytest

from executor.client.errors import ClientError, ProcessLost
from executor.client.events import (
    Closed,
    Event,
    Exited,
    ExitResult,
    OutputChunk,
    ProcessEvents,
    RecoveryGap,
)


def chunk(seq: int, data: bytes = b"", stream: str = "stdout") -> OutputChunk:
    return OutputChunk(seq, stream, data or f"{seq}\n".encode())  # type: ignore[arg-type]


def wire(seq: int, data: bytes = b"") -> dict[str, object]:
    return {"seq": seq, "stream": "stdout", "chunk": base64.b64encode(data or f"{seq}\n".encode())}


def drain(events: ProcessEvents) -> list[int]:
    async def collect() -> list[int]:
        seqs = []
        while (c := await asyncio.wait_for(events.next_chunk(), 1)) is not None:
            seqs.append(c.seq)
        return seqs

    return asyncio.run(collect())


def test_out_of_order_events_are_published_in_seq_order_once() -> None:
    events = ProcessEvents("p")
    arrivals: list[Event] = [chunk(3), chunk(1), chunk(1), Closed(5), chunk(2)]
    for event in [*arrivals, Exited(4, ExitResult(0))]:
        events.offer(event)
    events.offer(chunk(2))  # a late duplicate
    assert events.closed and events.exit == ExitResult(0)
    assert drain(events) == [1, 2, 3]


def test_an_exit_waits_for_the_output_before_it() -> None:
    events = ProcessEvents("p")
    events.offer(Exited(2, ExitResult(3)))
    assert events.last_published == 0  # seq 1 is not out yet
    events.offer(chunk(1))
    assert events.last_published == 2
    assert events.exit == ExitResult(3)
    assert not events.closed


def test_catch_up_inserts_retained_chunks_and_reconstructs_exit_and_close() -> None:
    events = ProcessEvents("p")
    events.offer(chunk(1))
    events.offer(chunk(5))  # a live event that arrived ahead of the catch-up
    # Missed: 2, 3 (output), 4 (exit), then 5 (output, held), 6 (close).
    events.catch_up(
        {
            "chunks": [wire(2), wire(3), wire(5)],
            "nextSeq": 7,
            "exited": True,
            "exitCode": 7,
            "closed": True,
            "failure": None,
            "sandboxDenied": True,
        }
    )
    assert events.exit == ExitResult(7, sandbox_denied=True)
    assert events.closed
    assert drain(events) == [1, 2, 3, 5]


def test_a_catch_up_behind_what_was_published_changes_nothing() -> None:
    events = ProcessEvents("p")
    for seq in (1, 2, 3):
        events.offer(chunk(seq))
    events.catch_up({"chunks": [wire(2)], "nextSeq": 3, "exited": False, "closed": False})
    assert events.last_published == 3
    assert drain_no_close(events) == [1, 2, 3]


def drain_no_close(events: ProcessEvents) -> list[int]:
    out = []
    while events._chunks:
        out.append(events._chunks.popleft().seq)
    return out


def test_evicted_output_is_a_gap() -> None:
    events = ProcessEvents("p")
    events.offer(chunk(1))
    with pytest.raises(RecoveryGap, match="no longer retained"):
        events.catch_up({"chunks": [wire(9), wire(10)], "nextSeq": 11, "exited": False})


def test_evicted_output_before_an_exit_is_a_gap() -> None:
    events = ProcessEvents("p")
    read = {"chunks": [wire(5)], "nextSeq": 7, "exited": True, "exitCode": 0, "closed": True}
    with pytest.raises(RecoveryGap):
        events.catch_up(read)


def test_a_close_colliding_with_output_is_refused() -> None:
    events = ProcessEvents("p")
    with pytest.raises(RecoveryGap, match="collides"):
        events.catch_up({"chunks": [wire(1)], "nextSeq": 2, "exited": True, "closed": True})


def test_a_failure_ends_output_after_what_was_delivered() -> None:
    events = ProcessEvents("p")
    events.offer(chunk(1))
    events.fail(ClientError("gone"))
    events.offer(chunk(2))  # ignored once failed

    async def consume() -> None:
        assert (await events.next_chunk()) == chunk(1)
        with pytest.raises(ClientError, match="gone"):
            await events.next_chunk()
        with pytest.raises(ClientError, match="gone"):
            await events.wait_exit()

    asyncio.run(consume())


class Retention:
    """A server's retained output, as ``process/read`` answers from it: chunks with a seq
    from ``oldest`` on (older ones were evicted)."""

    def __init__(self, chunks: list[OutputChunk], oldest: int = 1) -> None:
        self.chunks = chunks
        self.oldest = oldest
        self.reads: list[tuple[int, int | None]] = []

    async def fetch(self, after: int, max_bytes: int | None) -> dict[str, object]:
        self.reads.append((after, max_bytes))
        out: list[dict[str, object]] = []
        total = 0
        for c in self.chunks:
            if c.seq <= after or c.seq < self.oldest:
                continue
            if out and max_bytes is not None and total + len(c.data) > max_bytes:
                break
            out.append(wire(c.seq, c.data))
            total += len(c.data)
        return {"chunks": out, "nextSeq": 0, "exited": False, "closed": False}


def test_past_the_bound_output_is_fetched_again_once_the_reader_catches_up() -> None:
    """Forty 4-byte chunks, an exit and a close, all published before anything is read,
    with a 10-byte bound: every chunk arrives once and in order, the buffer never holds
    more than the bound, and the close waits for the gap to be filled."""
    chunks = [chunk(seq, b"%04d" % seq) for seq in range(1, 41)]
    server = Retention(chunks)
    events = ProcessEvents("p", limit=10, fetch=server.fetch)
    for c in chunks:
        events.offer(c)
    events.offer(Exited(41, ExitResult(0)))
    events.offer(Closed(42))
    assert events.exit == ExitResult(0)
    closed_at_once = events.closed  # (not before the reader has the whole output)
    assert not closed_at_once and events.buffered == 8
    assert drain(events) == list(range(1, 41))
    assert events.closed and events.peak_buffered <= 10
    assert server.reads[0] == (2, 10) and len(server.reads) == 19


def test_a_gap_across_the_exit_is_filled_around_it() -> None:
    events_in_order: list[Event] = [chunk(1, b"aaaa"), chunk(2, b"bbbb")]
    events_in_order += [Exited(3, ExitResult(0)), chunk(4, b"cccc"), Closed(5)]
    server = Retention([c for c in events_in_order if isinstance(c, OutputChunk)])
    events = ProcessEvents("p", limit=4, fetch=server.fetch)
    for event in events_in_order:
        events.offer(event)
    assert drain(events) == [1, 2, 4]


def test_a_gap_the_server_no_longer_retains_fails_the_process_alone() -> None:
    chunks = [chunk(seq, b"%04d" % seq) for seq in range(1, 21)]
    server = Retention(chunks, oldest=9)
    lost: list[ProcessEvents] = []
    events = ProcessEvents("p", limit=8, fetch=server.fetch)
    events.on_lost = lost.append
    for c in chunks:
        events.offer(c)

    async def consume() -> list[int]:
        seqs = [(await events.next_chunk()) for _ in range(2)]
        with pytest.raises(ProcessLost, match="from seq 3 to seq 20") as caught:
            await events.next_chunk()
        assert "no longer retains" in str(caught.value)
        return [c.seq for c in seqs if c is not None]

    assert asyncio.run(consume()) == [1, 2]
    assert lost == [events]


def test_adopting_starts_at_the_oldest_retained_chunk() -> None:
    evicted = ProcessEvents("p")
    evicted.adopt({"chunks": [wire(5), wire(6)], "nextSeq": 9, "exited": True, "exitCode": 2,
                   "closed": True})  # fmt: skip
    assert drain(evicted) == [5, 6] and evicted.exit == ExitResult(2) and evicted.closed
    outlived = ProcessEvents("p")  # the exit (seq 3) is older than what is retained
    outlived.adopt({"chunks": [wire(7)], "nextSeq": 9, "exited": True, "exitCode": 0,
                    "closed": True})  # fmt: skip
    assert drain(outlived) == [7] and outlived.exit == ExitResult(0)
    nothing = ProcessEvents("p")
    nothing.adopt({"chunks": [], "nextSeq": 1, "exited": False, "closed": False})
    nothing.offer(chunk(1))
    assert nothing.last_published == 1 and not nothing.closed
