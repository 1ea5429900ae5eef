"""What a benchmark case is, what it is given, and how daemons under test are started.

A case module (``bench/cases/<name>.py``) exposes ``CASES: list[Case]``. The runner calls
``await case.run(target)`` once per trial and per target (ours, then the reference, then
ours again...), and the call returns ``{metric name: value}`` for the metrics the case
declares. ``Target`` is everything a case may use: the URL, a connected and initialized
client, the daemon's memory and CPU, a scratch directory. See ``bench/README.md``.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.client import BenchClient

__all__ = ["Case", "CpuMeter", "DaemonProcess", "Metric", "Target", "free_port", "raise_fd_limit"]

MiB = 1024 * 1024
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True, kw_only=True)
class Metric:
    """One number a case reports.

    ``target`` is the goal as a ratio ours/reference: with ``better="higher"`` ours must be
    at least ``target`` times the reference, with ``"lower"`` at most ``target`` times.
    ``absolute`` is an optional bound on our value alone (e.g. 1.1 s for 100 sleepers).
    ``cpu``: the case also reports the CPU its timed window cost the client and the daemon
    (``CpuMeter.metrics``), so that a number the client limited can be told apart.
    """

    name: str
    unit: str
    better: str = "higher"
    target: float | None = None
    absolute: float | None = None
    cpu: bool = False

    def __post_init__(self) -> None:
        if self.better not in ("higher", "lower"):
            raise ValueError(f"better must be 'higher' or 'lower', not {self.better!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """A benchmark case: a coroutine function producing the declared metrics.

    ``fresh_daemon``: the runner starts a new daemon for every run of this case (for
    memory measurements that must not see earlier cases). ``needs_local``: the case needs
    the daemon's pid (RSS); it is skipped for a reference given only by URL.
    """

    name: str
    description: str
    metrics: tuple[Metric, ...]
    run: Callable[[Target], Awaitable[dict[str, float]]]
    fresh_daemon: bool = False
    needs_local: bool = False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(eq=False)
class DaemonProcess:
    """A daemon under test, started from a shell command with an optional ``{port}``."""

    command: str
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    url: str = ""

    def start(self, timeout: float = 30.0) -> None:
        """Start the command and wait for it to print its URL (or to accept connections)."""
        port = free_port()
        argv, assignments = _command_line(self.command.replace("{port}", str(port)))
        self.process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env, **assignments},
            start_new_session=True,
            # The daemon must not outlive the runner (killed, interrupted, crashed).
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - the runner starts no threads
        )
        assert self.process.stdout is not None
        line = _readline(self.process.stdout, timeout).decode().strip()
        self.url = line if line.startswith("ws://") else f"ws://127.0.0.1:{port}"
        _wait_listening(self.url, timeout)

    @property
    def pid(self) -> int:
        """The pid of the started command."""
        assert self.process is not None
        return self.process.pid

    def stop(self) -> None:
        """SIGTERM the daemon's process group, then SIGKILL what is left."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None


_SHELL_SYNTAX = set("|&;<>()$`\\\"'*?[]#~{}")


def _command_line(command: str) -> tuple[list[str], dict[str, str]]:
    """argv and leading ``NAME=value`` assignments; a shell only when the command needs one.

    Without a shell in between, the daemon is the runner's own child, so it gets the
    runner's death signal and ``stop()`` signals the daemon itself.
    """
    words = shlex.split(command)
    assignments: dict[str, str] = {}
    while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
        name, value = words.pop(0).split("=", 1)
        assignments[name] = value
    if not words or any(char in _SHELL_SYNTAX for word in words for char in word):
        return ["/bin/sh", "-c", command], {}
    return words, assignments


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the runner dies (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def _readline(stream: object, timeout: float) -> bytes:
    import select

    fd = stream.fileno()  # type: ignore[attr-defined]
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            raise TimeoutError("the daemon printed no URL line")
        part = os.read(fd, 1)
        if not part:
            break
        data += part
    return data


def _wait_listening(url: str, timeout: float) -> None:
    host, port = url.removeprefix("ws://").rstrip("/").rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@dataclass(eq=False)
class Target:
    """What a case is given: one daemon under test (ours or the reference)."""

    #: ``"ours"`` or ``"reference"``.
    name: str
    #: The WebSocket URL to connect to.
    url: str
    #: The daemon process, when the runner started it (None for ``--reference-url``).
    daemon: DaemonProcess | None = None
    #: A scratch directory that lives as long as the runner.
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-")))

    async def session(self) -> BenchClient:
        """A new connection that has completed the handshake. Close it when done."""
        return await BenchClient.connect(self.url)

    def rss_mib(self) -> dict[str, float]:
        """Resident memory in MiB per role: ``daemon`` and, when present, ``launcher``.

        Ours: the Python daemon and its launcher servers (``zygote.py``, ``executor-launcher``;
        not the supervisors they fork, which carry the same command line). The reference is
        started through a node wrapper: ``daemon`` is its native ``codex`` process and
        ``wrapper`` the node process in front of it.
        """
        if self.daemon is None:
            return {}
        root = psutil.Process(self.daemon.pid)
        processes = [root, *root.children(recursive=True)]
        roles: dict[str, float] = {}
        for process in processes:
            try:
                cmdline = " ".join(process.cmdline())
                rss = process.memory_info().rss / MiB
            except psutil.Error:
                continue
            role = _role(process, cmdline)
            if role is not None:
                roles[role] = roles.get(role, 0.0) + rss
        return roles

    def daemon_processes(self) -> list[psutil.Process]:
        """The processes that are the daemon under test (every role of ``rss_mib``)."""
        if self.daemon is None:
            return []
        root = psutil.Process(self.daemon.pid)
        found = []
        for process in (root, *root.children(recursive=True)):
            try:
                if _role(process, " ".join(process.cmdline())) is not None:
                    found.append(process)
            except psutil.Error:
                continue
        return found

    def cpu(self, server: int | None = None) -> CpuMeter:
        """A meter of the CPU the client and the daemon use over a ``with`` block.

        ``server``: the pid of a helper the daemon talks to (the HTTP server), also metered.
        """
        return CpuMeter(self.daemon_processes(), psutil.Process(server) if server else None)

    def close(self) -> None:
        """Remove the scratch directory."""
        shutil.rmtree(self.workdir, ignore_errors=True)


class CpuMeter:
    """CPU time used over a ``with`` block by the client (this thread) and by the daemon.

    The client is the thread running the event loop, which is all the client there is; the
    daemon is the processes ``Target.daemon_processes`` found (for ours the daemon and its
    launcher server, for the reference its native process and node wrapper), not the
    commands it runs. Without a local daemon (``--reference-url``) only the client is known.
    A ``server`` process the daemon talks to (the HTTP cases' server) is metered as well.
    """

    def __init__(self, processes: list[psutil.Process], server: psutil.Process | None) -> None:
        self._processes = processes
        self._server = [server] if server is not None else []
        self._start = (0.0, 0.0, 0.0)
        #: Milliseconds of CPU, set when the block ends.
        self.client_ms = 0.0
        self.daemon_ms: float | None = None
        self.server_ms: float | None = None

    def _now(self) -> tuple[float, float, float]:
        return _thread_cpu(), _processes_cpu(self._processes), _processes_cpu(self._server)

    def __enter__(self) -> CpuMeter:
        self._start = self._now()
        return self

    def __exit__(self, *exc: object) -> None:
        client, daemon, server = (
            (end - start) * 1e3 for end, start in zip(self._now(), self._start, strict=True)
        )
        self.client_ms = client
        self.daemon_ms = daemon if self._processes else None
        self.server_ms = server if self._server else None

    def metrics(self, name: str) -> dict[str, float]:
        """``{name}.cpu.client``, ``.cpu.daemon`` and ``.cpu.server`` in ms (those known)."""
        found = {f"{name}.cpu.client": self.client_ms}
        if self.daemon_ms is not None:
            found[f"{name}.cpu.daemon"] = self.daemon_ms
        if self.server_ms is not None:
            found[f"{name}.cpu.server"] = self.server_ms
        return found


def _thread_cpu() -> float:
    usage = resource.getrusage(getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF))
    return usage.ru_utime + usage.ru_stime


def _processes_cpu(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue  # rare: every role lives as long as the daemon
        total += times.user + times.system
    return total


_LAUNCHERS = ("zygote.py", "executor-launcher")


def _role(process: psutil.Process, cmdline: str) -> str | None:
    if any(name in cmdline for name in _LAUNCHERS):
        parent = " ".join(psutil.Process(process.ppid()).cmdline())
        return None if any(name in parent for name in _LAUNCHERS) else "launcher"
    if process.name() in ("node", "nodejs"):
        return "wrapper"
    if "serve --listen" in cmdline or "exec-server" in cmdline:
        return "daemon"
    return None  # the shell in front, commands and their supervisors are not the daemon


def our_command() -> str:
    """How the runner starts our daemon."""
    executor = Path(sys.executable).with_name("executor")
    program = str(executor) if executor.exists() else f"{sys.executable} -m executor"
    # The http cases request the benchmark's own loopback server, which http/request refuses
    # by default.
    return (
        f"{program} serve --listen ws://127.0.0.1:{{port}} --log-level warning"
        " --http-allow-cidr 127.0.0.1"
    )


def raise_fd_limit() -> int:
    """Raise the soft limit on open descriptors to the hard one; the new soft limit.

    The scale cases hold hundreds of connections in this process, and the daemons started
    from it (which inherit the limit) a socket and pipes for each.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            return soft
    return hard


async def settle(seconds: float = 0.3) -> None:
    """Let a daemon finish background work before measuring memory."""
    await asyncio.sleep(seconds)
