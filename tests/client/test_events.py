"""The ordering buffer on its own: out-of-order and duplicate events, and catch-ups."""

from __future__ import annotations

import asyncio
import base64

import pytest

from executor.client.errors import ClientError
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
