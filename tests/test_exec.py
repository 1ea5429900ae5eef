"""`executor exec` against a real daemon: exit statuses, the two output streams, stdin and
its end, a terminal of its own (raw mode, size, ^C), a sandbox profile and its denial line,
connection errors, stdio, and a connection dropped in the middle of the output."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import select
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.executor_linux.conftest import linux_sandbox_available
from tests.support.daemon import RunningDaemon, executor_command
from tests.support.enforcement import skip_unless

TIMEOUT = 60


def executor_exec(
    url: str, *argv: str, options: tuple[str, ...] = (), stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``executor exec --url URL [options] -- argv`` with our stdin (``None``: /dev/null)."""
    return subprocess.run(
        [*executor_command(), "exec", "--url", url, *options, "--", *argv],
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.fixture(scope="module")
def daemon() -> Iterator[RunningDaemon]:
    """One daemon for the module's plain runs."""
    running = RunningDaemon()
    yield running
    running.stop()


@pytest.fixture
def ws() -> Iterator[Path]:
    """A directory outside /tmp (which the workspace profile may write)."""
    path = Path(tempfile.mkdtemp(prefix="executor-exec-", dir="/var/tmp")).resolve()
    yield path
    shutil.rmtree(path, ignore_errors=True)


# --- exit status, output, stdin ---------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "status"),
    [("exit 0", 0), ("exit 3", 3), ("kill -TERM $$", 128 + 15), ("kill -KILL $$", 128 + 9)],
)
def test_the_exit_status_passes_through(daemon: RunningDaemon, script: str, status: int) -> None:
    """The command's code is ours; a signal N is 128+N, as a shell says it."""
    result = executor_exec(daemon.url, "/bin/sh", "-c", script)
    assert result.returncode == status, result.stderr
    assert result.stderr == b""


def test_stdout_and_stderr_stay_apart_and_are_bytes(daemon: RunningDaemon) -> None:
    script = r"printf 'out\000\377'; printf 'err\n' >&2; printf 'more'"
    result = executor_exec(daemon.url, "/bin/sh", "-c", script)
    assert result.returncode == 0
    assert result.stdout == b"out\x00\xffmore"
    assert result.stderr == b"err\n"


def test_stdin_is_forwarded_and_its_end_ends_the_command(daemon: RunningDaemon) -> None:
    """`cat` gets every byte we pipe in (more than a pipe holds), then EOF: it exits 0. With
    /dev/null as stdin the command's stdin is empty from the start."""
    data = os.urandom(300_000) + b"\nlast line\n"
    result = executor_exec(daemon.url, "cat", stdin=data)
    assert (result.returncode, result.stderr) == (0, b"")
    assert result.stdout == data
    empty = executor_exec(daemon.url, "/bin/sh", "-c", "cat; echo done")
    assert (empty.returncode, empty.stdout) == (0, b"done\n")


def test_environment_cwd_and_env_settings(daemon: RunningDaemon, ws: Path) -> None:
    """The executor's environment without secret-looking names, --env on top (NAME alone is
    ours), --cwd on the executor's host."""
    script = 'pwd; echo "$EXEC_SET|$EXEC_OURS|${EXEC_API_TOKEN-unset}"'
    result = subprocess.run(
        [
            *executor_command(),
            "exec",
            "--url",
            daemon.url,
            "--cwd",
            str(ws),
            "--env",
            "EXEC_SET=a=b",
            "--env",
            "EXEC_OURS",
            "--",
            "/bin/sh",
            "-c",
            script,
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env={**os.environ, "EXEC_OURS": "mine", "EXEC_API_TOKEN": "secret"},
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == [str(ws), "a=b|mine|unset"]


def test_a_command_that_cannot_start_is_125_with_the_daemons_message(
    daemon: RunningDaemon, ws: Path
) -> None:
    result = executor_exec(daemon.url, str(ws / "no-such-program"))
    assert result.returncode == 125
    assert result.stdout == b""
    assert result.stderr.decode().splitlines() == [
        f"executor: cannot start {ws / 'no-such-program'}: No such file or directory (os error 2)"
    ]


# --- a terminal ---------------------------------------------------------------------------


def _read_until(fd: int, wanted: bytes, seen: bytearray, deadline: float) -> None:
    while wanted not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{wanted!r} never came: {bytes(seen)!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b""
            assert data, f"EOF before {wanted!r}: {bytes(seen)!r}"
            seen += data


def _set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def test_a_terminal_of_its_own(daemon: RunningDaemon) -> None:
    """On our terminal (a pty pair here): the command's is a terminal too, of our size and
    following ours (SIGWINCH); ours is raw, so ^C goes through as a byte and the command
    dies of it (130); and ours is as it was afterwards."""
    remote = "tty; stty size; trap 'echo winch' WINCH; echo ready; read x; stty size; exec cat"
    exec_line = shlex.join(
        [*executor_command(), "exec", "--url", daemon.url, "--", "/bin/sh", "-c", remote]
    )
    local = f'stty -g; {exec_line}; echo "status $?"; stty -g'
    pid, master = pty.fork()
    if pid == 0:  # the child: its terminal is the pty's other side
        try:
            _set_size(0, 33, 111)
            os.execv("/bin/sh", ["/bin/sh", "-c", local])
        finally:
            os._exit(127)
    seen = bytearray()
    deadline = time.monotonic() + TIMEOUT
    try:
        _read_until(master, b"ready", seen, deadline)
        assert re.search(rb"/dev/pts/\d+\r\n33 111\r\n", seen), bytes(seen)
        _set_size(master, 40, 120)  # the kernel sends SIGWINCH to our foreground group
        _read_until(master, b"winch", seen, deadline)
        os.write(master, b"go\r")
        _read_until(master, b"40 120\r\n", seen, deadline)
        os.write(master, b"\x03")
        _read_until(master, b"status 130", seen, deadline)
        with contextlib.suppress(AssertionError):
            _read_until(master, b"never", seen, time.monotonic() + 5)  # to the end
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(master)
    lines = bytes(seen).decode(errors="replace").splitlines()
    modes = [line.strip() for line in lines if re.fullmatch(r"[0-9a-f:]{40,}\s*", line)]
    assert len(modes) == 2 and modes[0] == modes[1], lines


# --- a sandbox profile --------------------------------------------------------------------


@pytest.mark.enforcement
def test_a_profile_runs_sandboxed_and_a_denial_is_named(daemon: RunningDaemon, ws: Path) -> None:
    """Under `workspace`, a write in the workspace works and one outside it is refused; the
    line `executor run` prints says so."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    outside = Path(tempfile.mkdtemp(prefix="executor-exec-outside-", dir="/var/tmp"))
    try:
        script = f"echo in > {ws}/inside && echo out > {outside}/outside"
        result = executor_exec(
            daemon.url,
            "/bin/sh",
            "-c",
            script,
            options=("--profile", "workspace", "--workspace", str(ws)),
        )
        assert (ws / "inside").read_text() == "in\n"
        assert not (outside / "outside").exists()
        assert result.returncode == 2
        lines = result.stderr.decode().splitlines()
        assert "Read-only file system" in lines[0]
        assert lines[1:] == [
            "executor: the sandbox probably denied something "
            '(heuristic: exit 2 and "Read-only file system" in the output)'
        ]
    finally:
        shutil.rmtree(outside, ignore_errors=True)


#: Opens a listener on the command's loopback and connects to it, then prints the proxy it
#: was given: "connected", or the error's class (PermissionError: no network at all).
NETWORK_PROBE = """
import os, socket
try:
    with socket.create_server(("127.0.0.1", 0)) as server:
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
    print("connected")
except OSError as exc:
    print(type(exc).__name__)
print(os.environ.get("HTTPS_PROXY", "no proxy"))
"""


@pytest.mark.enforcement
def test_network_overrides_the_profiles_network(daemon: RunningDaemon, ws: Path) -> None:
    """--network off takes a profile's network away (its sockets are refused), --network on
    gives one without it the network, and a proxied profile stays behind its proxy."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")

    def probe(*options: str) -> list[str]:
        workspace = ("--workspace", str(ws), "--no-stdin")
        result = executor_exec(
            daemon.url,
            sys.executable,
            "-I",
            "-c",
            NETWORK_PROBE,
            options=(*options, *workspace),
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.decode().split()

    assert probe("--profile", "workspace-network") == ["connected", "no", "proxy"]
    assert probe("--profile", "workspace-network", "--network", "off") == [
        "PermissionError",
        "no",
        "proxy",
    ]
    assert probe("--profile", "workspace") == ["PermissionError", "no", "proxy"]
    assert probe("--profile", "workspace", "--network", "on") == ["connected", "no", "proxy"]
    proxied = probe("--profile", "workspace-proxy", "--network", "on")
    assert proxied[0] == "connected" and proxied[1].startswith("http://127.0.0.1:")
    assert probe("--profile", "workspace-proxy", "--network", "off")[0] == "PermissionError"


def test_network_and_no_stdin_usage_errors(daemon: RunningDaemon) -> None:
    alone = executor_exec(daemon.url, "true", options=("--network", "off"))
    assert alone.returncode == 2 and b"--profile" in alone.stderr
    both = executor_exec(daemon.url, "true", options=("--tty", "--no-stdin"))
    assert both.returncode == 2 and b"--no-stdin" in both.stderr


CAT_END = ("/bin/sh", "-c", "cat; echo end")


def test_no_stdin_leaves_ours_unread_and_the_commands_empty(daemon: RunningDaemon) -> None:
    """With --no-stdin our stdin is not forwarded (not even read: it is still all there
    for the next reader) and the command reads EOF at once."""
    with tempfile.TemporaryFile() as ours:
        ours.write(b"not for the command\n")
        ours.seek(0)
        result = subprocess.run(
            [*executor_command(), "exec", "--url", daemon.url, "--no-stdin", "--", *CAT_END],
            stdin=ours,
            capture_output=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert (result.returncode, result.stdout, result.stderr) == (0, b"end\n", b"")
        assert ours.read() == b"not for the command\n"
    forwarded = executor_exec(daemon.url, *CAT_END, stdin=b"in\n")
    assert (forwarded.returncode, forwarded.stdout) == (0, b"in\nend\n")


# --- connecting ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_connection_errors_are_one_line(daemon_factory: type[RunningDaemon], ws: Path) -> None:
    """Nothing listening, a token refused, and a usage error: one line each, non-zero."""
    url = f"ws://127.0.0.1:{_free_port()}"
    nothing = executor_exec(url, "true")
    assert nothing.returncode == 125
    assert re.fullmatch(rf"executor: {url}: cannot connect.*\n", nothing.stderr.decode())
    token = ws / "token"
    token.write_text("right-token-of-enough-length\n")
    guarded = daemon_factory(
        ["--ws-auth", "capability-token", "--ws-token-file", str(token)], cwd=str(ws)
    )
    (ws / "wrong").write_text("wrong-token\n")
    for options in ((), ("--token-file", str(ws / "wrong"))):
        refused = executor_exec(guarded.url, "true", options=options)
        assert refused.returncode == 125
        line = refused.stderr.decode()
        assert line.count("\n") == 1 and "HTTP 401" in line and "--token-file" in line, line
    allowed = executor_exec(guarded.url, "echo", "in", options=("--token-file", str(token)))
    assert (allowed.returncode, allowed.stdout) == (0, b"in\n")
    usage = executor_exec("http://127.0.0.1:1", "true")
    assert usage.returncode == 2
    assert usage.stderr.decode().count("\n") == 1


def test_over_stdio(ws: Path) -> None:
    """`--url stdio:CMD` runs an executor and speaks to it over its pipes."""
    server = shlex.join([*executor_command(), "serve", "--listen", "stdio", "--log-level", "error"])
    result = executor_exec(f"stdio:{server}", "/bin/sh", "-c", "echo over stdio; exit 4", stdin=b"")
    assert (result.returncode, result.stdout, result.stderr) == (4, b"over stdio\n", b"")


# --- a dropped connection -----------------------------------------------------------------


class Relay:
    """A TCP relay to ``target`` whose connections the test can cut."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("ws://").rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"ws://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections: list[socket.socket] = []
        self.accepted = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                self.accepted += 1
                self.connections += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        """Reset every connection (the client sees its connection die mid-stream)."""
        with self._lock:
            connections, self.connections = self.connections, []
        for sock in connections:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self.listener.close()
        self.cut()


def test_a_dropped_connection_is_ridden_out(daemon: RunningDaemon) -> None:
    """The connection is cut in the middle of the output: every line arrives once, in
    order, the status too, and nothing is said about it."""
    relay = Relay(daemon.url)
    script = (
        "i=0; while [ $i -lt 4000 ]; do i=$((i+1)); echo line $i; "
        "if [ $i = 1000 ]; then sleep 1; fi; done; exit 7"
    )
    try:
        process = subprocess.Popen(
            [*executor_command(), "exec", "--url", relay.url, "--", "/bin/sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert process.stdout is not None
        first = []
        for line in process.stdout:
            first.append(line)
            if line == b"line 1000\n":
                break
        relay.cut()
        out, err = process.communicate(timeout=TIMEOUT)
    finally:
        relay.close()
    lines = b"".join([*first, out]).decode().splitlines()
    assert lines == [f"line {i}" for i in range(1, 4001)]
    assert (process.returncode, err) == (7, b"")
    assert relay.accepted >= 2  # it did reconnect
