"""A synchronous facade for scripts: the same client, on an event loop in a thread.

    from executor.client.sync import connect_sync

    with connect_sync("ws://127.0.0.1:8765") as env:
        result = env.run(["make", "test"], cwd="/src/app")
        print(result.exit_code, result.stdout.decode())

Every call blocks until the asynchronous one finishes; the client's recovery runs in the
background thread meanwhile, exactly as in the asynchronous API.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

from executor.client.environment import Environment, connect
from executor.client.events import ExitResult, OutputChunk
from executor.client.fs import FileSystem
from executor.client.http import Http, HttpResponse, StreamedResponse
from executor.client.process import Process, RunResult

__all__ = [
    "SyncEnvironment",
    "SyncFileSystem",
    "SyncHttp",
    "SyncProcess",
    "SyncStreamedResponse",
    "connect_sync",
]

T = TypeVar("T")


class _Loop:
    """An event loop running in a daemon thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="executor-client", daemon=True
        )
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except (concurrent.futures.TimeoutError, KeyboardInterrupt):
            future.cancel()
            raise

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class SyncProcess:
    """A ``Process`` with blocking methods."""

    def __init__(self, loop: _Loop, process: Process) -> None:
        self._loop = loop
        self.process = process

    @property
    def id(self) -> str:
        """The process id."""
        return self.process.id

    @property
    def sandbox_type(self) -> str:
        """The sandbox the executor put the process in."""
        return self.process.sandbox_type

    @property
    def exit(self) -> ExitResult | None:
        """The exit, once known."""
        return self.process.exit

    def output(self) -> Iterator[OutputChunk]:
        """Every output chunk, in order, until the process closed."""
        return _iterate(self._loop, self.process.output())

    def wait(self, timeout: float | None = None) -> ExitResult:
        """Wait for the exit."""
        return self._loop.run(self.process.wait(), timeout)

    def write(self, data: bytes, **options: Any) -> None:
        """Write to stdin (``Process.write``)."""
        self._loop.run(self.process.write(data, **options))

    def signal(self, signal: str = "interrupt") -> None:
        """Send a signal."""
        self._loop.run(self.process.signal(signal))

    def terminate(self) -> bool:
        """Kill the process tree."""
        return self._loop.run(self.process.terminate())

    def collect(self, timeout: float | None = None) -> RunResult:
        """All output and the exit."""
        return self._loop.run(self.process.collect(), timeout)


class SyncFileSystem:
    """``FileSystem`` with blocking methods (``read_stream`` is a plain iterator)."""

    def __init__(self, loop: _Loop, fs: FileSystem) -> None:
        self._loop = loop
        self._fs = fs

    def read_stream(self, path: str, **options: Any) -> Iterator[bytes]:
        """The file, block by block."""
        return _iterate(self._loop, self._fs.read_stream(path, **options))

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._fs, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run(method(*args, **kwargs))

        call.__doc__ = method.__doc__
        return call


class SyncStreamedResponse:
    """A ``StreamedResponse`` whose ``body`` is a plain iterator of byte blocks."""

    def __init__(self, loop: _Loop, response: StreamedResponse) -> None:
        self._loop = loop
        self.response = response
        self.status = response.status
        self.headers = response.headers
        #: The body, block by block (``HttpBodyError`` if it does not arrive whole).
        self.body: Iterator[bytes] = _iterate(loop, response.body)

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or ``None``."""
        return self.response.header(name)

    def read(self) -> bytes:
        """The rest of the body."""
        return b"".join(self.body)

    def close(self) -> None:
        """Stop reading: what is still to come is dropped."""
        if not self._loop.loop.is_closed():
            self._loop.run(self.response.aclose())

    def __enter__(self) -> SyncStreamedResponse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncHttp:
    """``Http`` with blocking methods."""

    def __init__(self, loop: _Loop, http: Http) -> None:
        self._loop = loop
        self._http = http

    def request(self, method: str, url: str, **options: Any) -> HttpResponse:
        """One request, the whole response (``Http.request``'s options)."""
        return self._loop.run(self._http.request(method, url, **options))

    def stream(self, method: str, url: str, **options: Any) -> SyncStreamedResponse:
        """One request, its body streamed (``Http.stream``'s options)."""
        return SyncStreamedResponse(
            self._loop, self._loop.run(self._http.stream(method, url, **options))
        )


async def _next(iterator: AsyncIterator[T]) -> T:
    return await iterator.__anext__()


def _iterate(loop: _Loop, iterator: AsyncIterator[T]) -> Iterator[T]:
    try:
        while True:
            try:
                yield loop.run(_next(iterator))
            except StopAsyncIteration:
                return
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None and not loop.loop.is_closed():
            loop.run(aclose())


class SyncEnvironment:
    """An ``Environment`` with blocking methods; ``close()`` it (or use ``with``)."""

    def __init__(self, url: str | Sequence[str], **options: Any) -> None:
        self._loop = _Loop()
        try:
            self.env: Environment = self._loop.run(_open(url, options))
        except BaseException:
            self._loop.stop()
            raise
        self.fs = SyncFileSystem(self._loop, self.env.fs)
        self.http = SyncHttp(self._loop, self.env.http)

    @property
    def info(self) -> dict[str, Any]:
        """``environmentInfo``."""
        return self.env.info

    @property
    def session_id(self) -> str:
        """The session id."""
        return self.env.session_id

    @property
    def state(self) -> str:
        """``connected``, ``recovering`` or ``failed``."""
        return self.env.state

    def start(self, argv: Sequence[str], **options: Any) -> SyncProcess:
        """Start a process (``Environment.start``'s options)."""
        return SyncProcess(self._loop, self._loop.run(self.env.start(argv, **options)))

    def attach(self, process_id: str, **options: Any) -> SyncProcess:
        """A handle on a resumed session's process (``Environment.attach``)."""
        return SyncProcess(self._loop, self._loop.run(self.env.attach(process_id, **options)))

    def run(
        self, argv: Sequence[str], *, timeout: float | None = None, **options: Any
    ) -> RunResult:
        """Run a process to its end; all of its output and its exit."""
        return self._loop.run(self.env.run(argv, **options), timeout)

    def request(self, method: str, params: Any = None, **options: Any) -> Any:
        """Any request (``Environment.request``)."""
        return self._loop.run(self.env.request(method, params, **options))

    def close(self, **options: Any) -> None:
        """Close the session and stop the background thread."""
        if not self._loop.loop.is_closed():
            try:
                self._loop.run(self.env.close(**options))
            finally:
                self._loop.stop()

    def __enter__(self) -> SyncEnvironment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


async def _open(url: str | Sequence[str], options: dict[str, Any]) -> Environment:
    return await connect(url, **options)


def connect_sync(url: str | Sequence[str], **options: Any) -> SyncEnvironment:
    """``connect`` for synchronous code (same arguments)."""
    return SyncEnvironment(url, **options)
