"""``process/write`` is idempotent per ``writeId``: a retried write is accepted, not written again.

A client that reconnects cannot know whether its last writes arrived, so it sends them again
with the same ids; a keystroke must not reach the shell twice. Like the reference, each
process remembers its last ``WINDOW`` accepted ids (oldest forgotten first), and an empty id
is refused (``-32602 writeId must not be empty``).
"""

from __future__ import annotations

import base64
import itertools
from typing import Any

from executor.write_ids import WINDOW, AcceptedWriteIds
from tests.support.client import WsClient, b64
from tests.support.daemon import RunningDaemon

PIPE: dict[str, Any] = {
    "cwd": "file:///tmp",
    "env": {"PATH": "/usr/bin:/bin"},
    "tty": False,
    "pipeStdin": True,
}
#: Prints the first two lines it reads, joined: shows what reached stdin, and how often.
TWO_LINES = ["/bin/sh", "-c", 'read a; read b; echo "$a|$b"']


def _start(client: WsClient, process_id: str, argv: list[str]) -> None:
    client.request("process/start", {**PIPE, "processId": process_id, "argv": argv})


def _write(client: WsClient, process_id: str, data: str, write_id: str) -> str:
    params = {"processId": process_id, "chunk": b64(data), "writeId": write_id}
    status: str = client.request("process/write", params)["status"]
    return status


def _stdout_until_closed(client: WsClient, process_id: str) -> bytes:
    """Everything the process printed, read with process/read (works across connections)."""
    seen, after = b"", 0
    for _ in range(200):
        read = client.request(
            "process/read", {"processId": process_id, "afterSeq": after, "waitMs": 5000}
        )
        seen += b"".join(base64.b64decode(chunk["chunk"]) for chunk in read["chunks"])
        after = read["nextSeq"] - 1
        if read["closed"]:
            return seen
    raise AssertionError(f"{process_id} did not close; output so far {seen!r}")


# --- the window -------------------------------------------------------------------------------


def test_the_window_forgets_the_oldest_id_first() -> None:
    """Bounded: beyond the window the oldest id is forgotten, the newer ones are kept."""
    ids = AcceptedWriteIds(window=3)
    for write_id in ("a", "b", "c", "b", "d"):
        ids.remember(write_id)
    assert len(ids) == 3
    assert "a" not in ids
    assert all(write_id in ids for write_id in ("b", "c", "d"))


def test_ids_cost_the_same_whatever_their_length() -> None:
    """A full window of million-character ids costs what one of short ids does (digests),
    and ids that differ only at the end stay distinct."""
    ids = AcceptedWriteIds(window=8)
    long_id = "\U0001f600" * 1_000_000
    ids.remember(long_id)
    assert long_id in ids
    assert long_id[:-1] + "j" not in ids
    assert {len(key) for key in ids._ids} == {16}


# --- live processes ---------------------------------------------------------------------------


def test_a_repeated_write_id_is_accepted_and_not_written_again(client: WsClient) -> None:
    """The retry of ``w1`` answers ``accepted``; the shell reads ``one`` once, then ``two``."""
    _start(client, "dup", TWO_LINES)
    assert _write(client, "dup", "one\n", "w1") == "accepted"
    assert _write(client, "dup", "one\n", "w1") == "accepted"
    assert _write(client, "dup", "two\n", "w2") == "accepted"
    assert _stdout_until_closed(client, "dup") == b"one|two\n"


def test_a_retry_after_a_reconnect_is_not_written_again(shared_daemon: RunningDaemon) -> None:
    """The use case: write, lose the connection, resume the session, retry the same write."""
    first = shared_daemon.client()
    session_id = first.initialize("test")["sessionId"]
    _start(first, "retry", TWO_LINES)
    assert _write(first, "retry", "first\n", "k-1") == "accepted"
    first.close()
    second = shared_daemon.client()
    try:
        second.initialize("test", resume=session_id)
        assert _write(second, "retry", "first\n", "k-1") == "accepted"  # the retry
        assert _write(second, "retry", "second\n", "k-2") == "accepted"
        assert _stdout_until_closed(second, "retry") == b"first|second\n"
    finally:
        second.close()


def test_a_retry_is_accepted_even_after_stdin_closed(client: WsClient) -> None:
    """An id accepted earlier is still ``accepted`` once the process exited; a new one is not."""
    _start(client, "gone", ["/bin/sh", "-c", "read a; echo got:$a"])
    assert _write(client, "gone", "x\n", "w1") == "accepted"
    assert _stdout_until_closed(client, "gone") == b"got:x\n"
    assert _write(client, "gone", "x\n", "w1") == "accepted"
    assert _write(client, "gone", "y\n", "w2") == "stdinClosed"


def test_an_empty_write_id_is_invalid_params(client: WsClient) -> None:
    """As the reference: ``-32602 writeId must not be empty``, for any process id."""
    _start(client, "empty", ["/bin/cat"])
    try:
        for process_id in ("empty", "no-such-process"):
            answer = client.call(
                "process/write", {"processId": process_id, "chunk": b64("x"), "writeId": ""}
            )
            assert answer["error"] == {"code": -32602, "message": "writeId must not be empty"}
    finally:
        client.request("process/terminate", {"processId": "empty"})


def test_the_window_is_the_last_4096_ids_of_each_process(client: WsClient) -> None:
    """After 4097 writes the first id is forgotten (written again), the last is remembered.

    ``head -c 4098`` prints the first 4098 bytes it reads: 4097 ``x``, then whichever retry
    was written first — ``z`` (the remembered last id, must not be) or ``y`` (the forgotten
    first id, must be).
    """
    assert WINDOW == 4096
    _start(client, "window", ["head", "-c", str(WINDOW + 2)])
    writes = [(f"w{n}", "x") for n in range(WINDOW + 1)]
    writes += [(f"w{WINDOW}", "z"), ("w0", "y")]
    request_ids = []
    for write_id, data in writes:
        request_id = client.next_id()
        request_ids.append(request_id)
        client.send(
            {
                "id": request_id,
                "method": "process/write",
                "params": {"processId": "window", "chunk": b64(data), "writeId": write_id},
            }
        )
    statuses = {client.response(request_id)["result"]["status"] for request_id in request_ids}
    assert statuses == {"accepted"}
    assert _stdout_until_closed(client, "window") == b"x" * (WINDOW + 1) + b"y"


def test_ids_are_per_process(client: WsClient) -> None:
    """The same id on two processes is two writes."""
    for process_id in ("left", "right"):
        _start(client, process_id, TWO_LINES)
    for process_id, n in itertools.product(("left", "right"), (1, 2)):
        assert _write(client, process_id, f"{process_id}{n}\n", f"id-{n}") == "accepted"
    assert _stdout_until_closed(client, "left") == b"left1|left2\n"
    assert _stdout_until_closed(client, "right") == b"right1|right2\n"
