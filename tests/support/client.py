"""Protocol clients for tests: a WebSocket client and a stdio client, both synchronous.

Each client reads in a background thread and sorts what arrives into responses (by id) and
notifications (in arrival order), so a test can send, then wait for exactly what it expects.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect


class RpcError(Exception):
    """An error response."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


T = TypeVar("T")


class _Inbox:
    def __init__(self) -> None:
        self.responses: dict[Any, dict[str, Any]] = {}
        self.notifications: list[dict[str, Any]] = []
        self.out_of_band: list[dict[str, Any]] = []
        #: Every message received, in arrival order (never consumed).
        self.arrivals: list[dict[str, Any]] = []
        self.closed = False
        self.cond = threading.Condition()

    def put(self, message: dict[str, Any]) -> None:
        with self.cond:
            self.arrivals.append(message)
            if "id" in message and ("result" in message or "error" in message):
                if message["id"] == -1:
                    self.out_of_band.append(message)
                else:
                    self.responses[message["id"]] = message
            else:
                self.notifications.append(message)
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def wait(self, predicate: Callable[[], T | None], timeout: float, what: str) -> T:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = predicate()
                if found is not None and found is not False:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"timed out waiting for {what}")
                if self.closed:
                    raise ConnectionError(f"connection closed while waiting for {what}")
                self.cond.wait(remaining)


class _Client:
    def __init__(self) -> None:
        self.inbox = _Inbox()
        self._next_id = 1
        self._lock = threading.Lock()

    # transport-specific
    def send_raw(self, data: str | bytes) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def send(self, message: dict[str, Any]) -> None:
        """Send one JSON object."""
        self.send_raw(json.dumps(message))

    def next_id(self) -> int:
        with self._lock:
            value = self._next_id
            self._next_id += 1
            return value

    def call(
        self, method: str, params: Any = None, *, timeout: float = 15.0, omit_params: bool = False
    ) -> dict[str, Any]:
        """Send a request and return the raw response object."""
        request_id = self.next_id()
        message: dict[str, Any] = {"id": request_id, "method": method}
        if not omit_params:
            message["params"] = params
        self.send(message)
        return self.response(request_id, timeout=timeout)

    def response(self, request_id: Any, *, timeout: float = 15.0) -> dict[str, Any]:
        """Wait for the response to ``request_id``."""
        return self.inbox.wait(
            lambda: self.inbox.responses.pop(request_id, None), timeout, f"response {request_id}"
        )

    def request(self, method: str, params: Any = None, *, timeout: float = 15.0) -> Any:
        """Send a request; return its result or raise ``RpcError``."""
        response = self.call(method, params, timeout=timeout)
        if "error" in response:
            raise RpcError(response["error"]["code"], response["error"]["message"])
        return response["result"]

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification."""
        self.send({"method": method, "params": params})

    def initialize(self, client_name: str = "test", resume: str | None = None) -> dict[str, Any]:
        """``initialize`` then ``initialized``; returns the initialize result."""
        params: dict[str, Any] = {"clientName": client_name}
        if resume is not None:
            params["resumeSessionId"] = resume
        result: dict[str, Any] = self.request("initialize", params)
        self.notify("initialized", {})
        return result

    def notification(
        self,
        method: str | None = None,
        *,
        timeout: float = 15.0,
        where: Callable[[dict[str, Any]], bool] | None = None,
    ) -> dict[str, Any]:
        """Wait for (and consume) the first notification matching ``method`` and ``where``."""

        def find() -> dict[str, Any] | None:
            for index, note in enumerate(self.inbox.notifications):
                if (method is None or note.get("method") == method) and (
                    where is None or where(note)
                ):
                    return self.inbox.notifications.pop(index)
            return None

        return self.inbox.wait(find, timeout, f"notification {method}")

    def out_of_band(self, *, timeout: float = 15.0) -> dict[str, Any]:
        """Wait for an error response with id -1."""
        return self.inbox.wait(
            lambda: self.inbox.out_of_band.pop(0) if self.inbox.out_of_band else None,
            timeout,
            "an id -1 error",
        )

    def process_events(self, process_id: str, *, timeout: float = 15.0) -> list[dict[str, Any]]:
        """Every notification of ``process_id`` up to and including ``process/closed``."""
        events: list[dict[str, Any]] = []
        while True:
            note = self.notification(
                timeout=timeout, where=lambda n: n.get("params", {}).get("processId") == process_id
            )
            events.append(note)
            if note["method"] == "process/closed":
                return events

    def run(
        self,
        process_id: str,
        argv: list[str],
        *,
        cwd: str = "file:///tmp",
        env: dict[str, str] | None = None,
        timeout: float = 15.0,
        **extra: Any,
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Start a process and collect its events until closed."""
        params = {
            "processId": process_id,
            "argv": argv,
            "cwd": cwd,
            "env": env if env is not None else {"PATH": "/usr/bin:/bin"},
            "tty": False,
            **extra,
        }
        result = self.request("process/start", params)
        return result, self.process_events(process_id, timeout=timeout)


def output_of(events: list[dict[str, Any]], stream: str | None = None) -> bytes:
    """Concatenated output bytes of ``process/output`` events (optionally of one stream)."""
    return b"".join(
        base64.b64decode(e["params"]["chunk"])
        for e in events
        if e["method"] == "process/output" and (stream is None or e["params"]["stream"] == stream)
    )


def b64(data: bytes | str) -> str:
    """Base64 text of ``data``."""
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode()


class WsClient(_Client):
    """A WebSocket client of a running daemon."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__()
        kwargs.setdefault("max_size", None)
        kwargs.setdefault("compression", None)
        kwargs.setdefault("open_timeout", 10)
        self.ws: ClientConnection = connect(url, **kwargs)
        self.ws.__enter__()  # context-manager use; the client closes it explicitly
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for message in self.ws:
                self.inbox.put(json.loads(message))
        except (ConnectionClosed, OSError):
            pass
        finally:
            self.inbox.close()

    def send_raw(self, data: str | bytes) -> None:
        """Send one WebSocket message (text for str, binary for bytes)."""
        self.ws.send(data)

    def close(self) -> None:
        """Close the connection."""
        self.ws.close()

    def __enter__(self) -> WsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StdioClient(_Client):
    """A client of ``executor serve --listen stdio`` over the process's pipes."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        super().__init__()
        self.process = process
        #: Every raw line the daemon wrote on stdout, in order (to check nothing but JSON is there).
        self.lines: list[bytes] = []
        assert process.stdin is not None
        assert process.stdout is not None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        #: Everything the daemon wrote on stderr so far (drained so the pipe never fills up).
        self.stderr = bytearray()
        self._stderr_reader: threading.Thread | None = None
        if process.stderr is not None:
            self._stderr_reader = threading.Thread(target=self._read_stderr, daemon=True)
            self._stderr_reader.start()

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        stream = self.process.stderr
        assert isinstance(stream, io.BufferedReader)
        while chunk := stream.read1(65536):
            self.stderr += chunk

    def _read(self) -> None:
        assert self.process.stdout is not None
        try:
            for line in self.process.stdout:
                self.lines.append(line)
                if line.strip():
                    self.inbox.put(json.loads(line))
        finally:
            self.inbox.close()

    def send_raw(self, data: str | bytes) -> None:
        """Write bytes to the daemon's stdin as they are (add the newline yourself)."""
        assert self.process.stdin is not None
        raw = data.encode() if isinstance(data, str) else data
        self.process.stdin.write(raw)
        self.process.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        """Send one JSON object as one line."""
        self.send_raw(json.dumps(message) + "\n")

    def close_stdin(self) -> None:
        """Send EOF to the daemon."""
        assert self.process.stdin is not None
        self.process.stdin.close()

    def wait(self, timeout: float = 15.0) -> int:
        """Wait for the daemon to exit; returns its status."""
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        """End the daemon (EOF, then kill if it lingers) and close the pipes."""
        if self.process.poll() is None:
            try:
                self.close_stdin()
            except OSError:
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for thread in (self._reader, self._stderr_reader):
            if thread is not None:
                thread.join(timeout=5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None and not stream.closed:
                stream.close()
