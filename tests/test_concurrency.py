"""Concurrency on one connection (protocol.md §2.7, §10a): long polls block nothing, pipelining."""

from __future__ import annotations

import base64
from typing import Any

import psutil

from tests.support.client import WsClient, b64
from tests.support.daemon import RunningDaemon
from tests.support.processes import eventually
from tests.support.rawws import RawWebSocket


def _start(client: WsClient, process_id: str, script: str, **extra: Any) -> None:
    client.request(
        "process/start",
        {
            "processId": process_id,
            "argv": ["/bin/sh", "-c", script],
            "cwd": "file:///tmp",
            "env": {"PATH": "/usr/bin:/bin"},
            "tty": False,
            **extra,
        },
    )


#: A process that prints only once the test releases it (writes a line to its stdin): the
#: tests order events by that, not by sleeping.
GATED = "read go; echo released"


def _release(client: WsClient, process_id: str) -> None:
    status = client.request(
        "process/write", {"processId": process_id, "chunk": b64("go\n"), "writeId": "go"}
    )
    assert status == {"status": "accepted"}


def test_long_poll_does_not_block_other_requests(client: WsClient) -> None:
    """A waiting process/read leaves later requests on the same connection unblocked; the
    output that wakes it exists only after those requests were answered."""
    _start(client, "slow", GATED, pipeStdin=True)
    read_id = client.next_id()
    client.send(
        {"id": read_id, "method": "process/read", "params": {"processId": "slow", "waitMs": 60_000}}
    )
    assert client.request("environment/status") == {"status": "ready"}
    assert client.request("process/read", {"processId": "slow"})["chunks"] == []
    _release(client, "slow")
    # Woken by the output: waiting for its 60 s timeout would exceed this one.
    read = client.response(read_id, timeout=30)["result"]
    assert [c["seq"] for c in read["chunks"]] == [1]
    assert base64.b64decode(read["chunks"][0]["chunk"]) == b"released\n"


def test_many_long_polls_wake_together(client: WsClient) -> None:
    """Fifty concurrent long polls on one process are all woken by its first output."""
    _start(client, "ping", GATED, pipeStdin=True)
    ids = []
    for _ in range(50):
        request_id = client.next_id()
        ids.append(request_id)
        client.send(
            {
                "id": request_id,
                "method": "process/read",
                "params": {"processId": "ping", "waitMs": 60_000},
            }
        )
    assert client.request("environment/status") == {"status": "ready"}  # all 50 are in
    assert not any(request_id in client.inbox.responses for request_id in ids)
    _release(client, "ping")
    for request_id in ids:
        result = client.response(request_id, timeout=30)["result"]
        assert result["chunks"][0]["seq"] == 1


def test_pipelined_requests_are_all_answered(shared_daemon: RunningDaemon) -> None:
    """Thousands of pipelined requests with large answers are all answered (never wedged)."""
    with shared_daemon.session() as client:
        first = client.next_id()
        count = 3000
        for offset in range(count):
            client.send({"id": first + offset, "method": "environment/info"})
        for offset in range(count):
            assert "shell" in client.response(first + offset, timeout=30)["result"]
        client._next_id = first + count
        assert client.request("environment/status") == {"status": "ready"}


def test_synchronous_answers_keep_arrival_order(shared_daemon: RunningDaemon) -> None:
    """Inline-answered methods come back in the order they were sent."""
    ids = list(range(1000, 1200))
    with shared_daemon.session() as client:
        for request_id in ids:
            client.send({"id": request_id, "method": "environment/status"})
        client.inbox.wait(lambda: len(client.inbox.responses) >= len(ids), 10, "all responses")
        assert list(client.inbox.responses) == ids  # dicts keep insertion (= arrival) order


def _blocked_on_a_pipe(argv: list[str]) -> bool:
    for process in psutil.process_iter(["cmdline", "pid"]):
        if process.info["cmdline"] == argv:
            try:
                with open(f"/proc/{process.info['pid']}/wchan") as handle:
                    # pipe_write, pipe_wait_writable, anon_pipe_write: by kernel version
                    return "pipe_w" in handle.read()
            except OSError:
                return False
    return False


def test_stalled_reader_pauses_the_producer_and_loses_nothing(shared_daemon: RunningDaemon) -> None:
    """A client that stops reading blocks a flooding process (bounded memory); then all arrives."""
    total = 24 * 1024 * 1024
    argv = ["head", "-c", str(total), "/dev/zero"]
    with RawWebSocket(shared_daemon.url) as ws:
        ws.request({"id": 1, "method": "initialize", "params": {"clientName": "stall"}})
        ws.send_json({"method": "initialized"})
        ws.send_json(
            {
                "id": 2,
                "method": "process/start",
                "params": {
                    "processId": "flood",
                    "argv": argv,
                    "cwd": "file:///tmp",
                    "env": {"PATH": "/usr/bin:/bin"},
                    "tty": False,
                },
            }
        )
        # Read nothing: the daemon's buffer fills and it must stop pumping, so the producer
        # ends up blocked writing to its full pipe (what the kernel shows as its wait channel).
        assert eventually(lambda: _blocked_on_a_pipe(argv), timeout=20), (
            "the producer should still be running, blocked on its full pipe"
        )
        assert psutil.Process(shared_daemon.pid).memory_info().rss < 200 * 1024 * 1024
        received, seqs = 0, []
        while True:
            message = ws.recv_json(timeout=30)
            if "method" not in message:
                continue
            params = message["params"]
            seqs.append(params["seq"])
            if message["method"] == "process/output":
                received += len(base64.b64decode(params["chunk"]))
            elif message["method"] == "process/closed":
                break
        assert received == total
        assert seqs == list(range(1, len(seqs) + 1))
