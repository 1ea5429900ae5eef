"""Process events (protocol.md §5.6, §5.10): one seq counter, exit vs close, codes, order."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.support.client import WsClient, output_of


def _kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["method"].split("/")[1] for e in events]


def test_seq_is_one_counter_from_one(client: WsClient) -> None:
    """output, exited and closed share one counter from 1, pushed in seq order."""
    _result, events = client.run("seq", ["/bin/sh", "-c", "echo out; echo err 1>&2; exit 3"])
    assert [e["params"]["seq"] for e in events] == [1, 2, 3, 4]
    assert _kinds(events) == ["output", "output", "exited", "closed"]
    assert events[2]["params"] == {
        "processId": "seq",
        "seq": 3,
        "exitCode": 3,
        "sandboxDenied": False,
    }
    assert events[3]["params"] == {"processId": "seq", "seq": 4}
    assert output_of(events, "stdout") == b"out\n"
    assert output_of(events, "stderr") == b"err\n"


def test_exit_is_reported_before_descendants_close_the_pipes(client: WsClient) -> None:
    """A backgrounded child keeps the pipe open: output, exited, output(late), closed."""
    _result, events = client.run(
        "late", ["/bin/sh", "-c", "(sleep 1; echo late) & echo parent-done"]
    )
    assert _kinds(events) == ["output", "exited", "output", "closed"]
    assert [e["params"]["seq"] for e in events] == [1, 2, 3, 4]
    assert base64.b64decode(events[0]["params"]["chunk"]) == b"parent-done\n"
    assert base64.b64decode(events[2]["params"]["chunk"]) == b"late\n"
    read = client.request("process/read", {"processId": "late"})
    assert [c["seq"] for c in read["chunks"]] == [1, 3]
    assert read["nextSeq"] == 5
    assert read["exited"] is True
    assert read["closed"] is True


def test_closed_exactly_once_and_nothing_after(client: WsClient) -> None:
    """process/closed is emitted once and is the last event of a process."""
    _result, events = client.run("once", ["/bin/sh", "-c", "echo a; echo b 1>&2"])
    assert _kinds(events).count("closed") == 1
    client.request("environment/status")
    extra = [n for n in client.inbox.notifications if n["params"].get("processId") == "once"]
    assert extra == []


def test_interleaved_streams_keep_per_stream_order(client: WsClient) -> None:
    """stdout and stderr chunks are numbered in one sequence; each stream keeps its own order."""
    script = "for i in 1 2 3 4 5 6 7 8; do echo o$i; echo e$i 1>&2; sleep 0.01; done"
    _result, events = client.run("mix", ["/bin/sh", "-c", script])
    seqs = [e["params"]["seq"] for e in events]
    assert seqs == list(range(1, len(events) + 1))
    assert output_of(events, "stdout").split() == [f"o{i}".encode() for i in range(1, 9)]
    assert output_of(events, "stderr").split() == [f"e{i}".encode() for i in range(1, 9)]


@pytest.mark.parametrize(
    ("script", "code"),
    [
        ("exit 0", 0),
        ("exit 7", 7),
        ("exit 255", 255),
        ("kill -KILL $$", 137),
        ("kill -TERM $$", 143),
        ("kill -INT $$", 130),
        ("kill -SEGV $$", 139),
    ],
    ids=["zero", "seven", "255", "sigkill", "sigterm", "sigint", "sigsegv"],
)
def test_exit_codes_and_signal_deaths(client: WsClient, script: str, code: int) -> None:
    """Exit codes are reported as is; signal deaths as 128 + signal number."""
    _result, events = client.run(f"code-{code}", ["/bin/sh", "-c", script])
    assert events[-2]["params"]["exitCode"] == code
    read = client.request("process/read", {"processId": f"code-{code}"})
    assert read["exitCode"] == code
    assert read["failure"] is None
    assert read["sandboxDenied"] is False


def test_large_output_arrives_complete_and_in_order(client: WsClient) -> None:
    """Several MiB through notifications arrive byte for byte, chunk seqs strictly increasing."""
    _result, events = client.run(
        "big", ["/bin/sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' 'z'"], timeout=30
    )
    data = output_of(events)
    assert len(data) == 3_000_000
    assert set(data) == {ord("z")}
    seqs = [e["params"]["seq"] for e in events]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs)


def test_notifications_never_precede_the_start_response(client: WsClient) -> None:
    """A fast process's events arrive after its process/start response."""
    request_id = client.next_id()
    client.send(
        {
            "id": request_id,
            "method": "process/start",
            "params": {
                "processId": "fast",
                "argv": ["/bin/echo", "x"],
                "cwd": "file:///tmp",
                "env": {},
                "tty": False,
            },
        }
    )
    client.response(request_id)
    events = client.process_events("fast")
    assert _kinds(events) == ["output", "exited", "closed"]
    arrivals = client.inbox.arrivals
    answered = next(i for i, m in enumerate(arrivals) if m.get("id") == request_id)
    first_event = next(
        i for i, m in enumerate(arrivals) if m.get("params", {}).get("processId") == "fast"
    )
    assert answered < first_event
