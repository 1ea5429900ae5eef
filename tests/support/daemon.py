"""Start a real daemon through its console script, on loopback with a free port.

Tests drive it the way its users do, through ``executor.client`` (``RunningDaemon.connect``).
Tests of the protocol itself — exact messages, malformed input, ordering on the wire — use
the wire-level clients of ``tests.support.client``, which send whatever they are told to
and hide nothing the daemon sent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from executor.client import SyncEnvironment, connect_sync
from tests.support.client import StdioClient, WsClient

EXECUTOR = Path(sys.executable).with_name("executor")


def executor_command() -> list[str]:
    """The console script of the environment running the tests."""
    return [str(EXECUTOR)] if EXECUTOR.exists() else [sys.executable, "-m", "executor"]


class RunningDaemon:
    """A daemon subprocess listening on ``url``; its stderr goes to ``log_path``."""

    def __init__(
        self,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        *,
        unset: Sequence[str] = (),
        preexec: Callable[[], None] | None = None,
    ) -> None:
        self.log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            prefix="executor-log-", suffix=".txt", delete=False
        )
        self.log_path = Path(self.log_file.name)
        #: What the daemon logged, kept once ``stop`` has removed the file.
        self._final_log: str | None = None
        self.process = subprocess.Popen(
            [*executor_command(), "serve", "--listen", "ws://127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=self.log_file,
            stdin=subprocess.DEVNULL,
            env={k: v for k, v in {**os.environ, **(env or {})}.items() if k not in unset},
            cwd=cwd,
            preexec_fn=preexec,  # noqa: PLW1509 - the test's own single-threaded setup
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode().strip()
        if not line.startswith("ws://"):
            self.stop()
            raise RuntimeError(f"daemon did not print its URL: {line!r}\n{self.log()}")
        self.url = line
        self.pid = self.process.pid

    def client(self, **kwargs: object) -> WsClient:
        """A new connection."""
        return WsClient(self.url, **kwargs)

    def session(self, name: str = "test") -> WsClient:
        """A new wire-level connection that has completed the handshake."""
        client = self.client()
        client.initialize(name)
        return client

    def connect(self, name: str = "test", **options: object) -> SyncEnvironment:
        """A session of the shipped client (``executor.client``), as a user would drive the
        daemon; ``client``/``session`` are for tests that pin the wire itself."""
        return connect_sync(self.url, client_name=name, **options)

    def log(self) -> str:
        """Everything the daemon logged so far (all of it, after ``stop``)."""
        if self._final_log is not None:
            return self._final_log
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        """Signal the daemon and wait for it to exit; returns its status."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.log_file.close()
        if self._final_log is None:
            # Keep the text for assertions after the stop, but no file in /tmp.
            self._final_log = self.log_path.read_text(errors="replace")
            self.log_path.unlink(missing_ok=True)
        return self.process.returncode


def start_stdio(
    args: Sequence[str] = (), env: dict[str, str] | None = None, *, listen: str = "stdio"
) -> StdioClient:
    """``executor serve --listen stdio`` (or ``listen``) with a client on its pipes."""
    process = subprocess.Popen(
        [*executor_command(), "serve", "--listen", listen, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    return StdioClient(process)
