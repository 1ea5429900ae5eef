"""Real HTTP servers on loopback for the http/request tests, recording what they were sent."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes
    #: The client's port: the same port twice means one reused connection.
    peer_port: int = 0


@dataclass
class Recorder:
    """What the server saw, and events the tests wait for."""

    requests: list[Seen] = field(default_factory=list)
    #: Set when a streaming handler notices its client went away.
    client_gone: threading.Event = field(default_factory=threading.Event)
    #: Set once /double/late has written its unasked-for second answer.
    extra_sent: threading.Event = field(default_factory=threading.Event)


class Handler(BaseHTTPRequestHandler):
    """Endpoints by path prefix; see each ``_route_*`` method."""

    protocol_version = "HTTP/1.1"
    recorder: Recorder

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        # /ignore leaves the body unread, as some servers do for a GET: whatever it holds
        # is read as the next request on the connection.
        ignored = self.path.startswith("/ignore")
        body = self.rfile.read(length) if length and not ignored else b""
        self.recorder.requests.append(
            Seen(
                self.command,
                self.path,
                [(k.lower(), v) for k, v in self.headers.items()],
                body,
                self.client_address[1],
            )
        )
        name = self.path.split("?")[0].strip("/").split("/")[0] or "root"
        getattr(self, f"_route_{name}", self._route_missing)(body)

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = do_PATCH = _handle

    def _reply(
        self, status: int, body: bytes = b"", headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _arg(self, index: int) -> str:
        return self.path.split("?")[0].strip("/").split("/")[index]

    def _route_hangup(self, _body: bytes) -> None:
        """/hangup: answer as if keeping the connection, then close it (an idle timeout)."""
        self._reply(200, b"bye")
        self.close_connection = True

    def _route_missing(self, _body: bytes) -> None:
        self._reply(404, b"missing")

    def _route_ignore(self, _body: bytes) -> None:
        """/ignore: answers without reading the request body (see ``_handle``)."""
        self._reply(200, b"body ignored")

    def _route_echo(self, body: bytes) -> None:
        """The request as JSON, plus response headers with duplicates and mixed case."""
        seen = self.recorder.requests[-1]
        out = {"method": seen.method, "path": seen.path, "headers": seen.headers}
        out["body"] = body.decode("latin-1")
        extra = (("X-Dup", "one"), ("X-Dup", "two"), ("X-MiXed-Case", "Value"))
        self._reply(200, json.dumps(out).encode(), extra)

    def _route_double(self, _body: bytes) -> None:
        """/double/now and /double/late: the answer, then a second one nobody asked for —
        in the same write, or once the client had time to put the connection back."""
        self._reply(200, b"asked")
        extra = b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nunasked!!"
        if self._arg(1) == "late":
            self.wfile.flush()
            time.sleep(0.1)
        self.wfile.write(extra)
        self.wfile.flush()
        self.recorder.extra_sent.set()

    def _route_status(self, _body: bytes) -> None:
        self._reply(int(self._arg(1)), b"status body")

    def _route_redirect(self, _body: bytes) -> None:
        """/redirect/<code>?to=<location>"""
        location = self.path.split("?to=", 1)[1]
        self._reply(int(self._arg(1)), b"", (("Location", location),))

    def _route_loop(self, _body: bytes) -> None:
        self._reply(302, b"", (("Location", f"/loop/{int(self._arg(1)) + 1}"),))

    def _route_bytes(self, _body: bytes) -> None:
        """/bytes/<n>: n bytes of a repeating pattern, chunked in 64 KiB pieces."""
        size = int(self._arg(1))
        pattern = bytes(range(256)) * 256
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        while sent < size:
            piece = pattern[: min(len(pattern), size - sent)]
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            sent += len(piece)
        self.wfile.write(b"0\r\n\r\n")

    def _route_chunks(self, _body: bytes) -> None:
        """Three small chunks, flushed separately."""
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for index in range(3):
            piece = b"part%d\n" % index
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
            time.sleep(0.02)
        self.wfile.write(b"0\r\n\r\n")

    def _route_cut(self, _body: bytes) -> None:
        """Promises 100 bytes, sends 10, closes."""
        self.send_response(200)
        self.send_header("Content-Length", "100")
        self.end_headers()
        self.wfile.write(b"x" * 10)
        self.close_connection = True

    def _route_stall(self, _body: bytes) -> None:
        """/stall/<seconds>: wait before answering."""
        time.sleep(float(self._arg(1)))
        self._reply(200, b"late")

    def _route_drip(self, _body: bytes) -> None:
        """Headers and a little body, then silence until the client leaves (or 10 s)."""
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.write(b"y" * 10)
        self.wfile.flush()
        self.connection.settimeout(10)
        try:
            if self.connection.recv(1) == b"":
                self.recorder.client_gone.set()
        except OSError:
            self.recorder.client_gone.set()
        self.close_connection = True


@dataclass
class HttpServer:
    """A running server: its base URL (``host`` as given) and what it recorded."""

    port: int
    recorder: Recorder
    scheme: str = "http"
    #: The address it listens on.
    address: str = "127.0.0.1"

    def url(self, path: str, host: str | None = None) -> str:
        """An absolute URL on this server (``host``: another name for its address)."""
        return f"{self.scheme}://{host or self.address}:{self.port}{path}"


@contextmanager
def serve(tls: ssl.SSLContext | None = None, address: str = "127.0.0.1") -> Iterator[HttpServer]:
    """A threaded server on ``address`` (TLS when ``tls`` is given)."""
    recorder = Recorder()
    handler = type("BoundHandler", (Handler,), {"recorder": recorder})
    server = ThreadingHTTPServer((address, 0), handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield HttpServer(server.server_address[1], recorder, "https" if tls else "http", address)
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    """A loopback port nothing listens on (connection refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
