"""The ``writeId``s a process has accepted lately, so a retried ``process/write`` is not doubled.

A client that loses its connection cannot tell whether its last writes arrived; it resumes
the session and sends them again with the same ``writeId``. Like the reference, a process
remembers the ids of its last ``WINDOW`` accepted writes (per process, oldest forgotten
first) and answers a repeat ``accepted`` without writing the chunk again. Ids are remembered
by a 128-bit digest, so a full window costs the same ~340 KiB whatever the ids are (a
million-character id included), and is freed with the process.
"""

from __future__ import annotations

import hashlib
from typing import Final

__all__ = ["WINDOW", "AcceptedWriteIds"]

#: How many accepted ids each process remembers (the reference keeps 4096).
WINDOW: Final = 4096


class AcceptedWriteIds:
    """A bounded first-in-first-out set of accepted ``writeId``s."""

    __slots__ = ("_ids", "_window")

    def __init__(self, window: int = WINDOW) -> None:
        # A dict keeps insertion order: the oldest id is the first key.
        self._ids: dict[bytes, None] = {}
        self._window = window

    def __contains__(self, write_id: str) -> bool:
        return _key(write_id) in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def remember(self, write_id: str) -> None:
        """Record an accepted id, forgetting the oldest beyond the window."""
        key = _key(write_id)
        if key in self._ids:
            return
        self._ids[key] = None
        if len(self._ids) > self._window:
            del self._ids[next(iter(self._ids))]


def _key(write_id: str) -> bytes:
    # A collision of two ids would drop a write; at 128 bits it will not happen by chance,
    # and a client can only collide its own ids of one process.
    return hashlib.blake2b(write_id.encode("utf-8", "surrogatepass"), digest_size=16).digest()
