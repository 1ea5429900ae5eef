"""process/write, process/signal, process/terminate (protocol.md §5.7-§5.9), and whole trees."""

from __future__ import annotations

import base64
import itertools
import os
import time
from typing import Any

import psutil
import pytest

from executor.spawn.spawner import native_slots
from tests.support.client import WsClient, b64, output_of
from tests.support.daemon import RunningDaemon
from tests.support.enforcement import skip_unless

#: Each write has its own id: a repeated id is a retry, which is not written again.
_WRITE_IDS = itertools.count()

BASE: dict[str, Any] = {"cwd": "file:///tmp", "env": {"PATH": "/usr/bin:/bin"}, "tty": False}


def _start(client: WsClient, process_id: str, argv: list[str], **extra: Any) -> None:
    client.request("process/start", {**BASE, "processId": process_id, "argv": argv, **extra})


def _write(client: WsClient, process_id: str, data: bytes | str) -> str:
    result = client.request(
        "process/write",
        {"processId": process_id, "chunk": b64(data), "writeId": f"w{next(_WRITE_IDS)}"},
    )
    status: str = result["status"]
    return status


def _sleepers(tag: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if process.info["cmdline"] == ["sleep", tag] and process.status() != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


def _wait_for(predicate: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


# --- write ------------------------------------------------------------------------------------


def test_piped_stdin_round_trip(client: WsClient) -> None:
    """Bytes written to a pipeStdin process reach its stdin in order."""
    _start(client, "cat", ["/bin/cat"], pipeStdin=True)
    assert _write(client, "cat", "hello ") == "accepted"
    assert _write(client, "cat", b"\x00\xffworld\n") == "accepted"
    note = client.notification("process/output")
    received = base64.b64decode(note["params"]["chunk"])
    while received != b"hello \x00\xffworld\n":
        received += base64.b64decode(client.notification("process/output")["params"]["chunk"])
    client.request("process/terminate", {"processId": "cat"})


def test_large_write_is_delivered_completely(client: WsClient) -> None:
    """A write far larger than a pipe buffer is delivered whole (non-blocking flushing)."""
    _start(client, "wc", ["/bin/sh", "-c", "head -c 2000000 | wc -c"], pipeStdin=True)
    assert _write(client, "wc", b"q" * 2_000_000) == "accepted"
    events = client.process_events("wc", timeout=30)
    assert output_of(events).strip() == b"2000000"


def test_write_statuses(client: WsClient) -> None:
    """unknownProcess, stdinClosed without pipeStdin, stdinClosed after exit."""
    assert _write(client, "nobody", "x") == "unknownProcess"
    _start(client, "nostdin", ["/bin/sleep", "5"])
    assert _write(client, "nostdin", "x") == "stdinClosed"
    client.request("process/terminate", {"processId": "nostdin"})
    client.run("exited", ["/bin/true"], pipeStdin=True)
    assert _write(client, "exited", "x") == "stdinClosed"


def test_write_to_process_that_closed_stdin(client: WsClient) -> None:
    """Once the child closed its stdin, the next write is ``accepted`` (the daemon learns of
    the closed pipe only by writing: the bytes are dropped) and every later one answers
    ``stdinClosed``; the process itself is unaffected."""
    argv = ["/bin/sh", "-c", "exec 0<&-; echo closed; exec sleep 5"]
    _start(client, "closer", argv, pipeStdin=True)
    said = b""
    while said != b"closed\n":  # the pipe has no reader left from here on
        said += base64.b64decode(client.notification("process/output")["params"]["chunk"])
    assert _write(client, "closer", "a" * 100_000) == "accepted"
    assert _write(client, "closer", "b") == "stdinClosed"
    assert client.request("process/terminate", {"processId": "closer"}) == {"running": True}


@pytest.mark.parametrize(
    "chunk",
    ["!!", "aGk", "a", "aGk=x", 5, None],
    ids=["symbols", "unpadded", "short", "trailing", "int", "null"],
)
def test_invalid_chunk_is_invalid_params(client: WsClient, chunk: object) -> None:
    """A chunk that is not standard padded base64 is -32602."""
    response = client.call("process/write", {"processId": "x", "chunk": chunk, "writeId": "w"})
    assert response["error"]["code"] == -32602


# --- signal -----------------------------------------------------------------------------------


def test_interrupt_ends_a_plain_shell_loop_with_130(client: WsClient) -> None:
    """interrupt sends SIGINT to the process group: a trap-less sh loop exits 130."""
    _start(client, "loop", ["/bin/sh", "-c", "echo ready; while :; do sleep 0.05; done"])
    client.notification("process/output")
    assert client.request("process/signal", {"processId": "loop", "signal": "interrupt"}) == {}
    events = client.process_events("loop")
    assert events[-2]["params"]["exitCode"] == 130


def test_interrupt_spares_a_job_that_ignores_sigint(client: WsClient) -> None:
    """A background job ignoring SIGINT survives the interrupt (as on the reference)."""
    script = "trap '' INT; sleep 1011 & echo ready; wait"
    _start(client, "tough", ["/bin/sh", "-c", script])
    client.notification("process/output")
    client.request("process/signal", {"processId": "tough", "signal": "interrupt"})
    time.sleep(0.3)
    assert _sleepers("1011")
    assert client.request("process/terminate", {"processId": "tough"}) == {"running": True}
    assert _wait_for(lambda: not _sleepers("1011"))


def test_signal_unknown_name_and_unknown_process(client: WsClient) -> None:
    """Only interrupt exists (-32602 unknown variant otherwise); unknown ids answer {}."""
    response = client.call("process/signal", {"processId": "x", "signal": "terminate"})
    assert response["error"]["code"] == -32602
    assert "unknown variant `terminate`, expected `interrupt`" in response["error"]["message"]
    assert client.request("process/signal", {"processId": "nobody", "signal": "interrupt"}) == {}


def test_signal_after_exit_is_harmless(client: WsClient) -> None:
    """Interrupting an exited process answers {} and changes nothing."""
    client.run("done", ["/bin/true"])
    assert client.request("process/signal", {"processId": "done", "signal": "interrupt"}) == {}
    assert client.request("process/read", {"processId": "done"})["exitCode"] == 0


# --- terminate --------------------------------------------------------------------------------


def test_terminate_kills_and_reports(client: WsClient) -> None:
    """terminate: running true, exit 137 even when TERM is trapped, then running false."""
    _start(client, "k", ["/bin/sh", "-c", "trap '' TERM; echo up; sleep 30"])
    client.notification("process/output")
    assert client.request("process/terminate", {"processId": "k"}) == {"running": True}
    events = client.process_events("k")
    assert [e["method"] for e in events][-2:] == ["process/exited", "process/closed"]
    assert events[-2]["params"]["exitCode"] == 137
    assert client.request("process/terminate", {"processId": "k"}) == {"running": False}
    assert client.request("process/terminate", {"processId": "never"}) == {"running": False}


def test_terminate_kills_the_whole_tree_including_setsid_escapees(client: WsClient) -> None:
    """Group members, a setsid child and a double-forked setsid child all die; none survives."""
    script = "sleep 1012 & setsid sleep 1013 & (setsid sleep 1014 &); echo up; sleep 1015"
    _start(client, "tree", ["/bin/sh", "-c", script])
    client.notification("process/output")
    tags = ["1012", "1013", "1014", "1015"]
    assert _wait_for(lambda: all(_sleepers(tag) for tag in tags))
    command = psutil.Process(_sleepers("1015")[0].ppid())
    supervisor = command.ppid()
    escapee = _sleepers("1014")[0]
    # The double-forked escapee left the command's session and was reparented to the
    # supervisor (a child subreaper), where the daemon can still find it.
    assert os.getsid(escapee.pid) != os.getsid(command.pid)
    assert escapee.ppid() == supervisor
    assert client.request("process/terminate", {"processId": "tree"}) == {"running": True}
    assert _wait_for(lambda: not any(_sleepers(tag) for tag in tags))
    events = client.process_events("tree")
    assert events[-1]["method"] == "process/closed"


def test_terminating_a_closed_process_spares_the_next_one_on_its_supervisor(
    daemon_factory: type[RunningDaemon],
) -> None:
    """Plain commands one after another share a kept supervisor (launcher.c); terminating the
    closed one, whose tree was that supervisor's descendants, must not reach the next. (A
    daemon of its own: no other command may take the supervisor in between.)"""
    skip_unless(native_slots() > 0, "the native launcher (kept supervisors) is not built")
    with daemon_factory().session() as client:
        _start(client, "earlier", ["/bin/sh", "-c", "echo $PPID"])
        supervisor = int(output_of(client.process_events("earlier")))
        _start(client, "next", ["/bin/sh", "-c", "exec sleep 1017"])
        assert _wait_for(lambda: bool(_sleepers("1017")))
        assert [p.ppid() for p in _sleepers("1017")] == [supervisor]
        assert client.request("process/terminate", {"processId": "earlier"}) == {"running": False}
        time.sleep(0.1)
        assert [p.ppid() for p in _sleepers("1017")] == [supervisor]
        assert client.request("process/terminate", {"processId": "next"}) == {"running": True}
        assert client.process_events("next")[-1]["method"] == "process/closed"
        assert _wait_for(lambda: not _sleepers("1017"))


def test_terminate_after_exit_still_reaps_leftover_descendants(client: WsClient) -> None:
    """A process that exited but left a descendant holding the pipe can still be terminated."""
    _start(client, "left", ["/bin/sh", "-c", "sleep 1016 & echo up"])
    client.notification("process/exited", where=lambda n: n["params"]["processId"] == "left")
    # The shell may exit before its forked child has exec'd sleep: wait for it to appear.
    assert _wait_for(lambda: bool(_sleepers("1016")))
    assert client.request("process/terminate", {"processId": "left"}) == {"running": False}
    assert _wait_for(lambda: not _sleepers("1016"))
    assert client.process_events("left")[-1]["method"] == "process/closed"
