"""``executor exec``: one command on a remote executor, as if it ran here.

The command runs through ``executor.client`` (so a dropped WebSocket connection is ridden
out: the client resumes the session and recovers the output it missed). Its stdout and
stderr go to ours as bytes, our stdin is forwarded (our EOF closes its stdin), and its exit
status is ours: 128+N when a signal N ended it, as shells say it. When the executor calls
the failure a sandbox denial, the line ``executor run`` prints is printed.

In a terminal (``tty``) the command gets one of its own on the executor's host: ours is put
in raw mode (restored on every way out), so keys, ^C included, go through as bytes; its
size is sent at the start and again on every SIGWINCH.

Closing stdin and the terminal's size are extensions of our daemon (``process/write``
``closeStdin``, ``process/start`` ``size``, ``process/resizePty``); the reference
exec-server has neither (its terminals are 24 x 80 and its stdin pipes never end), which a
probe tells once: it answers ``process/resizePty`` with "method not found".
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import posixpath
import select
import signal
import stat
import struct
import sys
import termios
import tty
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from executor.client import ClientError, Environment, ExitResult, Process, ServerError, connect
from executor.client.paths import native_path

__all__ = ["EXIT_LOST", "EXIT_NOT_STARTED", "ExecRequest", "exec_command"]

#: The command did not run: the executor could not be reached, or refused to start it.
EXIT_NOT_STARTED = 125
#: The executor was lost while the command ran (its fate is unknown), as ``ssh`` says it.
EXIT_LOST = 255
#: The JSON-RPC code of a method the server does not have.
METHOD_NOT_FOUND = -32601
#: How long the output may stay silent after the exit before we stop waiting for the rest
#: (descendants that keep the command's streams open), as ``executor run`` waits.
OUTPUT_GRACE = 5.0
#: Output kept for the denial line's evidence (the end of it), as the daemon retains.
KEPT_OUTPUT = 1 << 20
_CHUNK = 65536


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecRequest:
    """What ``executor exec`` was asked to do."""

    url: str
    token: str | None = None
    argv: tuple[str, ...]
    #: On the executor's host; relative to its working directory (default: that, or the
    #: first workspace).
    cwd: str | None = None
    profile: str | None = None
    workspace_roots: tuple[str, ...] = ()
    #: Overrides the profile's network (``executor run --network on|off``); ``None``: as is.
    network: bool | None = None
    #: Set on top of what ``env_policy`` gives the command (they win).
    env: Mapping[str, str]
    #: The wire ``envPolicy``: how the command's environment derives from the executor's.
    env_policy: Mapping[str, Any]
    tty: bool = False
    #: Forward our stdin; ``False``: never read it, the command's stdin is empty.
    stdin: bool = True


class _OutputGone(Exception):
    """Our stdout or stderr was closed by its reader (``| head``)."""


async def exec_command(request: ExecRequest) -> int:
    """Run ``request`` on the executor; the command's exit status (or ours, see
    ``EXIT_NOT_STARTED``/``EXIT_LOST``). Messages go to stderr."""
    # Recovering is silent; a session that fails is reported here, once.
    logging.getLogger("executor.client").addHandler(logging.NullHandler())
    try:
        env = await connect(request.url, token=request.token)
    except Exception as exc:
        message = _describe(exc)
        if "cannot connect" not in message:
            message = f"cannot connect: {message}"
        if "HTTP 401" in message:
            message += " (no token, or the wrong one: --token-file)"
        _say(f"{request.url}: {message}")
        return EXIT_NOT_STARTED
    try:
        return await _Exec(env, request).run()
    finally:
        with contextlib.suppress(Exception):
            await env.close()


def _say(message: str) -> None:
    print(f"executor: {message}", file=sys.stderr, flush=True)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ServerError):
        return exc.message
    return str(exc) or type(exc).__name__


class _Exec:
    """One command on one executor, relayed both ways."""

    def __init__(self, env: Environment, request: ExecRequest) -> None:
        self.env = env
        self.request = request
        self.loop = asyncio.get_running_loop()
        self.kept = bytearray()
        self.killed_by: int | None = None
        self.extended = False
        self.proc: Process | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Chunks written out, so the wait after the exit can tell progress from silence.
        self._written = 0

    async def run(self) -> int:
        request = self.request
        stdin_open = request.stdin and _stdin_readable()
        terminal = _Terminal(0) if request.tty else None
        cwd = request.cwd or next(iter(request.workspace_roots), None)
        try:
            if request.tty or stdin_open:
                self.extended = await _has_extensions(self.env)
            size = terminal.size() if terminal is not None and self.extended else None
            proc = await self.env.start(
                request.argv,
                cwd=None if cwd is None else self._remote(cwd),
                env=dict(request.env),
                env_policy=request.env_policy,
                tty=request.tty,
                stdin=stdin_open and not request.tty,
                sandbox=request.profile,
                workspace_roots=[self._remote(root) for root in request.workspace_roots],
                network=request.network,
                size=size,
            )
        except ServerError as exc:
            where = f" in {cwd}" if cwd is not None else ""
            _say(f"cannot start {request.argv[0]}{where}: {exc.message}")
            return EXIT_NOT_STARTED
        except ClientError as exc:
            _say(_describe(exc))
            return EXIT_NOT_STARTED
        self.proc = proc
        with contextlib.ExitStack() as stack:
            if terminal is not None:
                stack.enter_context(terminal)
                self._on_signal(stack, signal.SIGWINCH, self._resize, terminal)
            stack.callback(self._cancel_tasks)
            self._on_signal(stack, signal.SIGINT, self._interrupt)
            for signum in (signal.SIGTERM, signal.SIGHUP):
                self._on_signal(stack, signum, self._killed, signum)
            if stdin_open or request.tty:
                self._spawn(self._forward_input(proc, eof_closes=not request.tty))
            return await self._relay(proc)

    def _remote(self, path: str) -> str:
        """``path`` on the executor's host: relative ones from its working directory."""
        if path.startswith("/") or path[:5].lower() == "file:":
            return path
        base = native_path(str(self.env.info.get("cwd") or "file:///"))
        return posixpath.normpath(posixpath.join(base, path))

    # --- output and exit ------------------------------------------------------------------

    async def _relay(self, proc: Process) -> int:
        output = self._spawn(self._copy_output(proc))
        exited = self._spawn(proc.wait())
        await asyncio.wait({output, exited}, return_when=asyncio.FIRST_COMPLETED)
        try:
            if output.done() and output.exception() is not None:
                output.result()
            result = await exited
            await self._rest_of_output(output)
        except _OutputGone:
            with contextlib.suppress(ClientError):
                await proc.terminate()
            return 128 + signal.SIGPIPE
        except ClientError as exc:
            if self.killed_by is None:
                _say(_describe(exc))
            return EXIT_LOST if self.killed_by is None else 128 + self.killed_by
        if self.killed_by is not None:
            return 128 + self.killed_by
        self._verdict(result)
        return result.exit_code if 0 <= result.exit_code <= 255 else 255

    async def _copy_output(self, proc: Process) -> None:
        async for chunk in proc.output():
            self.kept += chunk.data
            del self.kept[:-KEPT_OUTPUT]
            _write_all(2 if chunk.stream == "stderr" else 1, chunk.data)
            self._written += 1

    async def _rest_of_output(self, output: asyncio.Task[None]) -> None:
        """Output may follow the exit (descendants holding the streams): wait while it
        flows, and give up after ``OUTPUT_GRACE`` of silence."""
        while not output.done():
            before = self._written
            await asyncio.wait({output}, timeout=OUTPUT_GRACE)
            if self._written == before:
                break
        if output.done():
            output.result()

    def _verdict(self, result: ExitResult) -> None:
        if not result.sandbox_denied:
            return
        # Imported only now: the sandbox package and the runner are most of `executor exec`'s
        # start-up, and only a denied command needs them.
        from executor.runner import denial_line
        from executor.sandbox.denial import Verdict, classify

        linux = self.env.info.get("platformOs", "linux") == "linux"
        output = bytes(self.kept)
        verdict = classify(sandboxed=True, exit_code=result.exit_code, output=output, linux=linux)
        if not verdict.denied:
            # The executor knew by other means (or from output we no longer hold).
            verdict = Verdict(True, "the executor's verdict")
        line = denial_line(verdict, result.exit_code, output)
        if line is not None:
            print(line, file=sys.stderr, flush=True)

    # --- input ----------------------------------------------------------------------------

    async def _forward_input(self, proc: Process, *, eof_closes: bool) -> None:
        """Our stdin to the command until EOF; then its stdin pipe is closed (a terminal
        stays: as ``executor run``, we only stop reading)."""
        reader = _Reader(self.loop, 0)
        try:
            while data := await reader.read():
                await proc.write(data, replay=True)
            if eof_closes:
                await self._close_stdin(proc)
        except ClientError:
            return  # the command is gone or closed its stdin; the output side reports

    async def _close_stdin(self, proc: Process) -> None:
        if not self.extended:
            await asyncio.sleep(1.0)
            if proc.exit is None:
                _say(
                    "this executor cannot close the command's stdin (the reference has no "
                    "way to): the command does not see the end of its input"
                )
            return
        await proc.close_stdin()

    # --- signals and the terminal ---------------------------------------------------------

    def _on_signal(
        self, stack: contextlib.ExitStack, signum: int, handler: Callable[..., None], *args: Any
    ) -> None:
        self.loop.add_signal_handler(signum, handler, *args)
        stack.callback(self.loop.remove_signal_handler, signum)

    def _interrupt(self) -> None:
        """^C here (without a terminal of its own): SIGINT to the command, whose exit then
        says what it did with it."""
        if self.proc is not None:
            self._spawn(self.proc.signal("interrupt"), quiet=True)

    def _killed(self, signum: int) -> None:
        """SIGTERM or SIGHUP here: the command is killed and we exit 128+N."""
        self.killed_by = signum
        if self.proc is not None:
            self._spawn(self.proc.terminate(), quiet=True)

    def _resize(self, terminal: _Terminal) -> None:
        if self.proc is None or not self.extended:
            return
        self._spawn(self.proc.resize(*terminal.size()), quiet=True)

    def _spawn(self, coro: Any, *, quiet: bool = False) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = self.loop.create_task(_quietly(coro) if quiet else coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()


async def _quietly(coro: Any) -> None:
    with contextlib.suppress(ClientError):
        await coro


async def _has_extensions(env: Environment) -> bool:
    """Whether the executor has our stdin and terminal extensions (the reference answers
    the method with "method not found"; ours says the probe's process is unknown)."""
    probe = {"processId": f"executor-exec-probe-{uuid.uuid4().hex}", "size": {"rows": 1, "cols": 1}}
    try:
        await env.request("process/resizePty", probe, idempotent=True)
    except ServerError as exc:
        return exc.code != METHOD_NOT_FOUND
    return True


def _stdin_readable() -> bool:
    """Whether our stdin has anything to forward: not closed, not ``/dev/null`` (then the
    command's stdin is empty from the start, on any executor)."""
    try:
        ours = os.fstat(0)
    except OSError:
        return False
    if not stat.S_ISCHR(ours.st_mode):
        return True
    with contextlib.suppress(OSError):
        null = os.stat(os.devnull)
        return (ours.st_rdev, ours.st_ino) != (null.st_rdev, null.st_ino)
    return True


class _Reader:
    """Reads our stdin without blocking the loop (a regular file, which cannot be polled,
    never blocks anyway). The descriptor stays blocking: others share it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self.loop = loop
        self.fd = fd
        self.pollable = True

    async def read(self) -> bytes:
        if self.pollable:
            ready: asyncio.Future[None] = self.loop.create_future()
            try:
                self.loop.add_reader(self.fd, _settle, ready)
            except (OSError, ValueError):
                self.pollable = False
            else:
                try:
                    await ready
                finally:
                    self.loop.remove_reader(self.fd)
        try:
            return os.read(self.fd, _CHUNK)
        except OSError:  # a terminal hung up (EIO): its end
            return b""


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _write_all(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd`` (blocking: the command cannot outrun our reader; the
    executor holds its output meanwhile)."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:  # someone made it non-blocking
            select.select([], [fd], [])
            continue
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise _OutputGone from exc
        view = view[written:]


class _Terminal:
    """Our terminal in raw mode while the command has its own (restored on exit)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.saved: list[Any] | None = None

    def size(self) -> tuple[int, int]:
        """Our (rows, columns): of stdin, else stdout; 24 x 80 when neither is a terminal."""
        for fd in (self.fd, 1):
            with contextlib.suppress(OSError):
                rows, cols, _, _ = struct.unpack(
                    "HHHH", fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8)
                )
                if rows and cols:
                    return rows, cols
        return 24, 80

    def __enter__(self) -> _Terminal:
        if os.isatty(self.fd):
            self.saved = termios.tcgetattr(self.fd)
            tty.setraw(self.fd, termios.TCSANOW)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            with contextlib.suppress(termios.error):
                termios.tcsetattr(self.fd, termios.TCSAFLUSH, self.saved)
