"""`executor run` as a terminal program: a terminal of its own for the command, and pipes.

The terminal tests start `executor run` on the slave side of a pseudo-terminal, as a user's
shell would, and type into the master side; the others give it pipes.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import tempfile
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.executor_linux.conftest import linux_sandbox_available
from tests.support.daemon import executor_command
from tests.support.enforcement import skip_unless


@pytest.fixture
def ws() -> Iterator[Path]:
    """A workspace outside /tmp (the workspace profile may write /tmp)."""
    path = Path(tempfile.mkdtemp(prefix="executor-tty-", dir="/var/tmp")).resolve()
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


class Session:
    """`executor run ARGS` on a fresh pseudo-terminal of 40x100."""

    def __init__(self, *args: str, cwd: Path) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
        self.process = subprocess.Popen(
            [*executor_command(), "run", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            start_new_session=True,
        )
        os.close(slave)
        self.seen = b""

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def expect(self, marker: bytes, timeout: float = 20) -> bytes:
        """Read until ``marker`` appears; everything read so far."""
        deadline = time.monotonic() + timeout
        while marker not in self.seen:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"{marker!r} never came; saw {self.seen!r}"
            ready, _, _ = select.select([self.master], [], [], remaining)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # EIO: the last slave holder is gone
                    chunk = b""
                assert chunk, f"{marker!r} never came before EOF; saw {self.seen!r}"
                self.seen += chunk
        return self.seen

    def finish(self) -> int:
        return self.process.wait(timeout=20)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.master)


@pytest.fixture
def sessions() -> Iterator[Callable[..., Session]]:
    """Start sessions; each is stopped and closed at the end of the test."""
    started: list[Session] = []

    def start(*args: str, cwd: Path) -> Session:
        started.append(Session(*args, cwd=cwd))
        return started[-1]

    yield start
    for session in started:
        session.close()


@pytest.fixture(params=["danger-full-access", "workspace"])
def profile(request: pytest.FixtureRequest) -> str:
    if request.param != "danger-full-access":
        skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    return str(request.param)


def test_a_shell_gets_its_own_terminal_of_our_size(
    ws: Path, profile: str, sessions: Callable[..., Session]
) -> None:
    session = sessions("--profile", profile, "--workspace", str(ws), "--", "/bin/sh", cwd=ws)
    session.type("tty; stty size; echo inside-$((40+2)); exit 3\n")
    seen = session.expect(b"inside-42")
    assert session.finish() == 3
    # Its own terminal; a sandbox has a private /dev where it is named /dev/console.
    assert (b"/dev/pts/" if profile == "danger-full-access" else b"/dev/console") in seen
    assert b"40 100" in seen


def test_ctrl_c_reaches_the_command_not_executor(
    ws: Path, profile: str, sessions: Callable[..., Session]
) -> None:
    session = sessions("--profile", profile, "--workspace", str(ws), "--", "/bin/sh", cwd=ws)
    session.type("echo ready; sleep 30\n")
    session.expect(b"ready\r\n")
    time.sleep(0.3)
    session.type("\x03")  # ^C: the sleep dies; the shell (and executor run) go on
    session.type("echo after-$?\n")
    session.expect(b"after-130")
    session.type("exit 0\n")
    assert session.finish() == 0


def test_the_sandbox_holds_inside_the_terminal(ws: Path, sessions: Callable[..., Session]) -> None:
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    outside = Path(tempfile.mkdtemp(prefix="executor-tty-outside-", dir="/var/tmp"))
    try:
        session = sessions(
            "--profile", "workspace", "--workspace", str(ws), "--", "/bin/sh", cwd=ws
        )
        session.type(f"echo x > {outside}/f || echo refused; echo y > {ws}/g && echo written\n")
        session.expect(b"written")
        session.type("exit\n")
        session.finish()
        assert b"refused" in session.seen
        assert not (outside / "f").exists()
        assert (ws / "g").read_text() == "y\n"
    finally:
        subprocess.run(["rm", "-rf", str(outside)], check=False)


def test_without_a_terminal_nothing_changes(ws: Path) -> None:
    script = "test -t 0 && echo terminal || echo pipes"
    argv = ["run", "--profile", "danger-full-access", "--", "/bin/sh", "-c", script]
    result = subprocess.run(
        [*executor_command(), *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ws,
        timeout=30,
        check=False,
    )
    assert result.stdout == "pipes\n"


@pytest.mark.parametrize("profile_name", ["danger-full-access", "workspace"])
def test_a_reader_that_goes_away_stops_the_command_as_a_pipe_would(
    ws: Path, profile_name: str
) -> None:
    """`executor run -- yes | head -1`: once our stdout is gone the command gets SIGPIPE, as
    it would have writing there itself, and `executor run` exits 141 — no busy loop."""
    if profile_name != "danger-full-access":
        skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    argv = ["run", "--profile", profile_name, "--workspace", str(ws), "--", "yes"]
    process = subprocess.Popen(
        [*executor_command(), *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ws,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline() == b"y\n"
    process.stdout.close()
    try:
        code = process.wait(timeout=20)
    finally:
        process.kill()
    assert code == 141
    assert b"Traceback" not in process.stderr.read()
    process.stderr.close()
