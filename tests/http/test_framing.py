"""Request framing is the executor's: a client cannot make one request carry two, and no
session ever reads a response meant for another (the review's cross-session desync).

The attack: session A sends a request whose body is a second, complete request — either
declaring ``content-length: 0`` so the server reads the body as the next request, or as a
GET to a server that leaves GET bodies unread. The server then answers twice; the second
answer waits on the connection for whoever sends next on it.
"""

from __future__ import annotations

import base64
import json

import pytest

from tests.http.helpers import body, request
from tests.http.servers import HttpServer
from tests.support.client import RpcError, WsClient
from tests.support.daemon import RunningDaemon


def _smuggled(server: HttpServer, path: str) -> str:
    """A complete request for ``path``, as a request body (base64)."""
    raw = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode()
    return base64.b64encode(raw).decode()


def _path_answered(result: dict[str, object]) -> str:
    path: str = json.loads(body(result))["path"]
    return path


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("Content-Length", "0", "must match the body ({size} bytes) or be left out"),
        ("content-length", "1000", "must match the body ({size} bytes) or be left out"),
        ("Transfer-Encoding", "chunked", "is not allowed"),
        ("Connection", "keep-alive", "is not allowed"),
        ("Keep-Alive", "timeout=5", "is not allowed"),
        ("Upgrade", "h2c", "is not allowed"),
        ("TE", "trailers", "is not allowed"),
        ("Trailer", "x", "is not allowed"),
        ("Host", "127.0.0.1:1", "must match the URL"),
    ],
)
def test_framing_headers_are_refused(
    client: WsClient, server: HttpServer, name: str, value: str, message: str
) -> None:
    """Each is -32602 naming the header, and nothing reaches the server."""
    smuggled = _smuggled(server, "/x")
    params = {"headers": [{"name": name, "value": value}], "bodyBase64": smuggled}
    with pytest.raises(RpcError) as error:
        request(client, server.url("/echo"), "POST", **params)
    assert error.value.code == -32602
    size = len(base64.b64decode(smuggled))
    assert error.value.message.startswith(f"http/request header {name} {message.format(size=size)}")
    assert error.value.message.endswith("the executor frames requests itself")
    assert server.recorder.requests == []


def test_framing_headers_that_agree_are_accepted(client: WsClient, server: HttpServer) -> None:
    """A content-length equal to the body's length, and a host naming the URL's, are what
    the executor would send anyway."""
    headers = [
        {"name": "Content-Length", "value": "5"},
        {"name": "Host", "value": f"127.0.0.1:{server.port}"},
    ]
    payload = base64.b64encode(b"hello").decode()
    echo = json.loads(
        body(request(client, server.url("/echo"), "POST", headers=headers, bodyBase64=payload))
    )
    assert echo["body"] == "hello"
    assert [name for name, _ in echo["headers"]].count("content-length") == 1
    assert [name for name, _ in echo["headers"]].count("host") == 1


def test_sessions_never_share_a_connection(
    shared_daemon: RunningDaemon, server: HttpServer
) -> None:
    """Keep-alive connections are reused within a session, never across sessions."""
    with shared_daemon.session() as one, shared_daemon.session() as two:
        request(one, server.url("/echo"))
        request(two, server.url("/echo"))
        request(one, server.url("/echo"))
    first, other, again = (seen.peer_port for seen in server.recorder.requests)
    assert first == again
    assert other != first


def test_a_smuggled_response_never_reaches_another_session(
    shared_daemon: RunningDaemon, server: HttpServer
) -> None:
    """The review's reproduction, and its variant through a server that ignores a GET's
    body: session B gets the answer to its own request, and so does A's next one."""
    with shared_daemon.session() as a, shared_daemon.session() as b:
        with pytest.raises(RpcError):
            request(
                a,
                server.url("/echo/a"),
                "POST",
                headers=[{"name": "content-length", "value": "0"}],
                bodyBase64=_smuggled(server, "/echo/smuggled-by-a"),
            )
        assert _path_answered(request(b, server.url("/echo/b-private"))) == "/echo/b-private"

        ignored = request(
            a, server.url("/ignore"), bodyBase64=_smuggled(server, "/echo/smuggled-by-a")
        )
        assert body(ignored) == b"body ignored"
        assert _path_answered(request(b, server.url("/echo/b-private"))) == "/echo/b-private"
        assert _path_answered(request(a, server.url("/echo/a-next"))) == "/echo/a-next"
    paths = [seen.path for seen in server.recorder.requests]
    assert "/echo/smuggled-by-a" not in paths
    ignored_request = next(seen for seen in server.recorder.requests if seen.path == "/ignore")
    assert ("connection", "close") in ignored_request.headers


@pytest.mark.parametrize("when", ["now", "late"])
def test_a_connection_that_received_an_unasked_answer_is_not_reused(
    client: WsClient, server: HttpServer, when: str
) -> None:
    """A server that answers twice (in one write, or later while the connection is idle in
    the pool) loses the connection: the next request goes out on a new one and gets its own
    answer, not the extra one."""
    assert body(request(client, server.url(f"/double/{when}"))) == b"asked"
    assert server.recorder.extra_sent.wait(5)
    assert _path_answered(request(client, server.url("/echo/next"))) == "/echo/next"
    first, second = server.recorder.requests
    assert first.peer_port != second.peer_port
