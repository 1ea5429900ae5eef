"""OutputLog: the events of one process, addressed by sequence number, bounded in bytes.

Output chunks, the exit event and the close event share one counter starting at 1, so a
reader sees gaps where ``exited``/``closed`` consumed numbers. Retention is bounded in bytes
(and in chunks); when exceeded, whole oldest chunks are evicted and a reader that fell behind
simply sees a jump. A ``floor`` exempts chunks from eviction (no client has read them yet, see
``DetachedOutput.BLOCK``): the log then reports ``holding`` and its owner stops reading the
process instead of losing output. Pure: no I/O, no clock.
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass

from executor.protocol.messages import OutputChunk, Stream

__all__ = [
    "DEFAULT_RETAINED_BYTES",
    "DEFAULT_RETAINED_CHUNKS",
    "DetachedOutput",
    "OutputLog",
    "ReadSlice",
]

#: The reference retains about 1 MiB of output per process.
DEFAULT_RETAINED_BYTES = 1024 * 1024
#: The reference also caps the number of retained chunks.
DEFAULT_RETAINED_CHUNKS = 50_000


class DetachedOutput(enum.Enum):
    """What happens to a process's output that no client has read when retention is full."""

    #: Evict the oldest chunks, as the reference does; a client that comes back sees a seq jump.
    EVICT = "evict"
    #: Keep what no client has read (while the session is detached, and after a resume until
    #: the client has read past it); stop reading the process, which then blocks on its writes.
    BLOCK = "block"


@dataclass(frozen=True, slots=True)
class ReadSlice:
    """What ``read`` found: chunks after the cursor, and where to continue."""

    chunks: tuple[OutputChunk, ...]
    next_seq: int


class OutputLog:
    """Seq-numbered events of one process with byte-bounded retention of output."""

    __slots__ = (
        "_bytes",
        "_chunks",
        "_head",
        "_next_seq",
        "closed_seq",
        "exit_code",
        "exited_seq",
        "floor",
        "max_bytes",
        "max_chunks",
    )

    def __init__(
        self,
        max_bytes: int = DEFAULT_RETAINED_BYTES,
        max_chunks: int = DEFAULT_RETAINED_CHUNKS,
    ) -> None:
        self.max_bytes = max_bytes
        self.max_chunks = max_chunks
        self._chunks: list[OutputChunk] = []
        self._head = 0  # index of the oldest retained chunk in _chunks
        self._bytes = 0
        self._next_seq = 1
        self.exit_code: int | None = None
        self.exited_seq: int | None = None
        self.closed_seq: int | None = None
        #: Chunks with ``seq >= floor`` are never evicted (None: evict by the bounds alone).
        self.floor: int | None = None

    @property
    def next_seq(self) -> int:
        """The sequence number the next event will get."""
        return self._next_seq

    @property
    def exited(self) -> bool:
        """The process has exited."""
        return self.exited_seq is not None

    @property
    def closed(self) -> bool:
        """The process has exited and every output stream reached EOF."""
        return self.closed_seq is not None

    @property
    def retained_bytes(self) -> int:
        """Bytes of output currently retained."""
        return self._bytes

    @property
    def holding(self) -> bool:
        """Retention is full of chunks the floor keeps: more output would exceed the bounds.

        It exceeds them by at most one chunk: the one whose append made the log hold.
        """
        chunks = self._chunks
        return (
            self.floor is not None
            and self._head < len(chunks)
            and chunks[self._head].seq >= self.floor
            and (self._bytes >= self.max_bytes or len(chunks) - self._head >= self.max_chunks)
        )

    def set_floor(self, floor: int | None) -> None:
        """Keep chunks from ``floor`` on (None: none); evicts what the bounds now allow."""
        self.floor = floor
        self._evict()

    def append(self, stream: Stream, data: bytes) -> OutputChunk:
        """Record a chunk of output and evict whole old chunks beyond the bounds."""
        chunk = OutputChunk(self._take_seq(), stream, data)
        self._chunks.append(chunk)
        self._bytes += len(data)
        self._evict()
        return chunk

    def mark_exited(self, exit_code: int) -> int:
        """Record the exit; returns its sequence number."""
        if self.exited_seq is not None:
            raise RuntimeError("exit recorded twice")
        self.exit_code = exit_code
        self.exited_seq = self._take_seq()
        return self.exited_seq

    def mark_closed(self) -> int:
        """Record that no more output will come; returns its sequence number."""
        if self.exited_seq is None or self.closed_seq is not None:
            raise RuntimeError("close must follow exit, once")
        self.closed_seq = self._take_seq()
        return self.closed_seq

    def has_after(self, after_seq: int) -> bool:
        """Whether a retained chunk has a sequence number greater than ``after_seq``."""
        return len(self._chunks) > self._head and self._chunks[-1].seq > after_seq

    def read(self, after_seq: int = 0, max_bytes: int | None = None) -> ReadSlice:
        """Retained chunks with ``seq > after_seq``; the first is included even if too large."""
        start = bisect.bisect_right(self._chunks, after_seq, lo=self._head, key=_seq)
        end = len(self._chunks)
        if max_bytes is not None and start < end:
            total = len(self._chunks[start].data)
            stop = start + 1
            while stop < end and total + len(self._chunks[stop].data) <= max_bytes:
                total += len(self._chunks[stop].data)
                stop += 1
            end = stop
        chunks = tuple(self._chunks[start:end])
        if end < len(self._chunks):
            return ReadSlice(chunks, chunks[-1].seq + 1)
        return ReadSlice(chunks, self._next_seq)

    def all_output(self) -> bytes:
        """Every retained byte of output, oldest first (for denial classification)."""
        return b"".join(chunk.data for chunk in self._chunks[self._head :])

    def _take_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _evict(self) -> None:
        chunks = self._chunks
        floor = self.floor
        while (
            self._head < len(chunks) - 1
            and (self._bytes > self.max_bytes or len(chunks) - self._head > self.max_chunks)
            and (floor is None or chunks[self._head].seq < floor)
        ):
            self._bytes -= len(chunks[self._head].data)
            # The slot is dropped from the list only in batches (below), but its bytes must
            # go now: left in place, up to 1,024 evicted chunks (64 MiB of 64 KiB reads)
            # stayed alive behind a 1 MiB retention.
            chunks[self._head] = _EVICTED
            self._head += 1
        if self._head > 1024 and self._head * 2 > len(chunks):
            del chunks[: self._head]
            self._head = 0


#: What an evicted chunk's slot holds until the slots before ``_head`` are deleted.
_EVICTED = OutputChunk(0, Stream.STDOUT, b"")


def _seq(chunk: OutputChunk) -> int:
    return chunk.seq
