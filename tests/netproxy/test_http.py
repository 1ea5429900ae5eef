"""HTTP proxying on real sockets: CONNECT tunnels and plain requests, allowed and refused,
with raw clients, curl and urllib."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.netproxy.policy import IPAddress
from tests.http.servers import HttpServer, serve
from tests.netproxy.conftest import MakeProxy
from tests.netproxy.helpers import (
    TIMEOUT,
    EchoServer,
    RunningProxy,
    connect_proxy,
    exchange,
    http_connect,
    read_all,
)


def plain(proxy: RunningProxy, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection, read to EOF: (status, headers, body)."""
    with connect_proxy(proxy) as sock:
        sock.sendall(request)
        data = read_all(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body


def opener(proxy: RunningProxy) -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy.url}))


def curl(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # no proxy variables of ours
    return subprocess.run(
        ["curl", "-sS", "--max-time", "10", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=20,
        check=False,
    )


# CONNECT


@pytest.mark.enforcement
def test_connect_to_a_listed_name_tunnels_and_others_are_refused(
    proxy: RunningProxy, echo: EchoServer
) -> None:
    status, sock, _ = http_connect(proxy, f"localhost:{echo.port}")
    with sock:
        assert status == 200
        assert exchange(sock, b"ping through the tunnel") == b"ping through the tunnel"
    status, sock, body = http_connect(proxy, f"example.invalid:{echo.port}")
    sock.close()
    assert status == 403
    assert (
        body == f"executor proxy refused example.invalid:{echo.port}: not in allow list\n".encode()
    )
    allowed, refused = proxy.decisions
    assert (allowed.allowed, allowed.protocol, allowed.host, allowed.address) == (
        True,
        "connect",
        "localhost",
        "127.0.0.1",
    )
    assert (refused.allowed, refused.reason, refused.port) == (
        False,
        "not in allow list",
        echo.port,
    )


@pytest.mark.enforcement
def test_connect_to_an_ip_literal_only_when_listed(make_proxy: MakeProxy, echo: EchoServer) -> None:
    unlisted = make_proxy(allow=("localhost", "*"))
    status, sock, body = http_connect(unlisted, f"127.0.0.1:{echo.port}")
    sock.close()
    assert status == 403 and b"IP literal not listed" in body
    listed = make_proxy(allow=("127.0.0.1",))
    status, sock, _ = http_connect(listed, f"127.0.0.1:{echo.port}")
    with sock:
        assert status == 200 and exchange(sock, b"literal") == b"literal"


@pytest.mark.enforcement
def test_localhost_through_a_wildcard_is_refused(make_proxy: MakeProxy, echo: EchoServer) -> None:
    wildcard = make_proxy(allow=("*",))
    status, sock, body = http_connect(wildcard, f"localhost:{echo.port}")
    sock.close()
    assert status == 403
    assert b"resolves to loopback 127.0.0.1 (list the host explicitly)" in body
    (decision,) = wildcard.decisions
    assert not decision.allowed and decision.address == "127.0.0.1"
    explicit = make_proxy(allow=("*", "localhost"))
    status, sock, _ = http_connect(explicit, f"localhost:{echo.port}")
    with sock:
        assert status == 200 and exchange(sock, b"x") == b"x"


@pytest.mark.enforcement
def test_loopback_ports_limit_even_listed_hosts(make_proxy: MakeProxy, echo: EchoServer) -> None:
    """With ``loopback_ports`` (the daemon's local ports) ``localhost`` listed reaches
    only those ports of the host's loopback."""
    proxy = make_proxy(allow=("localhost", "127.0.0.2"), loopback_ports=(echo.port,))
    status, sock, _ = http_connect(proxy, f"localhost:{echo.port}")
    with sock:
        assert status == 200 and exchange(sock, b"db") == b"db"
    other = echo.port + 1 if echo.port < 65535 else 1
    status, sock, body = http_connect(proxy, f"127.0.0.2:{other}")
    sock.close()
    assert status == 403 and b"reached only at the profile's local_ports" in body
    status, sock, body = http_connect(proxy, f"localhost:{other}")
    sock.close()
    assert status == 403 and b"reached only at the profile's local_ports" in body


@pytest.mark.enforcement
def test_a_name_is_resolved_once_and_its_address_checked(
    make_proxy: MakeProxy, echo2: EchoServer
) -> None:
    """``svc.test`` resolves to 127.0.0.2 — then, were it asked again, elsewhere: through
    ``*.test`` it is refused (loopback); listed exactly, the proxy connects to the address
    it checked, asking DNS once."""
    answers: list[str] = []

    async def rebinding(host: str, port: int) -> list[IPAddress]:
        answers.append(host)
        return [ipaddress.ip_address("127.0.0.2" if len(answers) % 2 else "127.0.0.1")]

    wildcard = make_proxy(allow=("*.test",), resolver=rebinding)
    status, sock, body = http_connect(wildcard, f"svc.test:{echo2.port}")
    sock.close()
    assert status == 403 and b"resolves to loopback 127.0.0.2 (list the host explicitly)" in body
    answers.clear()
    explicit = make_proxy(allow=("svc.test",), resolver=rebinding)
    accepted = echo2.accepted
    status, sock, _ = http_connect(explicit, f"svc.test:{echo2.port}")
    with sock:
        assert status == 200 and exchange(sock, b"vetted") == b"vetted"
    assert answers == ["svc.test"]
    assert echo2.accepted == accepted + 1  # 127.0.0.2, the address that was checked
    assert explicit.decisions[0].address == "127.0.0.2"


@pytest.mark.enforcement
def test_deny_wins(make_proxy: MakeProxy, echo: EchoServer) -> None:
    denied = make_proxy(allow=("localhost",), deny=("localhost",))
    status, sock, body = http_connect(denied, f"localhost:{echo.port}")
    sock.close()
    assert status == 403 and b"denied by localhost" in body
    assert denied.refusals()[0].reason == "denied by localhost"


def test_connect_to_a_closed_port_is_a_bad_gateway_not_a_refusal(proxy: RunningProxy) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    status, sock, body = http_connect(proxy, f"localhost:{port}")
    sock.close()
    assert status == 502 and b"connection refused" in body
    (decision,) = proxy.decisions
    assert decision.allowed and decision.error is not None and "refused" in decision.error


def test_bytes_sent_right_after_the_connect_head_reach_the_upstream(
    proxy: RunningProxy, echo: EchoServer
) -> None:
    """A client may send its first bytes (a TLS hello) without waiting for the 200."""
    with connect_proxy(proxy) as sock:
        sock.sendall(f"CONNECT localhost:{echo.port} HTTP/1.1\r\nHost: x\r\n\r\nearly".encode())
        data = b""
        while not data.endswith(b"early"):
            data += sock.recv(4096)
        assert data == b"HTTP/1.1 200 Connection established\r\n\r\nearly"


@pytest.mark.parametrize(
    ("target", "reason"),
    [("localhost", b"CONNECT needs host:port"), ("::1:80", b"CONNECT needs host:port")],
)
def test_connect_targets_without_a_port_are_bad_requests(
    proxy: RunningProxy, target: str, reason: bytes
) -> None:
    status, sock, body = http_connect(proxy, target)
    sock.close()
    assert status == 400 and reason in body
    assert proxy.decisions == []


def test_curl_through_connect(proxy: RunningProxy, origin: HttpServer) -> None:
    result = curl("-p", "-x", proxy.url, origin.url("/echo", host="localhost"))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["path"] == "/echo"
    assert proxy.decisions[0].protocol == "connect"
    refused = curl("-p", "-x", proxy.url, origin.url("/echo"))  # 127.0.0.1: a literal
    assert refused.returncode != 0 and "403" in refused.stderr


@pytest.fixture(scope="module")
def tls_origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HttpServer, Path]]:
    """An HTTPS server with a self-signed certificate for ``localhost``."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    where = tmp_path_factory.mktemp("tls")
    request = "req -x509 -newkey rsa:2048 -nodes -days 1 -keyout key.pem -out cert.pem"
    subject = ["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"]
    subprocess.run(
        ["openssl", *request.split(), *subject],
        cwd=where,
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(where / "cert.pem", where / "key.pem")
    with serve(tls=context) as server:
        yield server, where / "cert.pem"


def test_urllib_https_through_connect(
    proxy: RunningProxy, tls_origin: tuple[HttpServer, Path]
) -> None:
    """TLS end to end through the tunnel, the certificate checked for the name."""
    server, certificate = tls_origin
    https = urllib.request.build_opener(
        urllib.request.ProxyHandler({"https": proxy.url}),
        urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=str(certificate))),
    )
    with https.open(server.url("/echo", host="localhost"), timeout=TIMEOUT) as answer:
        assert json.loads(answer.read())["path"] == "/echo"
    with pytest.raises(urllib.error.URLError, match="403"):
        https.open(server.url("/echo", host="127.0.0.1"), timeout=TIMEOUT)
    assert [(d.protocol, d.allowed) for d in proxy.decisions] == [
        ("connect", True),
        ("connect", False),
    ]


# Plain HTTP


@pytest.mark.enforcement
def test_plain_requests_are_forwarded_in_origin_form_without_hop_by_hop_headers(
    proxy: RunningProxy, origin: HttpServer
) -> None:
    status, _headers, body = plain(
        proxy,
        f"GET http://localhost:{origin.port}/echo?q=1 HTTP/1.1\r\n"
        "Host: somewhere.else\r\n"
        "Proxy-Authorization: Basic c2VjcmV0\r\n"
        "Proxy-Connection: keep-alive\r\n"
        "Connection: close, X-Hop\r\n"
        "X-Hop: dropped\r\n"
        "Keep-Alive: timeout=5\r\n"
        "X-End-To-End: kept\r\n\r\n".encode(),
    )
    assert status == 200
    seen = json.loads(body)
    assert seen["path"] == "/echo?q=1"
    headers = dict(seen["headers"])
    assert headers["host"] == f"localhost:{origin.port}"
    assert headers["x-end-to-end"] == "kept"
    assert headers["connection"] == "close"
    for hop in ("proxy-authorization", "proxy-connection", "x-hop", "keep-alive"):
        assert hop not in headers
    refused, _headers, why = plain(
        proxy, f"GET http://127.0.0.1:{origin.port}/echo HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    )
    assert refused == 403 and b"IP literal not listed" in why
    assert [d.protocol for d in proxy.decisions] == ["http", "http"]


def test_plain_request_bodies_reach_the_origin(proxy: RunningProxy, origin: HttpServer) -> None:
    url = f"http://localhost:{origin.port}/echo"
    fixed = f"POST {url} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
    status, _headers, body = plain(proxy, fixed.encode())
    assert status == 200 and json.loads(body)["body"] == "hello"


def test_chunked_request_bodies_stay_chunked(proxy: RunningProxy) -> None:
    """The origin gets the body as the client framed it (chunked, re-chunked by the proxy)."""
    received = b""

    def origin() -> None:
        nonlocal received
        conn, _ = listener.accept()
        with conn:
            while not received.endswith(b"0\r\n\r\n"):
                received += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    with socket.create_server(("127.0.0.1", 0)) as listener:
        server = threading.Thread(target=origin, daemon=True)
        server.start()
        request = (
            f"POST http://localhost:{listener.getsockname()[1]}/up HTTP/1.1\r\nHost: x\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        )
        status, _headers, body = plain(proxy, request.encode())
        server.join(TIMEOUT)
    assert (status, body) == (200, b"ok")
    head, _, chunks = received.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /up HTTP/1.1\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    assert dechunk(chunks) == b"abcde"


def dechunk(data: bytes) -> bytes:
    body = b""
    while True:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return body
        body, data = body + data[:size], data[size + 2 :]


def test_a_kept_alive_client_connection_vets_every_request(
    proxy: RunningProxy, origin: HttpServer
) -> None:
    """Two requests on one client connection: the second, to an unlisted host, is refused."""
    with connect_proxy(proxy) as sock:
        sock.sendall(
            f"GET http://localhost:{origin.port}/echo HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        first = b""
        while b'"body": ""}' not in first:
            first += sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET http://elsewhere.invalid/ HTTP/1.1\r\nHost: x\r\n\r\n")
        second = read_all(sock)
    assert second.startswith(b"HTTP/1.1 403")
    assert [d.allowed for d in proxy.decisions] == [True, False]


def test_a_large_streamed_response_arrives_whole(proxy: RunningProxy, origin: HttpServer) -> None:
    size = 8 * 1024 * 1024
    with opener(proxy).open(f"http://localhost:{origin.port}/bytes/{size}", timeout=TIMEOUT) as r:
        body = r.read()
    assert len(body) == size and body[:512] == bytes(range(256)) * 2


def test_urllib_through_the_proxy(proxy: RunningProxy, origin: HttpServer) -> None:
    with opener(proxy).open(f"http://localhost:{origin.port}/echo", timeout=TIMEOUT) as answer:
        assert json.loads(answer.read())["method"] == "GET"
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener(proxy).open(f"http://127.0.0.1:{origin.port}/echo", timeout=TIMEOUT)
    assert refused.value.code == 403
    assert b"IP literal not listed" in refused.value.read()


def test_curl_plain_and_keep_alive(proxy: RunningProxy, origin: HttpServer) -> None:
    base = f"http://localhost:{origin.port}"
    result = curl("-v", "-x", proxy.url, f"{base}/echo", f"{base}/status/204")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["path"] == "/echo"
    assert "Re-using existing connection" in result.stderr or "Reusing" in result.stderr


@pytest.mark.parametrize(
    ("request_line", "status", "reason"),
    [
        ("GET /relative HTTP/1.1", 400, b"absolute http:// URL"),
        ("GET https://localhost/ HTTP/1.1", 400, b"goes through CONNECT"),
        ("GET ftp://localhost/ HTTP/1.1", 400, b"absolute http:// URL"),
        ("GET http://user:pw@localhost/ HTTP/1.1", 400, b"no user name"),
        ("GET http://localhost:99999/ HTTP/1.1", 400, b"not a port number"),
        ("GET http://[::1/ HTTP/1.1", 400, b"not a host"),
        ("CONNECT localhost:0 HTTP/1.1", 403, b"port 0 is out of range"),
        ("GET http://localhost:0/ HTTP/1.1", 403, b"port 0 is out of range"),
    ],
)
def test_requests_a_proxy_does_not_serve(
    proxy: RunningProxy, request_line: str, status: int, reason: bytes
) -> None:
    answer, _headers, body = plain(proxy, f"{request_line}\r\nHost: x\r\n\r\n".encode())
    assert answer == status and reason in body
    assert [d.reason for d in proxy.decisions] == ([] if status == 400 else [reason.decode()])


def test_an_upstream_that_breaks_off_resets_the_client(
    proxy: RunningProxy, origin: HttpServer
) -> None:
    """/cut promises 100 bytes and sends 10: the client must not see a clean end."""
    with connect_proxy(proxy) as sock:
        sock.sendall(f"GET http://localhost:{origin.port}/cut HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        with pytest.raises(ConnectionResetError):
            read_all(sock)
