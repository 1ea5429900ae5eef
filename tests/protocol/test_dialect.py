"""The JSON-RPC dialect on a live connection (protocol.md §2, §3.3): codes, texts, ids, order."""

from __future__ import annotations

import json

import pytest

from tests.support.client import WsClient
from tests.support.daemon import RunningDaemon
from tests.support.rawws import RawWebSocket

WS_PREFIX = "failed to parse websocket JSON-RPC message from exec-server websocket "


def _prefix(client: WsClient) -> str:
    host, port = client.ws.local_address[:2]
    return f"{WS_PREFIX}{host}:{port}: "


@pytest.mark.parametrize(
    "raw",
    [
        "{",
        "42",
        '"x"',
        "null",
        "[]",
        '[{"id":1,"method":"environment/status"}]',
        '{"id":null,"method":"initialize","params":{"clientName":"x"}}',
        '{"id":1.5,"method":"environment/status"}',
        '{"id":false,"method":"environment/status"}',
        '{"id":{"a":1},"method":"environment/status"}',
        '{"id":1,"method":["environment/status"]}',
        '{"id":1,"method":"environment/status","trace":7}',
        "{}",
    ],
    ids=[
        "syntax",
        "number",
        "string",
        "null",
        "empty-batch",
        "batch",
        "null-id",
        "float-id",
        "bool-id",
        "object-id",
        "array-method",
        "bad-trace",
        "empty-object",
    ],
)
def test_malformed_message_gets_id_minus_one_and_connection_stays(
    shared_daemon: RunningDaemon, raw: str
) -> None:
    """A malformed message is answered -32600 with id -1 and the peer-address prefix."""
    with shared_daemon.session() as client:
        client.send_raw(raw)
        error = client.out_of_band()
        assert set(error) == {"error", "id"}
        assert error["id"] == -1
        assert error["error"]["code"] == -32600
        assert error["error"]["message"].startswith(_prefix(client))
        assert len(error["error"]["message"]) > len(_prefix(client))
        assert client.request("environment/status") == {"status": "ready"}


def test_batch_detail_text(shared_daemon: RunningDaemon) -> None:
    """A batch is refused with the reference's detail text."""
    with shared_daemon.client() as client:
        client.send_raw('[{"id":1,"method":"environment/status"}]')
        message = client.out_of_band()["error"]["message"]
        assert message == _prefix(client) + "expected a JSON-RPC object"


@pytest.mark.parametrize("initialized", [False, True], ids=["before-handshake", "after-handshake"])
def test_unknown_method_text(shared_daemon: RunningDaemon, initialized: bool) -> None:
    """Unrouted methods get -32601 with the reference's text in every handshake state."""
    with shared_daemon.client() as client:
        if initialized:
            client.initialize()
        for method in ("process/kill", "fs/rename", "ping", "shutdown", "session/list"):
            response = client.call(method, {})
            assert response["error"] == {
                "code": -32601,
                "message": f"exec-server stub does not implement `{method}` yet",
            }


@pytest.mark.parametrize(
    ("method", "params", "message"),
    [
        ("process/read", {}, "missing field `processId`"),
        ("process/read", None, "invalid type: null, expected struct ReadParams"),
        ("process/start", {"processId": 1}, "invalid type: integer `1`, expected a string"),
        ("environment/info", {"x": 1}, "invalid type: map, expected unit"),
        ("environment/status", [1], "invalid type: sequence, expected unit"),
        ("process/signal", {"processId": "p", "signal": "terminate"}, "unknown variant"),
    ],
    ids=["missing-field", "null-struct", "wrong-type", "unit-map", "unit-sequence", "variant"],
)
def test_params_are_decoded_before_the_handshake_gate(
    shared_daemon: RunningDaemon, method: str, params: object, message: str
) -> None:
    """Before initialize, undecodable params get -32602, not the handshake's -32600."""
    with shared_daemon.client() as client:
        error = client.call(method, params)["error"]
        assert error["code"] == -32602
        assert message in error["message"]


def test_initialize_without_params_is_invalid_params(shared_daemon: RunningDaemon) -> None:
    """initialize without params fails like serde: null is not the struct."""
    with shared_daemon.client() as client:
        error = client.call("initialize", omit_params=True)["error"]
        assert error == {
            "code": -32602,
            "message": "invalid type: null, expected struct InitializeParams",
        }
        assert "sessionId" in client.request("initialize", {"clientName": ""})


@pytest.mark.parametrize(
    "params",
    [None, {}, "omit"],
    ids=["null", "empty-object", "absent"],
)
def test_unit_methods_accept_absent_null_or_empty(
    client: WsClient, params: dict[str, object] | str | None
) -> None:
    """environment/status takes params absent, null or {}."""
    if params == "omit":
        response = client.call("environment/status", omit_params=True)
    else:
        response = client.call("environment/status", params)
    assert response == {"id": response["id"], "result": {"status": "ready"}}


@pytest.mark.parametrize(
    "request_id",
    ["abc", "", 0, -7, 2**63 - 1, -(2**63)],
    ids=["string", "empty-string", "zero", "negative", "i64-max", "i64-min"],
)
def test_ids_are_echoed_with_their_type(client: WsClient, request_id: int | str) -> None:
    """String and 64-bit integer ids come back exactly."""
    client.send({"id": request_id, "method": "environment/status"})
    assert client.response(request_id) == {"id": request_id, "result": {"status": "ready"}}


def test_version_marker_ignored_and_never_sent(shared_daemon: RunningDaemon) -> None:
    """A ``jsonrpc`` member of any value is ignored, and no answer carries one."""
    with RawWebSocket(shared_daemon.url) as ws:
        ws.send_text(
            json.dumps(
                {"jsonrpc": "1.0", "id": 1, "method": "initialize", "params": {"clientName": "x"}}
            )
        )
        _opcode, payload = ws.recv_frame()
        assert b"jsonrpc" not in payload
        ws.send_json({"jsonrpc": "2.0", "method": "initialized"})
        ws.send_json({"jsonrpc": 3, "id": 2, "method": "environment/status", "trace": {}})
        _opcode, payload = ws.recv_frame()
        assert payload == b'{"id":2,"result":{"status":"ready"}}'


def test_unknown_notification_is_answered_and_connection_kept(client: WsClient) -> None:
    """Ours (deliberate difference): an unknown notification gets an id -1 error, link stays."""
    client.notify("process/kill", {"processId": "x"})
    error = client.out_of_band()
    assert error["id"] == -1
    assert error["error"]["code"] == -32601
    assert "process/kill" in error["error"]["message"]
    assert client.request("environment/status") == {"status": "ready"}


@pytest.mark.parametrize(
    "message",
    [{"id": 1, "result": {}}, {"id": "x", "error": {"code": 1, "message": "no"}}],
    ids=["result", "error"],
)
def test_client_response_is_answered_and_connection_kept(
    client: WsClient, message: dict[str, object]
) -> None:
    """Ours (deliberate difference): a response from the client gets an id -1 error."""
    client.send(message)
    error = client.out_of_band()
    assert error["id"] == -1
    assert error["error"]["code"] == -32600
    assert client.request("environment/status") == {"status": "ready"}


def test_initialized_before_initialize_is_refused_and_handshake_still_works(
    shared_daemon: RunningDaemon,
) -> None:
    """``initialized`` first is an id -1 error and does not open the gate; the link stays."""
    with shared_daemon.client() as client:
        client.notify("initialized", {})
        assert client.out_of_band()["error"]["code"] == -32600
        gated = client.call("environment/status")["error"]
        assert gated["message"] == (
            "client must call initialize before using environment status methods"
        )
        client.initialize()
        assert client.request("environment/status") == {"status": "ready"}
