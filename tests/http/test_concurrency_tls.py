"""http/request never blocks the connection, and speaks HTTPS with the system trust store."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.http.helpers import LOOPBACK, body, request
from tests.http.servers import HttpServer, serve
from tests.support.client import WsClient
from tests.support.daemon import RunningDaemon
from tests.support.processes import eventually


def test_slow_request_blocks_nothing(client: WsClient, server: HttpServer) -> None:
    """While one request waits on a stalled server, others (and process/*) are answered."""
    request_id = client.next_id()
    client.send(
        {
            "id": request_id,
            "method": "http/request",
            "params": {"method": "GET", "url": server.url("/stall/1.5"), "requestId": "a"},
        }
    )
    started = time.monotonic()
    assert request(client, server.url("/echo"), requestId="b")["status"] == 200
    _, events = client.run("p", ["/bin/echo", "hi"])
    assert events[-1]["method"] == "process/closed"
    assert time.monotonic() - started < 1.0
    assert client.response(request_id)["result"]["status"] == 200


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[HttpServer, Path]]:
    """An HTTPS server with a certificate for 127.0.0.1 from a throwaway CA."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=tmp_path)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "1",
        "-subj",
        "/CN=executor test CA",
    )
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "srv.key",
        "-out",
        "srv.csr",
        "-subj",
        "/CN=127.0.0.1",
    )
    (tmp_path / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    run(
        "x509",
        "-req",
        "-in",
        "srv.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "srv.pem",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "srv.pem", tmp_path / "srv.key")
    with serve(context) as server:
        yield server, tmp_path / "ca.pem"


def test_https_with_a_trusted_ca(
    daemon_factory: type[RunningDaemon], tls_server: tuple[HttpServer, Path]
) -> None:
    """A CA trusted through SSL_CERT_FILE verifies; without it the request fails."""
    server, ca = tls_server
    trusting = daemon_factory(LOOPBACK, env={"SSL_CERT_FILE": str(ca)})
    with trusting.session() as client:
        echo = json.loads(body(request(client, server.url("/echo"))))
    assert echo["method"] == "GET"
    distrusting = daemon_factory(LOOPBACK, unset=["SSL_CERT_FILE"])
    with distrusting.session() as client, pytest.raises(Exception, match="error sending request"):
        request(client, server.url("/echo"))


def test_many_stalled_requests_leave_the_filesystem_methods_alone(
    client: WsClient, server: HttpServer, tmp_path: Path
) -> None:
    """Requests waiting on a slow server hold no thread (they wait on the event loop), so
    more of them than the pool the fs/* methods use has threads cannot stall an fs call."""
    (tmp_path / "f.txt").write_text("still answered")
    stalled = []
    for index in range(12):
        request_id = client.next_id()
        params = {"method": "GET", "url": server.url("/stall/2"), "requestId": f"s{index}"}
        client.send({"id": request_id, "method": "http/request", "params": params})
        stalled.append(request_id)
    # All twelve are at the server (and so waiting there) before the fs call is timed.
    assert eventually(
        lambda: sum(seen.path == "/stall/2" for seen in server.recorder.requests) >= 12
    )
    started = time.monotonic()
    answer = client.request("fs/readFile", {"path": f"file://{tmp_path}/f.txt"})
    assert time.monotonic() - started < 1.0
    assert answer["dataBase64"] == "c3RpbGwgYW5zd2VyZWQ="
    for request_id in stalled:
        assert client.response(request_id, timeout=20)["result"]["status"] == 200
