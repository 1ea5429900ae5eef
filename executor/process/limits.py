"""Bounds of the process family: per-session and daemon-wide caps, buffers and timers."""

from __future__ import annotations

from dataclasses import dataclass

from executor.errors import InvalidRequest
from executor.output import DEFAULT_RETAINED_BYTES, DetachedOutput

__all__ = ["LiveProcessCounter", "ProcessLimits"]


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
