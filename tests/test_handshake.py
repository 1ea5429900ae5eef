"""Handshake (protocol.md §3): initialize once, then initialized, then everything else."""

from __future__ import annotations

import uuid

from tests.support.daemon import RunningDaemon


def test_initialize_returns_session_and_environment(shared_daemon: RunningDaemon) -> None:
    """initialize answers a fresh UUID4 session id and the environment info."""
    with shared_daemon.client() as client:
        result = client.request("initialize", {"clientName": "probe"})
        assert uuid.UUID(result["sessionId"]).version == 4
        assert result["environmentInfo"]["platformOs"] == "linux"


def test_requests_before_initialize_are_refused(shared_daemon: RunningDaemon) -> None:
    """Every family is gated with the reference's message before initialize."""
    with shared_daemon.client() as client:
        response = client.call("process/read", {"processId": "x"})
        assert response["error"] == {"code": -32600, "message": "client must call initialize before using exec methods"}
