"""Keep-alive: a finished exchange leaves its connection for the next request to the same
origin (as the reference's client does), and a connection the server dropped while idle
costs nothing but a fresh one."""

from __future__ import annotations

from tests.http.helpers import body, deltas, request
from tests.http.servers import HttpServer, serve
from tests.support.client import WsClient


def test_requests_to_one_origin_share_a_connection(client: WsClient, server: HttpServer) -> None:
    for _ in range(3):
        assert request(client, server.url("/echo"))["status"] == 200
    ports = {seen.peer_port for seen in server.recorder.requests}
    assert len(ports) == 1


def test_a_streamed_body_read_to_its_end_also_returns_its_connection(
    client: WsClient, server: HttpServer
) -> None:
    request(client, server.url("/bytes/1000"), requestId="s", streamResponse=True)
    deltas(client, "s")
    request(client, server.url("/echo"))
    assert len({seen.peer_port for seen in server.recorder.requests}) == 1


def test_a_connection_dropped_while_idle_is_replaced_transparently(
    client: WsClient, server: HttpServer
) -> None:
    assert body(request(client, server.url("/hangup"))) == b"bye"
    assert request(client, server.url("/echo"))["status"] == 200
    first, second = (seen.peer_port for seen in server.recorder.requests)
    assert first != second


def test_origins_do_not_share_connections(client: WsClient, server: HttpServer) -> None:
    with serve() as other:
        request(client, server.url("/echo"))
        request(client, other.url("/echo"))
        request(client, server.url("/echo"))
        assert len(other.recorder.requests) == 1
    assert len({seen.peer_port for seen in server.recorder.requests}) == 1
