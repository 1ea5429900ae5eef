"""``serve --detached-output``: output written while no client listens, evicted or kept.

A process is started, its client disconnects, and only then (a gate file) does the process
write far more than retention. With ``evict`` (the default, as the reference) it runs to the
end and a returning client sees a seq jump; with ``block`` the daemon stops reading it once
retention is full, the process waits on its write, and a resumed client reads every byte, in
order, with ``process/read``.
"""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path
from typing import Any

import psutil

from tests.support.client import WsClient
from tests.support.daemon import RunningDaemon
from tests.support.processes import eventually, gone, pid_from_first_output

RETAINED = 65536
LINES = 300_000  # `seq 1 300000` writes 2.1 MB: 32 times retention
EXPECTED = b"".join(b"%d\n" % i for i in range(1, LINES + 1))


def _script(gate: Path) -> str:
    # The pid first (the test watches the writer), then wait for the gate, then flood.
    return f"echo $$; while [ ! -e {gate} ]; do sleep 0.01; done; exec seq 1 {LINES}"


def _start_and_detach(daemon: RunningDaemon, gate: Path) -> tuple[str, int]:
    """Start the flood behind the gate, disconnect, open the gate once the daemon detached."""
    with daemon.client() as client:
        session_id = client.initialize()["sessionId"]
        client.request(
            "process/start",
            {
                "processId": "flood",
                "argv": ["/bin/sh", "-c", _script(gate)],
                "cwd": "file:///tmp",
                "env": {"PATH": "/usr/bin:/bin"},
                "tty": False,
            },
        )
        pid = pid_from_first_output(client, "flood")
    # The daemon logs the end of the connection after the session detached.
    closed = re.compile(r"connection \S+ closed")
    assert eventually(lambda: closed.search(daemon.log()) is not None), daemon.log()
    gate.touch()
    return session_id, pid


def _resume(daemon: RunningDaemon, session_id: str) -> WsClient:
    client = daemon.client()
    client.initialize("again", resume=session_id)
    return client


def _read(client: WsClient, after: int, **extra: Any) -> dict[str, Any]:
    params = {"processId": "flood", "afterSeq": after, **extra}
    result: dict[str, Any] = client.request("process/read", params)
    return result


def _data(read: dict[str, Any]) -> bytes:
    return b"".join(base64.b64decode(chunk["chunk"]) for chunk in read["chunks"])


def _blocked_on_write(pid: int) -> bool:
    """The writer sleeps in a pipe write, and its output stopped growing."""
    process = psutil.Process(pid)
    written = process.io_counters().write_chars
    time.sleep(0.05)
    wchan = Path(f"/proc/{pid}/wchan").read_text()
    return (
        process.status() == psutil.STATUS_SLEEPING
        and process.io_counters().write_chars == written
        and ("pipe_write" in wchan or wchan in ("", "0"))
    )


def test_block_keeps_every_byte_while_detached(
    daemon_factory: type[RunningDaemon], tmp_path: Path
) -> None:
    """block: the writer waits while detached; a resumed client gets all 2.1 MB, in order."""
    daemon = daemon_factory(
        ["--detached-output", "block", "--retained-output-bytes", str(RETAINED)]
    )
    session_id, pid = _start_and_detach(daemon, tmp_path / "gate")
    # More than retention was written, and then the writer stopped: it waits on the pipe.
    assert eventually(lambda: psutil.Process(pid).io_counters().write_chars > RETAINED)
    assert eventually(lambda: _blocked_on_write(pid), timeout=10)
    assert psutil.Process(pid).io_counters().write_chars < len(EXPECTED) // 4  # far from done
    with _resume(daemon, session_id) as client:
        first = _read(client, 0, waitMs=0)
        assert first["chunks"][0]["seq"] == 1  # nothing was evicted
        assert first["exited"] is False
        # What it missed comes from process/read, what follows as notifications too.
        received: dict[int, bytes] = {}
        after, deadline = 0, time.monotonic() + 60
        while time.monotonic() < deadline:
            read = _read(client, after, waitMs=5000)
            received.update((c["seq"], base64.b64decode(c["chunk"])) for c in read["chunks"])
            after = read["nextSeq"] - 1
            if read["closed"] and not read["chunks"]:
                break
        events = client.process_events("flood")
    exited_seq = 0
    for event in events:
        if event["method"] == "process/output":
            chunk = base64.b64decode(event["params"]["chunk"])
            assert received.setdefault(event["params"]["seq"], chunk) == chunk
        elif event["method"] == "process/exited":
            exited_seq = event["params"]["seq"]
    seqs = sorted(received)
    assert seqs == [seq for seq in range(1, seqs[-1] + 1) if seq != exited_seq]
    assert b"".join(received[seq] for seq in seqs) == b"%d\n" % pid + EXPECTED


def test_evict_drops_the_oldest_and_reports_a_seq_jump(
    daemon_factory: type[RunningDaemon], tmp_path: Path
) -> None:
    """evict (the default): the writer runs to its end; retention keeps only the newest."""
    daemon = daemon_factory(["--retained-output-bytes", str(RETAINED)])
    session_id, pid = _start_and_detach(daemon, tmp_path / "gate")
    assert gone(pid)
    with _resume(daemon, session_id) as client:
        deadline = time.monotonic() + 10
        read = _read(client, 0)
        while not read["closed"] and time.monotonic() < deadline:
            read = _read(client, 0, waitMs=200)
    assert read["closed"] is True
    assert read["chunks"][0]["seq"] > 2  # the pid line and the first of the flood are gone
    data = _data(read)
    biggest = max(len(base64.b64decode(chunk["chunk"])) for chunk in read["chunks"])
    assert len(data) <= RETAINED + biggest
    assert EXPECTED.endswith(data)


def test_block_never_stops_a_process_whose_client_listens(
    daemon_factory: type[RunningDaemon],
) -> None:
    """block: an attached client that takes notifications only never stalls the process."""
    daemon = daemon_factory(
        ["--detached-output", "block", "--retained-output-bytes", str(RETAINED)]
    )
    with daemon.connect() as client:
        result = client.run(["seq", "1", str(LINES)], timeout=30)
    assert (result.stdout, result.exit_code) == (EXPECTED, 0)
