"""The native launcher's sandbox specs on its wire, and which launcher the spawner picks.

A spec the launcher cannot read in full (cut short, a record it does not know, another
version) is refused before anything runs, and the launcher serves the next request; the
spawner sends specs only to a launcher that names their version, and only when
``EXECUTOR_SANDBOX_LAUNCH`` does not ask for the Python one. The layers themselves are
tested against both launchers in ``tests/executor_linux`` (``test_launch_paths.py`` and the
whole package, run once per launcher).
"""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

import psutil
import pytest
from executor_linux import native_spec
from executor_linux.launch_spec import LandlockRules, LaunchSpec, Limits

from executor.sandbox import ChildSetup, Command
from executor.spawn import spawner as spawner_module
from executor.spawn.spawner import Spawner, sandbox_launch_mode
from tests.spawn.test_native_launcher import control, program, request, send, status_lines

__all__ = ["control", "program"]  # fixtures, shared with the plain launcher's tests


def sandboxed(spec: bytes, marker: Path) -> bytes:
    """A request to run a command that creates ``marker``, under ``spec``."""
    plain = request("/bin/sh", "-c", f"echo ran > {marker}")
    return b"S\0\0\0\0" + struct.pack(">I", len(spec)) + spec + plain


def record(tag: int, value: bytes) -> bytes:
    return struct.pack(">BI", tag, len(value)) + value


#: Limits only (no namespaces, no Landlock, no filter): a spec every host can apply.
LIMITS_ONLY = native_spec.encode(LaunchSpec(limits=Limits(rlimits=(("RLIMIT_NOFILE", 512),))))


def test_a_spec_the_launcher_reads_runs_the_command(control: socket.socket, tmp_path: Path) -> None:
    assert LIMITS_ONLY is not None
    marker = tmp_path / "ran"
    lines = status_lines(sandboxed(LIMITS_ONLY, marker), control)
    assert lines[0].startswith("O no_new_privs + capabilities(none)"), lines
    assert lines[1].startswith("S ") and lines[-1] == "X 0"
    assert marker.read_text() == "ran\n"


@pytest.mark.parametrize(
    ("spec", "answer"),
    [
        (b"", "malformed sandbox spec"),
        (b"EXS\x02", "unsupported sandbox spec version"),
        (b"XXS\x01", "malformed sandbox spec"),
        (b"EXS\x01" + record(9, b"x"), "unknown sandbox spec record"),
        (b"EXS\x01" + record(30, b"\0" * 8)[:-1], "malformed sandbox spec"),  # cut short
        (b"EXS\x01" + record(30, b"\0" * 7), "malformed sandbox spec"),  # not whole insns
        (b"EXS\x01" + record(1, b"relative/tasks"), "malformed sandbox spec"),
        (b"EXS\x01" + record(1, b"/a\0b"), "malformed sandbox spec"),
        (b"EXS\x01" + record(14, b"w/tmp"), "malformed sandbox spec"),  # mounts, no namespaces
        (b"EXS\x01" + record(21, struct.pack(">Q", 1) + b"/"), "malformed sandbox spec"),
        (b"EXS\x01" + record(20, b"\0" * 24) * 2, "malformed sandbox spec"),  # twice
        (b"EXS\x01" + record(2, struct.pack(">IQ", 999, 1)), "malformed sandbox spec"),
    ],
    ids=[
        "empty",
        "version",
        "magic",
        "unknown-record",
        "truncated",
        "partial-filter",
        "relative-path",
        "nul-in-path",
        "mounts-without-namespaces",
        "grant-without-ruleset",
        "repeated-ruleset",
        "unknown-rlimit",
    ],
)
def test_a_spec_it_cannot_read_in_full_is_refused_and_nothing_runs(
    control: socket.socket, tmp_path: Path, spec: bytes, answer: str
) -> None:
    marker = tmp_path / "ran"
    lines = status_lines(sandboxed(spec, marker), control)
    assert lines == [f"E launcher 0 {answer}"]
    assert not marker.exists()
    assert status_lines(request("/bin/true"), control)[-1] == "X 0"


def test_a_spec_length_past_the_request_is_refused(control: socket.socket, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    payload = b"S\0\0\0\0" + struct.pack(">I", 1 << 20) + request("/bin/true")
    assert status_lines(payload, control) == ["E launcher 0 malformed launch request"]
    assert not marker.exists()


def _sandboxed_command(native: bytes | None) -> Command:
    setup = ChildSetup(module_path="/nonexistent.py", function="run", payload=b"", native=native)
    return Command(executable="/bin/true", argv=("true",), env={}, cwd="/", tty=False, setup=setup)


def test_the_spawner_sends_specs_to_the_native_launcher_only_when_it_may(
    program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EXECUTOR_SANDBOX_LAUNCH", raising=False)
    assert sandbox_launch_mode() == "native"
    spec = LIMITS_ONLY
    plain = Command(executable="/bin/true", argv=("true",), env={}, cwd="/", tty=False)
    spawner = Spawner()
    try:
        assert spawner.sandbox_supervisor == "native"
        assert spawner.launcher_for(plain) == "native"
        assert spawner.launcher_for(_sandboxed_command(spec)) == "native"
        assert spawner.launcher_for(_sandboxed_command(None)) == "python"  # no native form
        other_version = b"EXS\x02" + (spec or b"")[4:]
        assert spawner.launcher_for(_sandboxed_command(other_version)) == "python"
    finally:
        spawner.close()

    monkeypatch.setenv("EXECUTOR_SANDBOX_LAUNCH", "python")
    spawner = Spawner()
    try:
        assert spawner.sandbox_supervisor == "python"
        assert spawner.launcher_for(_sandboxed_command(spec)) == "python"
        assert spawner.launcher_for(plain) == "native"  # plain commands stay native
    finally:
        spawner.close()


def test_a_launcher_that_predates_specs_gets_none(
    program: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its usage text names no spec version: sandboxed commands go to the Python launcher."""
    monkeypatch.delenv("EXECUTOR_SANDBOX_LAUNCH", raising=False)
    old_usage = b"usage: executor-launcher CONTROL-FD DAEMON-PID (started by the daemon)\n"
    monkeypatch.setattr(spawner_module, "_usage", lambda _program: old_usage)
    spawner = Spawner()
    try:
        assert spawner.sandbox_supervisor == "python"
        assert spawner.launcher_for(_sandboxed_command(LIMITS_ONLY)) == "python"
    finally:
        spawner.close()


def test_the_encoding_keeps_every_layer_or_gives_up() -> None:
    """Every part of a spec becomes a record; what the encoding cannot carry gives ``None``
    (the Python launcher then runs it) rather than a spec with less in it."""
    rules = LandlockRules(fs=7, net=0, scoped=0, grants=(("/usr", 5), ("/tmp", 7)))
    encoded = native_spec.encode(LaunchSpec(landlock=rules, seccomp=b"\0" * 16))
    assert encoded is not None
    assert encoded.startswith(b"EXS" + bytes([native_spec.VERSION]))
    assert record(21, struct.pack(">Q", 5) + b"/usr") in encoded
    assert record(30, b"\0" * 16) in encoded
    assert native_spec.encode(LaunchSpec(limits=Limits(cgroups=("relative/tasks",)))) is None
    assert native_spec.encode(LaunchSpec(seccomp=b"\0" * 7)) is None
    assert native_spec.encode(LaunchSpec(landlock=rules._replace(grants=(("/a\0b", 1),)))) is None
    assert os.fsencode("/usr") in encoded


def test_a_child_that_dies_before_the_command_starts_is_a_failed_start(
    control: socket.socket, tmp_path: Path
) -> None:
    """Killed in the middle of its layers (here: blocked opening the network namespace to
    join, a FIFO nobody writes), the child never reported the command started: the launch
    fails instead of reporting a start."""
    fifo = tmp_path / "netns"
    os.mkfifo(fifo)
    staging = tmp_path / "staging"
    staging.mkdir()
    spec = b"".join(
        [
            b"EXS\x01",
            record(10, struct.pack(">3BII", 0, 0, 0, os.getuid(), os.getgid())),
            record(11, struct.pack(">Q", 1) + os.fsencode(fifo)),
            record(12, os.fsencode(staging)),
            record(13, bytes([0, 0, 0, 0])),
        ]
    )
    marker = tmp_path / "ran"
    status_r, status_w = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    send(control, sandboxed(spec, marker), [status_w, null, null, null])
    os.close(status_w)
    os.close(null)
    deadline = time.monotonic() + 10
    blocked: list[psutil.Process] = []
    while not blocked and time.monotonic() < deadline:
        time.sleep(0.02)
        # The launcher server, its supervisor, and the supervisor's child: the one blocked.
        blocked = [p for p in psutil.Process().children(recursive=True) if _depth(p) == 3]
    assert blocked, "the sandboxed child was not found"
    for process in blocked:
        process.kill()
    data = b""
    while chunk := os.read(status_r, 4096):
        data += chunk
    os.close(status_r)
    assert data.decode().splitlines() == [
        "E launcher 0 the sandboxed child ended before the command started"
    ]
    assert not marker.exists()


def _depth(process: psutil.Process) -> int:
    """How many parents up this test process is (1: its child)."""
    depth, me = 0, os.getpid()
    current: psutil.Process | None = process
    while current is not None and current.pid != me and depth < 8:
        current = current.parent()
        depth += 1
    return depth if current is not None and current.pid == me else -1
