"""http/request in buffered mode (protocol.md §5.26): what is sent, what comes back."""

from __future__ import annotations

import base64
import json

import pytest

from tests.http.helpers import LOOPBACK, body, request
from tests.http.servers import HttpServer, free_port
from tests.support.client import RpcError, WsClient


def test_get_sends_reference_default_headers(client: WsClient, server: HttpServer) -> None:
    """A GET carries the caller's headers (lowercased, in order, duplicates kept), then
    ``accept``. ``host`` comes first: h11 writes it there, as RFC 9110 §7.2 asks (the
    reference sends it last)."""
    headers = [{"name": "X-A", "value": "1"}, {"name": "x-a", "value": "2"}]
    result = request(client, server.url("/echo?q=1"), headers=headers)
    echo = json.loads(body(result))
    assert result["status"] == 200
    assert echo["method"] == "GET"
    assert echo["path"] == "/echo?q=1"
    assert echo["headers"] == [
        ["host", f"127.0.0.1:{server.port}"],
        ["x-a", "1"],
        ["x-a", "2"],
        ["accept", "*/*"],
    ]


def test_post_body_round_trip(client: WsClient, server: HttpServer) -> None:
    """A POST body arrives byte for byte with its Content-Length."""
    payload = bytes(range(256)) * 10
    result = request(
        client, server.url("/echo"), "POST", bodyBase64=base64.b64encode(payload).decode()
    )
    echo = json.loads(body(result))
    assert echo["method"] == "POST"
    assert echo["body"].encode("latin-1") == payload
    assert ["content-length", str(len(payload))] in echo["headers"]


def test_body_on_get_is_sent(client: WsClient, server: HttpServer) -> None:
    """As in the reference, a GET with a body sends it."""
    result = request(client, server.url("/echo"), bodyBase64=base64.b64encode(b"on get").decode())
    assert json.loads(body(result))["body"] == "on get"


def test_response_headers_lowercase_wire_order_duplicates(
    client: WsClient, server: HttpServer
) -> None:
    """Response header names are lowercase, in wire order, duplicates preserved."""
    names = [h["name"] for h in request(client, server.url("/echo"))["headers"]]
    assert names[-4:] == ["x-dup", "x-dup", "x-mixed-case", "content-length"]
    values = [h["value"] for h in request(client, server.url("/echo"))["headers"]]
    assert values[-4:-1] == ["one", "two", "Value"]


@pytest.mark.parametrize("status", [404, 500, 418], ids=["404", "500", "418"])
def test_non_2xx_is_a_normal_result(client: WsClient, server: HttpServer, status: int) -> None:
    """An error status is a result with its body, not an RPC error."""
    result = request(client, server.url(f"/status/{status}"))
    assert (result["status"], body(result)) == (status, b"status body")


def test_head_has_an_empty_body(client: WsClient, server: HttpServer) -> None:
    """HEAD answers with the headers and an empty bodyBase64 (Content-Length is not a body)."""
    result = request(client, server.url("/echo"), "HEAD")
    assert result["bodyBase64"] == ""
    assert any(h["name"] == "content-length" and h["value"] != "0" for h in result["headers"])


def test_url_credentials_become_basic_auth(client: WsClient, server: HttpServer) -> None:
    """user:password in the URL is sent as Authorization: Basic, as reqwest does."""
    url = f"http://user:pa%20ss@127.0.0.1:{server.port}/echo"
    echo = json.loads(body(request(client, url)))
    expected = "Basic " + base64.b64encode(b"user:pa ss").decode()
    assert echo["headers"][:2] == [
        ["host", f"127.0.0.1:{server.port}"],
        ["authorization", expected],
    ]


def test_connection_refused(client: WsClient) -> None:
    """A transport failure is -32603 naming the URL."""
    url = f"http://127.0.0.1:{free_port()}/x"
    with pytest.raises(RpcError) as error:
        request(client, url)
    assert error.value.code == -32603
    assert error.value.message == f"http/request failed: error sending request for url ({url})"


def test_body_cut_short_is_an_error(client: WsClient, server: HttpServer) -> None:
    """A body shorter than its Content-Length fails the buffered request."""
    with pytest.raises(RpcError) as error:
        request(client, server.url("/cut"))
    assert error.value.code == -32603
    assert error.value.message == (
        "failed to read http/request response body: error decoding response body"
    )


def test_buffered_body_cap(daemon_factory: type, server: HttpServer) -> None:
    """Bodies over the buffered cap are refused with a pointer to streaming."""
    from executor.http import policy

    assert policy.DEFAULT_MAX_BUFFERED_BYTES == 256 * 1024 * 1024
    daemon = daemon_factory([*LOOPBACK, "--http-max-buffered-bytes", "1000"])
    with daemon.session() as client:
        assert len(body(request(client, server.url("/bytes/1000")))) == 1000
        with pytest.raises(RpcError) as error:
            request(client, server.url("/bytes/1001"))
    assert error.value.message == (
        "http/request failed: response body exceeds 1000 bytes; use streamResponse"
    )
