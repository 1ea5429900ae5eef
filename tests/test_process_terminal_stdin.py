"""Ours, beyond the reference: a terminal's size at ``process/start`` and later
(``process/resizePty``), and the end of a stdin pipe (``process/write`` ``closeStdin``) —
what ``executor exec`` needs to relay a local terminal and a local stdin."""

from __future__ import annotations

import base64
import itertools
import time
from typing import Any

import pytest

from tests.support.client import RpcError, WsClient, b64, output_of

#: Each write has its own id: a repeated id is a retry, which is not written again.
_WRITE_IDS = itertools.count()

BASE: dict[str, Any] = {"cwd": "file:///tmp", "env": {"PATH": "/usr/bin:/bin"}}


def _start(client: WsClient, process_id: str, argv: list[str], **extra: Any) -> None:
    client.request(
        "process/start", {**BASE, "tty": False, "processId": process_id, "argv": argv, **extra}
    )


def _write(client: WsClient, process_id: str, data: bytes, **extra: Any) -> str:
    params = {"processId": process_id, "chunk": b64(data), "writeId": f"w{next(_WRITE_IDS)}"}
    status: str = client.request("process/write", {**params, **extra})["status"]
    return status


def _until(client: WsClient, process_id: str, wanted: bytes, timeout: float = 10.0) -> bytes:
    """Collect the process's output until ``wanted`` appears."""
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        note = client.notification(
            "process/output",
            where=lambda n: n["params"]["processId"] == process_id,
            timeout=max(0.1, deadline - time.monotonic()),
        )
        seen += base64.b64decode(note["params"]["chunk"])
    return seen


def test_a_terminal_starts_at_the_size_asked_for(client: WsClient) -> None:
    """``size`` sets the terminal before the command runs; without it, 24 x 80 as the
    reference."""
    _result, events = client.run(
        "sized", ["/bin/sh", "-c", "stty size"], tty=True, size={"rows": 41, "cols": 132}
    )
    assert output_of(events) == b"41 132\r\n"
    _result, events = client.run("unsized", ["/bin/sh", "-c", "stty size"], tty=True)
    assert output_of(events) == b"24 80\r\n"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"tty": False, "size": {"rows": 30, "cols": 100}}, "size requires tty: true"),
        ({"tty": True, "size": {"rows": 0, "cols": 100}}, "rows and cols must be at least 1"),
        ({"tty": True, "size": {"rows": 70000, "cols": 100}}, "u16"),
    ],
)
def test_a_bad_size_is_refused_and_nothing_runs(
    client: WsClient, extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(RpcError) as refused:
        client.request(
            "process/start", {**BASE, "processId": "bad", "argv": ["/bin/true"], **extra}
        )
    assert refused.value.code == -32602
    assert message in refused.value.message
    with pytest.raises(RpcError, match="unknown process id bad"):
        client.request("process/read", {"processId": "bad"})


def test_resize_reaches_the_terminal_and_its_foreground_program(client: WsClient) -> None:
    """The new size is the terminal's, and the foreground program gets SIGWINCH."""
    script = "trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 0.05; done"
    _start(client, "rs", ["/bin/sh", "-c", script], tty=True)
    _until(client, "rs", b"ready")
    size = {"rows": 50, "cols": 160}
    assert client.request("process/resizePty", {"processId": "rs", "size": size}) == {}
    events = client.process_events("rs")
    assert output_of(events).endswith(b"50 160\r\n"), output_of(events)
    assert events[-2]["params"]["exitCode"] == 0


def test_resize_errors(client: WsClient) -> None:
    """An unknown process and one without a terminal are -32600; a bad size -32602. Once
    the command is gone, a resize changes nothing and is no error."""
    with pytest.raises(RpcError) as unknown:
        client.request("process/resizePty", {"processId": "nope", "size": {"rows": 5, "cols": 5}})
    assert (unknown.value.code, unknown.value.message) == (-32600, "unknown process id nope")
    client.run("piped", ["/bin/true"])
    with pytest.raises(RpcError) as piped:
        client.request("process/resizePty", {"processId": "piped", "size": {"rows": 5, "cols": 5}})
    assert (piped.value.code, piped.value.message) == (-32600, "process piped has no terminal")
    client.run("gone", ["/bin/true"], tty=True)
    with pytest.raises(RpcError) as zero:
        client.request("process/resizePty", {"processId": "gone", "size": {"rows": 5, "cols": 0}})
    assert zero.value.code == -32602
    assert (
        client.request("process/resizePty", {"processId": "gone", "size": {"rows": 5, "cols": 5}})
        == {}
    )


def test_close_stdin_ends_the_input_after_the_last_chunk(client: WsClient) -> None:
    """``closeStdin`` with the last chunk: the command reads it, then EOF; later writes are
    ``stdinClosed``; the same write sent again (a retry) is ``accepted`` and does nothing."""
    _start(client, "cat", ["/bin/cat"], pipeStdin=True)
    assert _write(client, "cat", b"first\n") == "accepted"
    last = {"processId": "cat", "chunk": b64(b"last\n"), "writeId": "the-last", "closeStdin": True}
    assert client.request("process/write", last) == {"status": "accepted"}
    events = client.process_events("cat")
    assert output_of(events) == b"first\nlast\n"
    assert events[-2]["params"]["exitCode"] == 0
    assert client.request("process/write", last) == {"status": "accepted"}
    assert _write(client, "cat", b"more") == "stdinClosed"


def test_close_stdin_alone_and_a_large_buffered_chunk(client: WsClient) -> None:
    """An empty chunk just closes; a chunk larger than the pipe holds is written whole
    before the close."""
    _start(client, "empty", ["/bin/sh", "-c", "cat; echo eof"], pipeStdin=True)
    assert _write(client, "empty", b"", closeStdin=True) == "accepted"
    assert output_of(client.process_events("empty")) == b"eof\n"
    big = bytes(range(256)) * 4096  # 1 MiB, more than a pipe buffer
    _start(client, "big", ["/bin/sh", "-c", "wc -c"], pipeStdin=True)
    assert _write(client, "big", big, closeStdin=True) == "accepted"
    assert output_of(client.process_events("big")).strip() == str(len(big)).encode()


def test_close_stdin_is_for_a_pipe(client: WsClient) -> None:
    """A terminal's input ends with ^D: ``closeStdin`` on one is refused, nothing written."""
    _start(client, "term", ["/bin/cat"], tty=True)
    with pytest.raises(RpcError) as refused:
        _write(client, "term", b"x\n", closeStdin=True)
    assert refused.value.code == -32602
    assert "closeStdin needs a stdin pipe" in refused.value.message
    assert _write(client, "term", b"\x04") == "accepted"
    events = client.process_events("term")
    assert output_of(events) == b""
    assert events[-2]["params"]["exitCode"] == 0
