"""http/request deadlines and redirects (follow up to ten, or stop)."""

from __future__ import annotations

import base64
import json
import time

import pytest

from tests.http.helpers import body, request
from tests.http.servers import HttpServer
from tests.support.client import RpcError, WsClient


def test_deadline_before_headers(client: WsClient, server: HttpServer) -> None:
    """A server that stalls past timeoutMs fails the request at the deadline."""
    url = server.url("/stall/3")
    started = time.monotonic()
    with pytest.raises(RpcError) as error:
        request(client, url, timeoutMs=300)
    assert time.monotonic() - started < 2
    assert error.value.code == -32603
    assert error.value.message == f"http/request failed: error sending request for url ({url})"


def test_zero_timeout_fails_at_once(client: WsClient, server: HttpServer) -> None:
    """timeoutMs 0 is answered as the reference does, without contacting the server."""
    with pytest.raises(RpcError) as error:
        request(client, server.url("/echo"), timeoutMs=0)
    assert error.value.message == "http/request failed: route-aware request timed out"
    assert server.recorder.requests == []


def test_null_timeout_means_none(client: WsClient, server: HttpServer) -> None:
    """timeoutMs null is no deadline."""
    assert body(request(client, server.url("/stall/0.3"), timeoutMs=None)) == b"late"


@pytest.mark.parametrize(
    ("code", "method", "body_kept"),
    [
        (301, "GET", False),
        (302, "GET", False),
        (303, "GET", False),
        (307, "POST", True),
        (308, "POST", True),
    ],
    ids=["301", "302", "303", "307", "308"],
)
def test_post_redirects(
    client: WsClient, server: HttpServer, code: int, method: str, body_kept: bool
) -> None:
    """301/302/303 turn a POST into a bodiless GET; 307/308 keep method and body."""
    result = request(
        client,
        server.url(f"/redirect/{code}?to=/echo"),
        "POST",
        bodyBase64=base64.b64encode(b"payload").decode(),
        headers=[{"name": "Content-Type", "value": "text/plain"}],
    )
    echo = json.loads(body(result))
    assert (echo["method"], echo["path"]) == (method, "/echo")
    assert echo["body"] == ("payload" if body_kept else "")
    names = [name for name, _ in echo["headers"]]
    assert ("content-type" in names) is body_kept
    assert ["referer", server.url(f"/redirect/{code}?to=/echo")] in echo["headers"]


def test_relative_location_is_resolved(client: WsClient, server: HttpServer) -> None:
    """A relative Location resolves against the redirecting URL."""
    echo = json.loads(body(request(client, server.url("/redirect/302/a?to=../../echo?x=1"))))
    assert echo["path"] == "/echo?x=1"


def test_credentials_dropped_across_hosts(client: WsClient, server: HttpServer) -> None:
    """Authorization and Cookie follow a same-origin redirect but not one to another host."""
    secrets = [
        {"name": "Authorization", "value": "Bearer s"},
        {"name": "Cookie", "value": "c=1"},
        {"name": "X-Custom", "value": "kept"},
    ]
    same = server.url("/echo")
    echo = json.loads(
        body(request(client, server.url(f"/redirect/302?to={same}"), headers=secrets))
    )
    assert ["authorization", "Bearer s"] in echo["headers"]
    other = server.url("/echo", host="localhost")
    echo = json.loads(
        body(request(client, server.url(f"/redirect/302?to={other}"), headers=secrets))
    )
    names = [name for name, _ in echo["headers"]]
    assert "authorization" not in names
    assert "cookie" not in names
    assert ["x-custom", "kept"] in echo["headers"]
    assert ["host", f"localhost:{server.port}"] in echo["headers"]


def test_stop_returns_the_redirect(client: WsClient, server: HttpServer) -> None:
    """redirectPolicy stop answers the 3xx itself."""
    result = request(client, server.url("/redirect/302?to=/echo"), redirectPolicy="stop")
    assert result["status"] == 302
    assert {"name": "location", "value": "/echo"} in result["headers"]
    assert len(server.recorder.requests) == 1


def test_ten_redirects_then_error(client: WsClient, server: HttpServer) -> None:
    """Ten redirects are followed; the eleventh is 'too many redirects'."""
    with pytest.raises(RpcError) as error:
        request(client, server.url("/loop/0"))
    assert error.value.message == "http/request failed: too many redirects"
    assert len(server.recorder.requests) == 11


def test_redirect_to_unsupported_scheme(client: WsClient, server: HttpServer) -> None:
    """A redirect to ftp: fails as in the reference."""
    with pytest.raises(RpcError) as error:
        request(client, server.url("/redirect/302?to=ftp://x/"))
    assert error.value.message == (
        "http/request failed: redirect target uses unsupported URL scheme: ftp"
    )
