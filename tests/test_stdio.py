"""stdio transport (protocol.md §1.2): newline-delimited JSON, one connection, EOF ends it."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import psutil
import pytest

from tests.support.client import StdioClient
from tests.support.daemon import start_stdio
from tests.support.processes import gone

STDIO_PREFIX = "failed to parse JSON-RPC message from exec-server stdio: "
STATUS = {"id": 5, "method": "environment/status"}


@pytest.fixture
def stdio() -> Iterator[StdioClient]:
    """A stdio daemon whose handshake is done."""
    client = start_stdio(["--log-level", "debug"])
    client.initialize()
    yield client
    client.stop()


@pytest.mark.parametrize("listen", ["stdio", "stdio://"], ids=["bare", "url"])
def test_both_spellings_serve_a_session(listen: str) -> None:
    """``--listen stdio`` and ``--listen stdio://`` are the same transport."""
    client = start_stdio(listen=listen)
    try:
        assert client.initialize()["environmentInfo"]["platformOs"] == "linux"
        assert client.request("environment/status") == {"status": "ready"}
    finally:
        client.stop()


@pytest.mark.parametrize(
    "raw",
    [
        json.dumps(STATUS) + "\r\n",
        "\n\n" + json.dumps(STATUS) + "\n\n",
        "   " + json.dumps(STATUS) + "\n",
        "\r\n" + json.dumps(STATUS) + "\n",
    ],
    ids=["crlf", "empty-lines", "leading-space", "blank-crlf-line"],
)
def test_line_tolerances(stdio: StdioClient, raw: str) -> None:
    """CRLF endings, empty lines and leading whitespace are accepted; nothing else is answered."""
    stdio.send_raw(raw)
    assert stdio.response(5) == {"id": 5, "result": {"status": "ready"}}
    assert stdio.request("environment/status") == {"status": "ready"}
    assert stdio.inbox.out_of_band == []


def test_message_split_across_writes(stdio: StdioClient) -> None:
    """One message delivered in several writes is one request."""
    text = json.dumps(STATUS) + "\n"
    for start in range(0, len(text), 7):
        stdio.send_raw(text[start : start + 7])
        time.sleep(0.01)
    assert stdio.response(5)["result"] == {"status": "ready"}


def test_several_lines_in_one_write_are_answered_in_order(stdio: StdioClient) -> None:
    """Several messages in one write are all processed, in order."""
    lines = "".join(
        json.dumps({"id": 100 + n, "method": "environment/status"}) + "\n" for n in range(20)
    )
    stdio.send_raw(lines)
    for n in range(20):
        assert stdio.response(100 + n)["result"] == {"status": "ready"}
    ids = [json.loads(line)["id"] for line in stdio.lines if b'"id":1' in line]
    assert ids == sorted(ids)


def test_parse_errors_use_the_stdio_prefix(stdio: StdioClient) -> None:
    """Malformed lines get -32600 with the stdio prefix and id -1; the connection stays."""
    stdio.send_raw("{not json\n")
    error = stdio.out_of_band()
    assert error["id"] == -1
    assert error["error"]["code"] == -32600
    assert error["error"]["message"].startswith(STDIO_PREFIX)
    stdio.send_raw("[1,2]\n")
    assert stdio.out_of_band()["error"]["message"] == STDIO_PREFIX + "expected a JSON-RPC object"
    assert stdio.request("environment/status") == {"status": "ready"}


def test_eof_exits_zero_and_kills_processes() -> None:
    """stdin EOF ends the daemon with status 0 and kills the processes it started."""
    client = start_stdio()
    try:
        client.initialize()
        client.request(
            "process/start",
            {
                "processId": "sleeper",
                "argv": ["/bin/sh", "-c", "echo $$; exec sleep 60"],
                "cwd": "file:///tmp",
                "env": {"PATH": "/usr/bin:/bin"},
                "tty": False,
            },
        )
        note = client.notification("process/output")
        pid = int(base64.b64decode(note["params"]["chunk"]))
        assert psutil.pid_exists(pid)
        started = time.monotonic()
        client.close_stdin()
        assert client.wait(timeout=10) == 0
        assert time.monotonic() - started < 5
        assert gone(pid)
    finally:
        client.stop()


def test_stdout_carries_only_protocol_lines() -> None:
    """Even at debug log level, every stdout line is one JSON object; logs go to stderr."""
    client = start_stdio(["--log-level", "debug"])
    try:
        client.initialize()
        client.request("environment/info")
        client.send_raw("garbage\n")
        client.out_of_band()
        client.run("p", ["/bin/echo", "hi"])
        client.close_stdin()
        assert client.wait() == 0
        client.stop()
        assert client.lines, "the daemon answered nothing"
        for line in client.lines:
            assert line.endswith(b"\n")
            assert isinstance(json.loads(line), dict)
        assert b"connection stdio opened" in client.stderr
    finally:
        client.stop()


def test_stdio_session_cannot_be_resumed_by_another_stdio_daemon() -> None:
    """A stdio session ends with its transport; another stdio daemon does not know its id."""
    first = start_stdio()
    try:
        session_id = first.initialize()["sessionId"]
    finally:
        first.stop()
    second = start_stdio()
    try:
        response = second.call("initialize", {"clientName": "again", "resumeSessionId": session_id})
        assert response["error"] == {
            "code": -32600,
            "message": f"unknown session id {session_id}",
        }
    finally:
        second.stop()
