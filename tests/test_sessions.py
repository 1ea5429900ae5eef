"""Sessions over the wire (protocol.md §4): detach on disconnect, resume, expiry, races."""

from __future__ import annotations

import base64
import time

import psutil
import pytest

from tests.support.client import RpcError, WsClient, output_of
from tests.support.daemon import RunningDaemon
from tests.support.processes import gone, pid_from_first_output


def _start(client: WsClient, process_id: str, script: str, **extra: object) -> None:
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


def _resume(daemon: RunningDaemon, session_id: str, timeout: float = 5.0) -> WsClient:
    """Resume ``session_id``, retrying while the daemon still sees the old connection."""
    deadline = time.monotonic() + timeout
    while True:
        client = daemon.client()
        response = client.call("initialize", {"clientName": "again", "resumeSessionId": session_id})
        if "result" in response:
            assert response["result"]["sessionId"] == session_id
            client.notify("initialized")
            return client
        client.close()
        assert response["error"]["code"] == -32010, response
        assert time.monotonic() < deadline, "the old connection was never detached"
        time.sleep(0.01)


def test_disconnect_keeps_processes_and_resume_recovers_output(
    shared_daemon: RunningDaemon,
) -> None:
    """Output produced while detached is readable after resume; the process kept running."""
    script = "echo $$; i=0; while [ $i -lt 40 ]; do echo line$i; i=$((i+1)); sleep 0.01; done"
    with shared_daemon.client() as probe:
        session_id = probe.initialize()["sessionId"]
        _start(probe, "ticker", script)
        pid = pid_from_first_output(probe, "ticker")
    assert psutil.pid_exists(pid)
    with _resume(shared_daemon, session_id) as again:
        read = again.request("process/read", {"processId": "ticker", "waitMs": 0})
        deadline = time.monotonic() + 10
        while not read["closed"] and time.monotonic() < deadline:
            read = again.request(
                "process/read", {"processId": "ticker", "afterSeq": 0, "waitMs": 1000}
            )
        read = again.request("process/read", {"processId": "ticker", "afterSeq": 0})
        text = b"".join(base64.b64decode(c["chunk"]) for c in read["chunks"]).decode()
        assert text.split() == [str(pid)] + [f"line{i}" for i in range(40)]
        assert read["exitCode"] == 0


def test_notifications_after_resume_go_to_the_new_connection(shared_daemon: RunningDaemon) -> None:
    """After resume, new events of an old process are pushed to the new connection."""
    with shared_daemon.client() as a:
        session_id = a.initialize()["sessionId"]
        _start(a, "waiter", "read line; echo got:$line", pipeStdin=True)
    with _resume(shared_daemon, session_id) as b:
        status = b.request(
            "process/write", {"processId": "waiter", "chunk": "aGkK", "writeId": "w"}
        )
        assert status == {"status": "accepted"}
        events = b.process_events("waiter")
        assert output_of(events) == b"got:hi\n"
        assert [e["method"] for e in events][-2:] == ["process/exited", "process/closed"]


def test_resume_while_attached_is_refused_and_owner_unaffected(
    shared_daemon: RunningDaemon,
) -> None:
    """Resuming an attached session fails with -32010; the attached connection keeps working."""
    with shared_daemon.client() as owner:
        session_id = owner.initialize()["sessionId"]
        with shared_daemon.client() as thief:
            response = thief.call("initialize", {"clientName": "t", "resumeSessionId": session_id})
            assert response["error"] == {
                "code": -32010,
                "message": f"session {session_id} is already attached to another connection",
            }
            assert "sessionId" in thief.initialize()  # the failure did not use up initialize
        assert owner.request("environment/status") == {"status": "ready"}


def test_session_expires_after_ttl_and_kills_its_trees(daemon_factory: type[RunningDaemon]) -> None:
    """A detached session not resumed within --session-ttl is gone and its processes killed."""
    daemon = daemon_factory(["--session-ttl", "0.5", "--stop-grace", "0.5"])
    with daemon.client() as client:
        session_id = client.initialize()["sessionId"]
        _start(client, "long", "echo $$; (setsid sleep 1001 &); exec sleep 1001")
        pid = pid_from_first_output(client, "long")
        escapee_seen = False
        for _ in range(100):
            escapees = [
                p
                for p in psutil.process_iter(["cmdline"])
                if p.info["cmdline"] == ["sleep", "1001"]
            ]
            if len(escapees) >= 2:
                escapee_seen = True
                break
            time.sleep(0.02)
        assert escapee_seen
    assert gone(pid)
    for process in escapees:
        assert gone(process.pid)
    with daemon.client() as late:
        response = late.call("initialize", {"clientName": "late", "resumeSessionId": session_id})
        assert response["error"] == {"code": -32600, "message": f"unknown session id {session_id}"}


class Witness:
    """A second session that, once detached, expires by the same TTL: when its process is
    gone, every expiry timer started before its detach has run out. Tests wait for that
    instead of sleeping "long enough"."""

    def __init__(self, daemon: RunningDaemon) -> None:
        self.client = daemon.client()
        self.client.initialize("witness")
        _start(self.client, "w", "echo $$; exec sleep 1002")
        self.pid = pid_from_first_output(self.client, "w")

    def detach_and_outlive(self) -> None:
        """Detach now; return once the witness has expired (its process was killed)."""
        self.client.close()
        assert gone(self.pid, timeout=30), "the witness session never expired"


def test_resume_within_ttl_succeeds(daemon_factory: type[RunningDaemon]) -> None:
    """A session resumed before its TTL keeps its processes and its id, past that TTL."""
    daemon = daemon_factory(["--session-ttl", "2"])
    with daemon.client() as client:
        session_id = client.initialize()["sessionId"]
        _start(client, "s", "exec sleep 30")
    witness = Witness(daemon)
    with _resume(daemon, session_id) as again:  # after the detach, so after its timer began
        witness.detach_and_outlive()  # past the original TTL: the resume cancelled it
        assert again.request("environment/status") == {"status": "ready"}
        assert again.request("process/terminate", {"processId": "s"}) == {"running": True}
        read = again.request("process/read", {"processId": "s", "waitMs": 2000})
        assert read["exitCode"] == 137


def test_late_close_never_detaches_newer_attachment(daemon_factory: type[RunningDaemon]) -> None:
    """Racing a close against a resume many times never leaves the new attachment detached."""
    daemon = daemon_factory(["--session-ttl", "0.3"])
    with daemon.client() as first:
        session_id = first.initialize()["sessionId"]
        _start(first, "keep", "exec sleep 30")
    for _ in range(15):
        client = _resume(daemon, session_id)
        client.close()
    final = _resume(daemon, session_id)
    with final:
        # Each resume above succeeded only once the daemon had handled the close before it,
        # so any stray expiry was scheduled before the witness detaches: it has fired by the
        # time the witness has expired, and would have ended the session.
        Witness(daemon).detach_and_outlive()
        assert final.request("process/read", {"processId": "keep"})["exited"] is False
        assert final.request("process/terminate", {"processId": "keep"}) == {"running": True}


def test_process_ids_are_scoped_per_session(shared_daemon: RunningDaemon) -> None:
    """Two sessions may both run a process called ``same``; reads see their own."""
    with shared_daemon.session() as a, shared_daemon.session() as b:
        _, events_a = a.run("same", ["/bin/echo", "from-a"])
        _, events_b = b.run("same", ["/bin/echo", "from-b"])
        assert output_of(events_a) == b"from-a\n"
        assert output_of(events_b) == b"from-b\n"
        a.run("only-a", ["/bin/true"])
        with pytest.raises(RpcError, match=r"^-32600: unknown process id only-a$"):
            b.request("process/read", {"processId": "only-a"})
