"""WebSocket listener HTTP routing (protocol.md §1.1), checked with raw HTTP/1.1 requests."""

from __future__ import annotations

import pytest

from tests.support.daemon import RunningDaemon
from tests.support.rawws import RawWebSocket, http_request, upgrade_headers

UPGRADE = upgrade_headers()


@pytest.mark.parametrize(
    ("method", "path", "headers", "status", "extra"),
    [
        ("GET", "/readyz", {}, 200, {"content-length": "0"}),
        ("HEAD", "/readyz", {}, 200, {"content-length": "0"}),
        ("GET", "/readyz?probe=1", {}, 200, {}),
        ("POST", "/readyz", {"Content-Length": "0"}, 405, {"allow": "GET,HEAD"}),
        ("PUT", "/readyz", {"Content-Length": "0"}, 405, {"allow": "GET,HEAD"}),
        ("DELETE", "/readyz", {}, 405, {"allow": "GET,HEAD"}),
        ("GET", "/ws", {}, 404, {}),
        ("GET", "/healthz", {}, 404, {}),
        ("GET", "/ws", UPGRADE, 404, {}),
        ("GET", "/readyz", {"Origin": "http://example.com"}, 403, {}),
        ("GET", "/readyz", {"Origin": "null"}, 403, {}),
        ("GET", "/", {**UPGRADE, "Origin": "http://localhost"}, 403, {}),
        ("GET", "/nowhere", {"Origin": "x"}, 403, {}),
        ("POST", "/readyz", {"Origin": "x", "Content-Length": "0"}, 403, {}),
    ],
    ids=[
        "readyz-get",
        "readyz-head",
        "readyz-query",
        "readyz-post",
        "readyz-put",
        "readyz-delete",
        "other-path",
        "healthz",
        "upgrade-on-other-path",
        "origin-readyz",
        "origin-null",
        "origin-upgrade",
        "origin-unknown-path",
        "origin-wins-over-405",
    ],
)
def test_http_routing(
    shared_daemon: RunningDaemon,
    method: str,
    path: str,
    headers: dict[str, str],
    status: int,
    extra: dict[str, str],
) -> None:
    """Each request gets the reference's status code and headers."""
    answer = http_request(shared_daemon.url, method, path, headers)
    assert answer.status == status
    for name, value in extra.items():
        assert answer.headers.get(name) == value
    if status in (403, 404, 405) or method == "HEAD":
        assert answer.body == b""


def test_get_root_without_upgrade_is_400_with_reference_body(shared_daemon: RunningDaemon) -> None:
    """GET / without upgrade headers answers 400 with the reference's plain-text body."""
    answer = http_request(shared_daemon.url, "GET", "/")
    assert answer.status == 400
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    assert answer.body == b"Connection header did not include 'upgrade'"


def test_upgrade_on_root_switches_protocols(shared_daemon: RunningDaemon) -> None:
    """A valid upgrade on / answers 101 with the right accept key and no subprotocol."""
    with RawWebSocket(shared_daemon.url, headers={"Sec-WebSocket-Protocol": "chat"}) as ws:
        assert ws.status == 101
        assert "sec-websocket-accept" in ws.headers
        assert "sec-websocket-protocol" not in ws.headers
        answer = ws.request({"id": 1, "method": "initialize", "params": {"clientName": "raw"}})
        assert "sessionId" in answer["result"]


def test_compression_is_never_negotiated(shared_daemon: RunningDaemon) -> None:
    """An offered permessage-deflate extension is declined (no extension header in 101)."""
    offer = {"Sec-WebSocket-Extensions": "permessage-deflate; client_max_window_bits"}
    with RawWebSocket(shared_daemon.url, headers=offer) as ws:
        assert ws.status == 101
        assert "sec-websocket-extensions" not in ws.headers


def test_readyz_still_answers_while_sessions_run(shared_daemon: RunningDaemon) -> None:
    """/readyz answers 200 while a WebSocket session is open on the same listener."""
    with shared_daemon.session():
        assert http_request(shared_daemon.url, "GET", "/readyz").status == 200


def test_garbage_request_line_is_400(shared_daemon: RunningDaemon) -> None:
    """A request that is not HTTP/1.1 gets 400 and the connection ends."""
    answer = http_request(shared_daemon.url, "GET", "/ HTTP/1.1 extra")
    assert answer.status == 400
