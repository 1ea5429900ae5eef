"""process/read (protocol.md §5.6): afterSeq, maxBytes, waitMs, nextSeq, retention, reaping."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest

from tests.support.client import WsClient
from tests.support.daemon import RunningDaemon

BASE: dict[str, Any] = {"cwd": "file:///tmp", "env": {"PATH": "/usr/bin:/bin"}, "tty": False}


def _start(client: WsClient, process_id: str, script: str, **extra: Any) -> None:
    client.request(
        "process/start",
        {**BASE, "processId": process_id, "argv": ["/bin/sh", "-c", script], **extra},
    )


def _read(client: WsClient, process_id: str, **params: Any) -> dict[str, Any]:
    result: dict[str, Any] = client.request("process/read", {"processId": process_id, **params})
    return result


def _data(read: dict[str, Any]) -> bytes:
    return b"".join(base64.b64decode(c["chunk"]) for c in read["chunks"])


def _wait_closed(client: WsClient, process_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 15
    while True:
        read = _read(client, process_id, afterSeq=2**63, waitMs=1000)
        if read["closed"] or time.monotonic() > deadline:
            return read


def test_read_fields_of_a_finished_process(client: WsClient) -> None:
    """Everything retained, with exit state, nextSeq past exited/closed."""
    client.run("fin", ["/bin/sh", "-c", "echo out; exit 2"])
    read = _read(client, "fin", afterSeq=None, maxBytes=None, waitMs=None)
    assert read == {
        "chunks": [{"seq": 1, "stream": "stdout", "chunk": base64.b64encode(b"out\n").decode()}],
        "nextSeq": 4,
        "exited": True,
        "exitCode": 2,
        "closed": True,
        "failure": None,
        "sandboxDenied": False,
    }


def test_max_bytes_pages_whole_chunks(client: WsClient) -> None:
    """Paging with maxBytes returns whole chunks, at least one, and nextSeq continues the walk."""
    _start(client, "pages", "for i in 1 2 3 4 5 6; do echo line-$i; sleep 0.02; done")
    _wait_closed(client, "pages")
    after, collected, pages = 0, b"", 0
    while True:
        read = _read(client, "pages", afterSeq=after, maxBytes=1)
        if not read["chunks"]:
            break
        assert len(read["chunks"]) == 1
        collected += _data(read)
        after = read["nextSeq"] - 1
        pages += 1
    assert collected == b"".join(f"line-{i}\n".encode() for i in range(1, 7))
    assert pages >= 2
    all_at_once = _read(client, "pages", maxBytes=10**9)
    assert _data(all_at_once) == collected
    assert all_at_once["nextSeq"] == all_at_once["chunks"][-1]["seq"] + 3  # exited, closed


def test_after_seq_beyond_end_is_empty(client: WsClient) -> None:
    """afterSeq past every chunk returns no chunks (immediately for an exited process)."""
    client.run("beyond", ["/bin/echo", "x"])
    started = time.monotonic()
    read = _read(client, "beyond", afterSeq=1000, waitMs=5000)
    assert time.monotonic() - started < 1
    assert read["chunks"] == []
    assert read["nextSeq"] == 4


def test_long_poll_is_woken_by_exit(client: WsClient) -> None:
    """A waiting read on a silent process returns when the process exits (which the test
    causes only once the read is waiting, by a line to the process's stdin)."""
    _start(client, "quiet", "read go; exit 4", pipeStdin=True)
    read_id = client.next_id()
    client.send(
        {
            "id": read_id,
            "method": "process/read",
            "params": {"processId": "quiet", "waitMs": 60_000},
        }
    )
    assert _read(client, "quiet")["exited"] is False  # answered while the long poll waits
    write = {"processId": "quiet", "chunk": base64.b64encode(b"go\n").decode(), "writeId": "w"}
    assert client.request("process/write", write) == {"status": "accepted"}
    read = client.response(read_id, timeout=30)["result"]  # not its 60 s timeout
    assert read["exited"] is True
    assert read["exitCode"] == 4


def test_long_poll_times_out_empty(client: WsClient) -> None:
    """With nothing to report, a read waits waitMs and answers empty, not exited."""
    _start(client, "idle", "exec sleep 60")
    started = time.monotonic()
    read = _read(client, "idle", waitMs=300)
    # Not before waitMs; and at waitMs, not when the process ends (60 s) — the wide upper
    # bound only tells those apart, so a loaded machine cannot fail it.
    assert 0.25 < time.monotonic() - started < 30
    assert read["chunks"] == []
    assert read["exited"] is False
    assert read["nextSeq"] == 1
    client.request("process/terminate", {"processId": "idle"})


def test_zero_wait_answers_immediately(client: WsClient) -> None:
    """waitMs 0 (or absent) never waits."""
    _start(client, "now", "exec sleep 5")
    started = time.monotonic()
    assert _read(client, "now", waitMs=0)["chunks"] == []
    assert _read(client, "now")["chunks"] == []
    assert time.monotonic() - started < 0.5
    client.request("process/terminate", {"processId": "now"})


@pytest.mark.parametrize(
    ("params", "ok"),
    [
        ({"maxBytes": 2**64 - 1}, True),
        ({"waitMs": 2**64 - 1}, True),
        ({"afterSeq": 2**64 - 1}, True),
        ({"maxBytes": 2**64}, False),
        ({"waitMs": -1}, False),
        ({"afterSeq": -1}, False),
        ({"afterSeq": 1.5}, False),
        ({"maxBytes": "10"}, False),
    ],
    ids=[
        "max-u64-bytes",
        "max-u64-wait",
        "max-u64-after",
        "bytes-over-u64",
        "negative-wait",
        "negative-after",
        "float-after",
        "string-bytes",
    ],
)
def test_numeric_bounds(client: WsClient, params: dict[str, Any], ok: bool) -> None:
    """u64 fields accept their whole range (huge waits are clamped); anything else is -32602."""
    client.run("bounds", ["/bin/true"])
    response = client.call("process/read", {"processId": "bounds", **params})
    if ok:
        assert response["result"]["exited"] is True
    else:
        assert response["error"]["code"] == -32602


def test_unknown_process(client: WsClient) -> None:
    """Reading an unknown id is -32600 unknown process id."""
    response = client.call("process/read", {"processId": "ghost"})
    assert response["error"] == {"code": -32600, "message": "unknown process id ghost"}


def test_retention_is_bounded_with_a_seq_jump(daemon_factory: type[RunningDaemon]) -> None:
    """--retained-output-bytes: only the newest whole chunks stay; earlier seqs are gone."""
    daemon = daemon_factory(["--retained-output-bytes", "20000"])
    with daemon.session() as client:
        _start(
            client, "flood", "i=0; while [ $i -lt 400 ]; do printf '%0500d\\n' $i; i=$((i+1)); done"
        )
        _wait_closed(client, "flood")
        read = _read(client, "flood")
        data = _data(read)
        biggest = max(len(base64.b64decode(c["chunk"])) for c in read["chunks"])
        assert len(data) <= 20000 + biggest
        assert read["chunks"][0]["seq"] > 1
        assert data.endswith(b"%0500d\n" % 399)
        assert data.split(b"\n")[-2] == b"%0500d" % 399
        lines = data.split(b"\n")[1:-1]  # the first may be a partial line
        assert [int(x) for x in lines] == list(range(400 - len(lines), 400))


def test_exited_process_is_reaped_after_retention(daemon_factory: type[RunningDaemon]) -> None:
    """--process-retention: readable after close, then unknown (reads don't extend it), reusable."""
    daemon = daemon_factory(["--process-retention", "1.0"])
    with daemon.session() as client:
        client.run("reap", ["/bin/echo", "x"])
        closed_at = time.monotonic()
        assert _read(client, "reap")["closed"] is True
        time.sleep(0.3)
        assert _read(client, "reap")["closed"] is True
        remaining = 1.0 - (time.monotonic() - closed_at)
        time.sleep(max(0.0, remaining) + 0.3)
        response = client.call("process/read", {"processId": "reap"})
        assert response["error"] == {"code": -32600, "message": "unknown process id reap"}
        _result, events = client.run("reap", ["/bin/echo", "again"])
        assert events[-1]["params"]["seq"] == 3


def test_running_process_is_never_reaped(daemon_factory: type[RunningDaemon]) -> None:
    """Retention starts at close: a long-running process stays readable past it."""
    daemon = daemon_factory(["--process-retention", "0.2"])
    with daemon.session() as client:
        _start(client, "alive", "echo hi; exec sleep 5")
        time.sleep(0.5)
        assert _read(client, "alive")["exited"] is False
        client.request("process/terminate", {"processId": "alive"})


def test_disconnect_mid_flood_then_recover_every_byte(shared_daemon: RunningDaemon) -> None:
    """Output produced while no connection is attached is all recoverable within retention."""
    with shared_daemon.client() as first:
        session_id = first.initialize()["sessionId"]
        _start(first, "seq", "seq 1 20000")
    with shared_daemon.client() as second:
        deadline = time.monotonic() + 5
        while True:
            response = second.call("initialize", {"clientName": "b", "resumeSessionId": session_id})
            if "result" in response or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        second.notify("initialized")
        _wait_closed(second, "seq")
        after, data = 0, b""
        while True:
            read = _read(second, "seq", afterSeq=after, maxBytes=4096)
            if not read["chunks"]:
                break
            data += _data(read)
            after = read["nextSeq"] - 1
        assert data.split() == [str(i).encode() for i in range(1, 20001)]
