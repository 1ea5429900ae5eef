"""Process handles: output in order and exactly once, the exit, stdin, signals."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from executor.client.errors import ClientError, OutcomeUnknown
from executor.client.events import ExitResult, OutputChunk, ProcessEvents
from executor.protocol import b64codec, methods

if TYPE_CHECKING:
    from executor.client.recovery import Link

__all__ = ["ExitResult", "OutputChunk", "Process", "RunResult", "StdinClosed"]


class StdinClosed(ClientError):
    """The process has no writable stdin (started without ``stdin=True`` and no tty), or
    it is gone."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """A finished process with all of its output (``Environment.run``)."""

    exit_code: int
    sandbox_denied: bool
    stdout: bytes
    stderr: bytes


class Process:
    """A process started by ``Environment.start``.

    Its events survive a dropped connection: the client resumes the session and fetches
    what it missed, so ``output()`` yields every chunk exactly once and in order, and
    ``wait()`` returns the exit, unless the server no longer retains the missed output
    (``ProcessLost``) or the session cannot be resumed (``SessionFailed``).
    """

    def __init__(
        self, link: Link, events: ProcessEvents, *, sandbox_type: str, tty: bool, stdin: bool
    ) -> None:
        self._link = link
        self._events = events
        #: The sandbox the executor put the process in (``none``, ``linuxSeccomp``, ...).
        self.sandbox_type = sandbox_type
        self.tty = tty
        #: Whether the process has a writable stdin (a pipe asked for, or its terminal).
        self.stdin = stdin or tty

    @property
    def id(self) -> str:
        """The process id in the session (chosen by the client, not an OS pid)."""
        return self._events.process_id

    @property
    def exit(self) -> ExitResult | None:
        """The exit, once it is known."""
        return self._events.exit

    @property
    def buffered_bytes(self) -> int:
        """Output received and not read yet: at most the connection's
        ``output_buffer_bytes`` (or one chunk, if a chunk is larger)."""
        return self._events.buffered

    @property
    def closed(self) -> bool:
        """Every output chunk has been received (they may still be unread)."""
        return self._events.closed

    async def output(self) -> AsyncIterator[OutputChunk]:
        """Every output chunk, in order, exactly once, until the process has closed (exited
        and every stream ended). Meant for one consumer: chunks are handed out once. Unread
        output is kept up to a bound; past it, it is fetched again from the server when
        this reader catches up (``ProcessLost`` if the server no longer has it).

        Raises ``ProcessLost`` or ``SessionFailed`` after the last chunk that could be
        delivered when the process can no longer be followed.
        """
        while (chunk := await self._events.next_chunk()) is not None:
            yield chunk

    async def wait(self) -> ExitResult:
        """Wait for the process to exit (output may still follow, from descendants that
        keep its streams open; ``output()`` ends at the close)."""
        return await self._events.wait_exit()

    async def write(
        self, data: bytes, *, write_id: str | None = None, replay: bool = False
    ) -> None:
        """Write ``data`` to the process's stdin (or its terminal).

        A write in flight when the connection drops raises ``OutcomeUnknown`` carrying its
        ``write_id``. Sending it again with the same ``write_id`` is safe: the server
        accepts a ``writeId`` once. ``replay=True`` makes the client do that itself after
        reconnecting.
        """
        write_id = write_id or uuid.uuid4().hex
        params = {
            "processId": self.id,
            "chunk": b64codec.encode(data).decode(),
            "writeId": write_id,
        }
        for attempt in range(50):
            try:
                result = await self._link.call(methods.PROCESS_WRITE, params, idempotent=replay)
            except OutcomeUnknown as exc:
                exc.write_id = write_id
                raise
            status = (result or {}).get("status")
            if status == "accepted":
                return
            if status == "starting" and attempt < 49:
                await asyncio.sleep(0.02)
                continue
            if status == "stdinClosed":
                raise StdinClosed(f"process {self.id} has no writable stdin")
            raise StdinClosed(f"process {self.id}: write refused ({status})")

    async def close_stdin(self) -> None:
        """End the process's stdin: it reads EOF (``process/write`` ``closeStdin``, this
        executor's extension; the reference ignores the field, and its commands never see
        the end of their input)."""
        params = {
            "processId": self.id,
            "chunk": "",
            "writeId": uuid.uuid4().hex,
            "closeStdin": True,
        }
        # Closing twice is harmless: resent after a dropped connection, like terminate.
        await self._link.call(methods.PROCESS_WRITE, params, idempotent=True)

    async def resize(self, rows: int, cols: int) -> None:
        """Give the process's terminal a new size (``process/resizePty``, this executor's
        extension: the reference answers it with "method not found", a ``ServerError``)."""
        params = {"processId": self.id, "size": {"rows": rows, "cols": cols}}
        await self._link.call(methods.PROCESS_RESIZE_PTY, params, idempotent=True)

    async def signal(self, signal: str = "interrupt") -> None:
        """Send a signal: ``interrupt`` (SIGINT to its process group, or ^C to its
        terminal) is the one the protocol has."""
        await self._link.call(
            methods.PROCESS_SIGNAL, {"processId": self.id, "signal": signal}, idempotent=False
        )

    async def terminate(self) -> bool:
        """Kill the process and everything it started (SIGKILL); ``True`` if it was still
        running. Killing twice is harmless, so a terminate cut off by a dropped connection
        is sent again after reconnecting."""
        result = await self._link.call(
            methods.PROCESS_TERMINATE, {"processId": self.id}, idempotent=True
        )
        return bool((result or {}).get("running", False))

    async def collect(self) -> RunResult:
        """Read all output to the close and return it with the exit (``pty`` output counts
        as stdout)."""
        stdout, stderr = bytearray(), bytearray()
        async for chunk in self.output():
            (stderr if chunk.stream == "stderr" else stdout).extend(chunk.data)
        result = await self.wait()
        return RunResult(result.exit_code, result.sandbox_denied, bytes(stdout), bytes(stderr))

    def __repr__(self) -> str:
        state = "closed" if self.closed else ("exited" if self.exit else "running")
        return f"<Process {self.id} {state}>"
