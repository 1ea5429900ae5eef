"""Process handles: output published strictly in seq order, exit and close, catch-up."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

__all__ = ["ExitResult", "OutputChunk", "Process", "RunResult"]

Stream = Literal["stdout", "stderr", "pty"]


@dataclass(frozen=True, slots=True)
class OutputChunk:
    """One piece of a process's output, as the server numbered it."""

    seq: int
    stream: Stream
    data: bytes


@dataclass(frozen=True, slots=True)
class ExitResult:
    """How a process ended."""

    exit_code: int
    #: The executor classified a failed exit as a sandbox denial.
    sandbox_denied: bool = False
    #: The executor's own failure text, when it reported one (``process/read``'s ``failure``).
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class RunResult:
    """A finished process with all of its output (``Environment.run``)."""

    exit_code: int
    sandbox_denied: bool
    stdout: bytes
    stderr: bytes


class Process:
    """A process started by ``Environment.start``."""

    id: str
    sandbox_type: str
    tty: bool

    def output(self) -> AsyncIterator[OutputChunk]:
        """Every output chunk exactly once, in order, until the process closed."""
        raise NotImplementedError

    async def wait(self) -> ExitResult:
        """Wait for the process to exit."""
        raise NotImplementedError

    async def write(
        self, data: bytes, *, write_id: str | None = None, replay: bool = False
    ) -> None:
        """Write to the process's stdin (or terminal)."""
        raise NotImplementedError

    async def signal(self, signal: str = "interrupt") -> None:
        """Send a signal (the protocol knows ``interrupt``)."""
        raise NotImplementedError

    async def terminate(self) -> bool:
        """Kill the process tree; ``True`` if it was still running."""
        raise NotImplementedError
