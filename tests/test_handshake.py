"""Handshake (protocol.md §3): initialize once, then initialized, then everything else."""

from __future__ import annotations

import uuid

import pytest

from tests.support.client import WsClient
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
        assert response["error"] == {
            "code": -32600,
            "message": "client must call initialize before using exec methods",
        }


FAMILIES = [
    ("environment/info", None, "environment info"),
    ("environment/status", None, "environment status"),
    (
        "process/start",
        {"processId": "p", "argv": ["true"], "cwd": "file:///tmp", "env": {}, "tty": False},
        "exec",
    ),
    ("process/read", {"processId": "p"}, "exec"),
    ("process/write", {"processId": "p", "chunk": "", "writeId": "w"}, "exec"),
    ("process/signal", {"processId": "p", "signal": "interrupt"}, "exec"),
    ("process/terminate", {"processId": "p"}, "exec"),
]
FAMILY_IDS = [method for method, _params, _family in FAMILIES]


@pytest.mark.parametrize(("method", "params", "family"), FAMILIES, ids=FAMILY_IDS)
def test_gate_before_initialize(
    shared_daemon: RunningDaemon, method: str, params: object, family: str
) -> None:
    """Before initialize every family is refused with the reference's exact text."""
    with shared_daemon.client() as client:
        response = client.call(method, params)
        assert response["error"] == {
            "code": -32600,
            "message": f"client must call initialize before using {family} methods",
        }


@pytest.mark.parametrize(("method", "params", "family"), FAMILIES, ids=FAMILY_IDS)
def test_gate_before_initialized(
    shared_daemon: RunningDaemon, method: str, params: object, family: str
) -> None:
    """After initialize but before initialized, the second gate message applies."""
    with shared_daemon.client() as client:
        client.request("initialize", {"clientName": "half"})
        response = client.call(method, params)
        assert response["error"] == {
            "code": -32600,
            "message": f"client must send initialized before using {family} methods",
        }
        client.notify("initialized")
        assert (
            client.call(method, params).get("error", {}).get("message", "")
            != response["error"]["message"]
        )


def test_initialize_only_once(client: WsClient) -> None:
    """A second initialize on a connection is refused; the session is unchanged."""
    response = client.call("initialize", {"clientName": "again"})
    assert response["error"] == {
        "code": -32600,
        "message": "initialize may only be sent once per connection",
    }
    assert client.request("environment/status") == {"status": "ready"}


def test_initialize_twice_before_initialized(shared_daemon: RunningDaemon) -> None:
    """initialize is refused a second time even before initialized was sent."""
    with shared_daemon.client() as client:
        client.request("initialize", {"clientName": "a"})
        assert client.call("initialize", {"clientName": "b"})["error"]["code"] == -32600


def test_initialized_twice_is_harmless(client: WsClient) -> None:
    """A second initialized changes nothing and is not answered."""
    client.notify("initialized", None)
    client.notify("initialized")
    assert client.request("environment/status") == {"status": "ready"}
    assert client.inbox.out_of_band == []


def test_failed_initialize_can_be_retried(shared_daemon: RunningDaemon) -> None:
    """A failed initialize (unknown resume id) does not use up the one allowed initialize."""
    with shared_daemon.client() as client:
        bogus = str(uuid.uuid4())
        response = client.call("initialize", {"clientName": "x", "resumeSessionId": bogus})
        assert response["error"] == {"code": -32600, "message": f"unknown session id {bogus}"}
        gated = client.call("environment/status")["error"]["message"]
        assert gated == "client must call initialize before using environment status methods"
        result = client.initialize()
        assert uuid.UUID(result["sessionId"]).version == 4
        assert client.request("environment/status") == {"status": "ready"}


def test_each_connection_gets_a_distinct_session(shared_daemon: RunningDaemon) -> None:
    """Two connections initializing without resume get two different UUID4 sessions."""
    with shared_daemon.client() as first, shared_daemon.client() as second:
        a = first.initialize()["sessionId"]
        b = second.initialize()["sessionId"]
        assert a != b
        assert uuid.UUID(b).version == 4


def test_initialize_embeds_environment_info(client: WsClient, shared_daemon: RunningDaemon) -> None:
    """The environmentInfo of initialize is the same object environment/info returns."""
    with shared_daemon.client() as other:
        embedded = other.initialize()["environmentInfo"]
    assert client.request("environment/info") == embedded
