"""The native launcher program (``executor/spawn/launcher.c``) on its own wire.

The daemon is its only client, but the program must survive a confused one: a malformed
request is answered on the status pipe it came with, and the next request is served.
"""

from __future__ import annotations

import array
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from executor.spawn.spawner import native_launcher
from tests.support.enforcement import skip_unless


@pytest.fixture
def program() -> Path:
    skip_unless(
        sys.platform.startswith("linux") and native_launcher() is not None,
        "the native launcher is not built (no C compiler at install time?)",
    )
    path = native_launcher()
    assert path is not None
    return path


@pytest.fixture
def control(program: Path) -> Iterator[socket.socket]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    server = subprocess.Popen(
        [str(program), str(theirs.fileno()), str(os.getpid())], pass_fds=(theirs.fileno(),)
    )
    theirs.close()
    try:
        yield ours
    finally:
        ours.close()
        assert server.wait(timeout=10) == 0  # EOF on the control socket ends it cleanly


def send(control: socket.socket, payload: bytes, fds: list[int]) -> None:
    data = struct.pack(">I", len(payload)) + payload
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
    control.sendmsg([data[:1]], rights)
    control.sendall(data[1:])


def status_lines(payload: bytes, control: socket.socket) -> list[str]:
    """Send one request with fresh pipes; every status line until the supervisor's EOF."""
    status_r, status_w = os.pipe()
    out_r, out_w = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    send(control, payload, [status_w, null, out_w, null])
    for fd in (status_w, out_w, null):
        os.close(fd)
    data = b""
    while chunk := os.read(status_r, 4096):
        data += chunk
    os.close(status_r)
    os.close(out_r)
    return data.decode().splitlines()


def request(*argv: str, cwd: str = "/", tty: bool = False) -> bytes:
    fields = [b"1" if tty else b"0", cwd.encode(), argv[0].encode(), str(len(argv)).encode()]
    fields += [arg.encode() for arg in argv] + [b"PATH=/usr/bin:/bin"]
    return b"\0".join(fields) + b"\0"


def test_a_well_formed_request_is_started_reported_and_reaped(control: socket.socket) -> None:
    started, exited = status_lines(request("/bin/sh", "-c", "exit 7"), control)
    kind, pid, supervisor = started.split()
    assert kind == "S"
    assert int(pid) != int(supervisor)
    kind, status = exited.split()
    assert (kind, os.waitstatus_to_exitcode(int(status))) == ("X", 7)


@pytest.mark.parametrize(
    "payload",
    [
        b"",  # nothing at all
        b"0\0/\0/bin/true\0",  # no argc
        b"0\0/\0/bin/true\0x\0true\0",  # argc is not a number
        b"0\0/\0/bin/true\0" + b"0\0",  # argc 0
        b"0\0/\0/bin/true\0" + b"5\0true\0",  # argc larger than the fields
        b"0\0/\0/bin/true\0" + b"1\0true",  # the last field is not terminated
        b"K\0\0\0\x40" + b"0\0/\0/bin/true\0" + b"1\0true\0",  # no such kept supervisor
        b"K\0\0\0\x00",  # a kept supervisor's slot, then nothing
        b"K\0\0\0\x00S\0\0\0\0\0\0\0\0",  # a slot's request cannot carry a sandbox
    ],
    ids=[
        "empty",
        "no-argc",
        "argc-nan",
        "argc-zero",
        "argc-too-large",
        "unterminated",
        "slot-out-of-range",
        "slot-only",
        "slot-and-spec",
    ],
)
def test_a_malformed_request_is_answered_and_the_next_one_served(
    control: socket.socket, payload: bytes
) -> None:
    assert status_lines(payload, control) == ["E launcher 0 malformed launch request"]
    assert status_lines(request("/bin/true"), control)[-1] == "X 0"


def test_a_request_with_the_wrong_descriptors_is_refused(control: socket.socket) -> None:
    status_r, status_w = os.pipe()
    send(control, request("/bin/true"), [status_w])  # status only, no stdio
    os.close(status_w)
    assert os.read(status_r, 4096) == b"E launcher 0 malformed launch request\n"
    os.close(status_r)
    assert status_lines(request("/bin/true"), control)[-1] == "X 0"


def test_exec_failures_carry_the_errno(control: socket.socket) -> None:
    assert status_lines(request("/nonexistent"), control) == ["E exec 2 No such file or directory"]
    assert status_lines(request("/bin/true", cwd="/nonexistent"), control) == [
        "E chdir 2 No such file or directory"
    ]


def test_it_explains_itself_when_run_by_hand(program: Path) -> None:
    result = subprocess.run([str(program)], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "started by the daemon" in result.stderr


_SAFE_PROGRAMS = (b"/bin/true", b"/nonexistent/program", b"relative", b"")


def _would_run(payload: bytes) -> bytes | None:
    """The program a payload would start if the launcher accepted it (the fields' third)."""
    fields = payload.split(b"\0")
    return fields[2] if len(fields) > 3 else None


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    payload=st.one_of(
        st.binary(max_size=64),
        st.lists(
            st.sampled_from([b"0", b"1", b"/", b"2", b"-1", b"9" * 30, b"A=B", b"", b"x" * 300]),
            max_size=8,
        ).map(lambda fields: b"\0".join(fields)),
        st.tuples(
            st.sampled_from(_SAFE_PROGRAMS),
            st.lists(
                st.binary(min_size=1, max_size=8).filter(lambda b: b"\0" not in b), max_size=4
            ),
        ).map(
            lambda t: (
                b"\0".join([b"0", b"/", t[0], str(len(t[1]) + 1).encode(), b"x", *t[1]]) + b"\0"
            )
        ),
    )
)
def test_any_request_gets_one_answer_and_the_launcher_lives_on(
    control: socket.socket, payload: bytes
) -> None:
    assume(_would_run(payload) in (None, *_SAFE_PROGRAMS))  # never start anything else
    lines = status_lines(payload, control)
    assert lines, "no answer on the status pipe"
    assert lines[0].split(" ", 1)[0] in ("S", "E")
    assert status_lines(request("/bin/true"), control)[-1] == "X 0"
