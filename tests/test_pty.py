"""Terminal processes (protocol.md §5.5 tty, §10): size, device, stream, echo, ^C."""

from __future__ import annotations

import base64
import itertools
import re
import time
from typing import Any

import pytest

from tests.support.client import WsClient, b64, output_of

#: Each write has its own id: a repeated id is a retry, which is not written again.
_WRITE_IDS = itertools.count()

TTY: dict[str, Any] = {"cwd": "file:///tmp", "env": {"PATH": "/usr/bin:/bin"}, "tty": True}


def _start(client: WsClient, process_id: str, argv: list[str]) -> None:
    client.request("process/start", {**TTY, "processId": process_id, "argv": argv})


def _write(client: WsClient, process_id: str, data: bytes | str) -> None:
    status = client.request(
        "process/write",
        {"processId": process_id, "chunk": b64(data), "writeId": f"w{next(_WRITE_IDS)}"},
    )
    assert status == {"status": "accepted"}


def _until(client: WsClient, process_id: str, wanted: bytes, timeout: float = 10.0) -> bytes:
    """Collect pty output until ``wanted`` appears."""
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        note = client.notification(
            "process/output",
            where=lambda n: n["params"]["processId"] == process_id,
            timeout=max(0.1, deadline - time.monotonic()),
        )
        assert note["params"]["stream"] == "pty"
        seen += base64.b64decode(note["params"]["chunk"])
    return seen


def test_terminal_size_device_and_stream(client: WsClient) -> None:
    """A tty process sees a 24x80 /dev/pts terminal; all output is stream pty."""
    _result, events = client.run("t1", ["/bin/sh", "-c", "tty; stty size; echo err 1>&2"], tty=True)
    streams = {e["params"]["stream"] for e in events if e["method"] == "process/output"}
    assert streams == {"pty"}
    text = output_of(events)
    assert re.fullmatch(rb"/dev/pts/\d+\r\n24 80\r\nerr\r\n", text), text


def test_input_is_echoed_by_the_terminal(client: WsClient) -> None:
    """Written bytes are echoed, then the program's answer follows."""
    _start(client, "echo", ["/bin/sh", "-c", "read x; echo got:$x"])
    _write(client, "echo", "hello\n")
    events = client.process_events("echo")
    assert output_of(events) == b"hello\r\ngot:hello\r\n"
    assert events[-2]["params"]["exitCode"] == 0


#: A sleeper in the foreground that says so once it sleeps: the tests wait for the word, not
#: a while. (Not ``sh -c "echo ready; exec sleep 100"``: a ^C reaching dash while it runs the
#: ``echo`` builtin is held until its next child ends, and the exec'd sleep never sees it.)
SLEEPER = [
    "python3",
    "-c",
    "import signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "print('ready', flush=True); time.sleep(100)",
]


@pytest.mark.parametrize("argv", [SLEEPER, ["/bin/cat"]], ids=["sleep", "cat"])
def test_ctrl_c_interrupts_the_foreground_program(client: WsClient, argv: list[str]) -> None:
    """Writing ^C (0x03) makes the terminal send SIGINT to its foreground process group."""
    _start(client, "fg", argv)
    if argv[-1] == "/bin/cat":
        _write(client, "fg", "abc\n")
        _until(client, "fg", b"abc\r\nabc\r\n")
    else:
        _until(client, "fg", b"ready")
    _write(client, "fg", b"\x03")
    events = client.process_events("fg")
    assert events[-2]["params"]["exitCode"] == 130


def test_signal_interrupt_reaches_the_foreground_group(client: WsClient) -> None:
    """process/signal interrupt on a tty process interrupts its foreground program."""
    _start(client, "sig", SLEEPER)
    _until(client, "sig", b"ready")
    client.request("process/signal", {"processId": "sig", "signal": "interrupt"})
    events = client.process_events("sig")
    assert events[-2]["params"]["exitCode"] == 130


def test_eof_character_ends_cat(client: WsClient) -> None:
    """^D on an empty line is EOF for the program reading the terminal."""
    _start(client, "eof", ["/bin/cat"])
    _write(client, "eof", b"\x04")
    events = client.process_events("eof")
    assert events[-2]["params"]["exitCode"] == 0


def test_tty_process_writes_after_exit_are_stdin_closed(client: WsClient) -> None:
    """Once a tty process exited, writes report stdinClosed."""
    client.run("gone", ["/bin/true"], tty=True)
    result = client.request(
        "process/write", {"processId": "gone", "chunk": b64("x"), "writeId": "w"}
    )
    assert result == {"status": "stdinClosed"}
