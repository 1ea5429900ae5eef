"""OutputLog (protocol.md §5.6) as a unit: one seq counter, paging, bounded retention."""

from __future__ import annotations

import sys

import pytest

from executor.output import OutputLog
from executor.protocol.messages import Stream


def _log(*sizes: int, max_bytes: int = 1 << 20) -> OutputLog:
    log = OutputLog(max_bytes=max_bytes)
    for index, size in enumerate(sizes):
        log.append(Stream.STDOUT if index % 2 == 0 else Stream.STDERR, bytes([65 + index]) * size)
    return log


def test_one_counter_for_output_exit_and_close() -> None:
    """Chunks, exited and closed share the counter from 1; reads skip the event numbers."""
    log = _log(3, 4)
    assert log.mark_exited(0) == 3
    assert log.append(Stream.STDOUT, b"late").seq == 4
    assert log.mark_closed() == 5
    window = log.read(0)
    assert [c.seq for c in window.chunks] == [1, 2, 4]
    assert window.next_seq == 6
    assert log.exit_code == 0


def test_exit_and_close_are_recorded_once_and_in_order() -> None:
    """close before exit, or either twice, is a programming error."""
    log = OutputLog()
    with pytest.raises(RuntimeError):
        log.mark_closed()
    log.mark_exited(1)
    with pytest.raises(RuntimeError):
        log.mark_exited(1)
    log.mark_closed()
    with pytest.raises(RuntimeError):
        log.mark_closed()


@pytest.mark.parametrize(
    ("after", "max_bytes", "seqs", "next_seq"),
    [
        (0, None, [1, 2, 3, 4], 6),
        (2, None, [3, 4], 6),
        (4, None, [], 6),
        (5, None, [], 6),
        (99, None, [], 6),
        (0, 0, [1], 2),
        (0, 1, [1], 2),
        (0, 10, [1], 2),
        (0, 30, [1, 2], 3),
        (0, 29, [1], 2),
        (1, 20, [2], 3),
        (3, 0, [4], 6),
        (0, 10**30, [1, 2, 3, 4], 6),
    ],
    ids=[
        "all",
        "after-2",
        "after-last-chunk",
        "after-exit-event",
        "beyond-end",
        "max-0-one-chunk",
        "max-1-one-chunk",
        "first-chunk-always",
        "fits-exactly",
        "one-byte-short",
        "page-from-middle",
        "last-page-reaches-end",
        "huge-max",
    ],
)
def test_read_paging(after: int, max_bytes: int | None, seqs: list[int], next_seq: int) -> None:
    """afterSeq/maxBytes/nextSeq exactly as §5.6: whole chunks, first one always, nextSeq rules."""
    log = _log(10, 20, 30, 5)
    log.mark_exited(0)
    window = log.read(after, max_bytes)
    assert [c.seq for c in window.chunks] == seqs
    assert window.next_seq == next_seq


def test_retention_evicts_whole_oldest_chunks() -> None:
    """Past the byte bound whole oldest chunks go; seqs keep increasing, a reader sees a jump."""
    log = _log(40, 40, 40, max_bytes=100)
    assert [c.seq for c in log.read(0).chunks] == [2, 3]
    assert log.retained_bytes == 80
    log.append(Stream.STDOUT, b"x" * 100)
    assert [c.seq for c in log.read(0).chunks] == [4]
    assert log.read(1).next_seq == 5


def test_evicted_chunks_are_released_at_once() -> None:
    """An evicted chunk's bytes are freed when it is evicted, not when its slot is compacted.

    (They once stayed referenced until 1,024 chunks had gone: 64 MiB of 64 KiB reads kept
    alive behind a 1 MiB retention.)
    """
    log = OutputLog(max_bytes=100)
    first = bytes(bytearray(b"a" * 40))  # an object of its own, referenced only here
    references = sys.getrefcount(first)
    log.append(Stream.STDOUT, first)
    assert sys.getrefcount(first) > references
    for _ in range(10):  # far fewer than the batch in which evicted slots are compacted
        log.append(Stream.STDOUT, b"b" * 40)
    assert sys.getrefcount(first) == references
    assert [c.seq for c in log.read(0).chunks] == [10, 11]
    assert log.all_output() == b"b" * 80


def test_a_single_oversized_chunk_is_kept() -> None:
    """The newest chunk stays even when it alone exceeds the bound."""
    log = _log(500, max_bytes=100)
    assert [len(c.data) for c in log.read(0).chunks] == [500]


def test_chunk_count_is_bounded_too() -> None:
    """The number of retained chunks is bounded as well as their bytes."""
    log = OutputLog(max_bytes=1 << 30, max_chunks=10)
    for _ in range(5000):
        log.append(Stream.STDOUT, b"y")
    window = log.read(0)
    assert [c.seq for c in window.chunks] == list(range(4991, 5001))
    assert log.retained_bytes == 10


def test_has_after_and_all_output() -> None:
    """has_after looks at retained chunks; all_output joins them oldest first."""
    log = _log(2, 3)
    assert log.has_after(1)
    assert not log.has_after(2)
    assert log.all_output() == b"AABBB"
    empty = OutputLog()
    assert not empty.has_after(0)
    assert empty.read(0).next_seq == 1


def test_floor_keeps_unread_chunks_past_the_bounds_and_holds() -> None:
    """Chunks at or after the floor are never evicted; a full log of them is ``holding``."""
    log = _log(40, 40, max_bytes=100)
    log.set_floor(2)
    assert not log.holding  # 80 of 100 bytes
    log.append(Stream.STDOUT, b"c" * 40)  # 120 bytes: chunk 1 (below the floor) goes
    assert [c.seq for c in log.read(0).chunks] == [2, 3]
    assert not log.holding
    log.append(Stream.STDOUT, b"d" * 40)  # 120 bytes, all at or after the floor: kept
    assert [c.seq for c in log.read(0).chunks] == [2, 3, 4]
    assert log.holding
    log.set_floor(4)  # a reader confirmed 2 and 3: evictable again, down to the bound
    assert [c.seq for c in log.read(0).chunks] == [3, 4]
    assert not log.holding
    log.set_floor(None)
    assert not log.holding


def test_floor_counts_chunks_too() -> None:
    """The chunk bound holds the log as well; lifting the floor evicts down to the bounds."""
    log = OutputLog(max_bytes=1 << 30, max_chunks=3)
    log.set_floor(1)
    for _ in range(3):
        log.append(Stream.STDOUT, b"z")
    assert log.holding
    log.append(Stream.STDOUT, b"z")  # the owner stops reading; one more chunk at most
    assert [c.seq for c in log.read(0).chunks] == [1, 2, 3, 4]
    log.set_floor(None)
    assert [c.seq for c in log.read(0).chunks] == [2, 3, 4]
    assert not log.holding
