"""``env.http``: requests the executor makes, against a real daemon and an HTTP server of the
test's own on loopback; a streamed body cut off by a dropped connection fails at once."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from executor.client import HttpBodyError, OutcomeUnknown, connect
from executor.client.sync import connect_sync
from tests.client.conftest import arun
from tests.client.test_recovery import until, until_connected
from tests.support.daemon import RunningDaemon
from tests.support.faultrelay import FaultRelay


class Server(ThreadingHTTPServer):
    """The test's HTTP server; ``release`` lets a held stream go on."""

    daemon_threads = True
    release: threading.Event


class Handler(BaseHTTPRequestHandler):
    """``/echo`` (the request as JSON; ``?status=N``), ``/redirect`` (to ``/echo``),
    ``/stream?parts=N`` (chunked, ``&hold=1``: the rest waits for ``release``) and
    ``/short`` (a body shorter than its Content-Length)."""

    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._route()

    def do_POST(self) -> None:
        self._route()

    def _route(self) -> None:
        url = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(url.query).items()}
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        if url.path == "/echo":
            answer = json.dumps(
                {
                    "method": self.command,
                    "headers": [[k.lower(), v] for k, v in self.headers.items()],
                    "body": body.decode(),
                }
            ).encode()
            self._send(int(query.get("status", 200)), answer, [("x-twice", "1"), ("x-twice", "2")])
        elif url.path == "/redirect":
            self._send(302, b"", [("location", "/echo")])
        elif url.path == "/stream":
            self.send_response(200)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for part in range(int(query["parts"])):
                if part == 1 and query.get("hold"):
                    self.server.release.wait(20)
                data = f"part {part}\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        elif url.path == "/short":
            self.send_response(200)
            self.send_header("content-length", "1000")
            self.end_headers()
            self.wfile.write(b"only this")
            self.wfile.flush()
            self.close_connection = True
        else:
            self._send(404, b"no such page", [])

    def _send(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def web() -> Iterator[Server]:
    server = Server(("127.0.0.1", 0), Handler)
    server.release = threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


def base(web: Server) -> str:
    return f"http://127.0.0.1:{web.server_address[1]}"


@pytest.fixture(scope="module")
def daemon() -> Iterator[RunningDaemon]:
    """A daemon whose http/request may reach loopback (refused by default)."""
    running = RunningDaemon(["--http-allow-private"])
    yield running
    running.stop()


def test_a_buffered_request_returns_status_headers_and_body(
    daemon: RunningDaemon, web: Server
) -> None:
    async def main() -> None:
        async with connect(daemon.url) as env:
            response = await env.http.request(
                "POST",
                f"{base(web)}/echo?status=201",
                headers=[("X-One", "a"), ("X-One", "b")],
                body=b"hello",
                timeout_ms=10_000,
            )
            assert response.status == 201
            echoed = json.loads(response.body)
            assert (echoed["method"], echoed["body"]) == ("POST", "hello")
            assert [v for k, v in echoed["headers"] if k == "x-one"] == ["a", "b"]
            assert [v for k, v in response.headers if k == "x-twice"] == ["1", "2"]
            assert response.header("X-Twice") == "1"
            missing = await env.http.request("GET", f"{base(web)}/nothing", headers={"A": "b"})
            assert (missing.status, missing.body) == (404, b"no such page")
            stopped = await env.http.request("GET", f"{base(web)}/redirect", follow_redirects=False)
            assert (stopped.status, stopped.header("location")) == (302, "/echo")
            followed = await env.http.request("GET", f"{base(web)}/redirect")
            assert followed.status == 200 and json.loads(followed.body)["method"] == "GET"

    arun(main())


def test_a_streamed_body_arrives_whole_and_in_order(daemon: RunningDaemon, web: Server) -> None:
    async def main() -> None:
        async with connect(daemon.url) as env:
            response = await env.http.stream("GET", f"{base(web)}/stream?parts=200")
            assert response.status == 200
            assert response.header("transfer-encoding") == "chunked"
            body = b"".join([block async for block in response.body])
            assert body == "".join(f"part {i}\n" for i in range(200)).encode()
            # Read to its end, it is no longer followed.
            assert env._link.http_streams == {}
            again = await env.http.stream("GET", f"{base(web)}/stream?parts=3")
            assert await again.read() == b"part 0\npart 1\npart 2\n"

    arun(main())


def test_a_body_that_fails_half_way_raises(daemon: RunningDaemon, web: Server) -> None:
    async def main() -> None:
        async with connect(daemon.url) as env:
            response = await env.http.stream("GET", f"{base(web)}/short")
            with pytest.raises(HttpBodyError) as caught:
                await response.read()
            assert not caught.value.connection_lost
            assert "http/request" in str(caught.value) and caught.value.reason

    arun(main())


def test_a_streamed_body_fails_at_once_when_the_connection_drops(
    daemon: RunningDaemon, web: Server
) -> None:
    """The body is not retained by the executor: it fails as soon as the transport closes,
    without waiting for the session to come back; the session then goes on."""
    web.release.clear()

    async def main() -> None:
        async with FaultRelay(daemon.url) as relay, connect(relay.url) as env:
            response = await env.http.stream("GET", f"{base(web)}/stream?parts=5&hold=1")
            body = response.body
            assert await anext(body) == b"part 0\n"
            relay.refusing = True  # the session cannot come back yet
            await relay.drop("rst")
            started = asyncio.get_running_loop().time()
            with pytest.raises(HttpBodyError, match="cannot be resumed") as caught:
                await anext(body)
            assert caught.value.connection_lost
            assert asyncio.get_running_loop().time() - started < 1.0
            assert env.state == "recovering"
            web.release.set()
            relay.refusing = False
            await until_connected(env, 1)
            after = await env.http.request("GET", f"{base(web)}/echo")
            assert after.status == 200

    try:
        arun(main())
    finally:
        web.release.set()


def test_a_buffered_request_cut_off_is_outcome_unknown(daemon: RunningDaemon, web: Server) -> None:
    async def main() -> None:
        async with FaultRelay(daemon.url) as relay, connect(relay.url) as env:
            relay.pause("down")
            sent = relay.up_bytes
            call = asyncio.ensure_future(env.http.request("POST", f"{base(web)}/echo", body=b"x"))
            await until(lambda: relay.up_bytes > sent)
            await relay.drop("rst")
            relay.resume()
            with pytest.raises(OutcomeUnknown, match="http/request"):
                await call
            await until_connected(env, 1)

    arun(main())


def test_closing_a_stream_early_drops_the_rest(daemon: RunningDaemon, web: Server) -> None:
    async def main() -> None:
        async with connect(daemon.url) as env:
            async with await env.http.stream("GET", f"{base(web)}/stream?parts=500") as response:
                assert await anext(response.body) == b"part 0\n"
            assert [block async for block in response.body] == []
            await until(lambda: not env._link.http_streams)
            assert (await env.http.request("GET", f"{base(web)}/echo")).status == 200

    arun(main())


def test_the_synchronous_facade(daemon: RunningDaemon, web: Server) -> None:
    with connect_sync(daemon.url) as env:
        assert env.http.request("GET", f"{base(web)}/echo").status == 200
        with env.http.stream("GET", f"{base(web)}/stream?parts=4") as response:
            assert response.status == 200
            assert response.read() == b"part 0\npart 1\npart 2\npart 3\n"


def test_closing_the_environment_ends_a_stream(daemon: RunningDaemon, web: Server) -> None:
    web.release.clear()

    async def main() -> None:
        env = await connect(daemon.url)
        response = await env.http.stream("GET", f"{base(web)}/stream?parts=3&hold=1")
        assert await anext(response.body) == b"part 0\n"
        await env.close()
        with pytest.raises(HttpBodyError, match="the environment was closed"):
            await anext(response.body)

    try:
        arun(main())
    finally:
        web.release.set()
