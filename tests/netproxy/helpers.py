"""A real proxy on its own event loop thread, real origin servers on loopback, and small
blocking clients that speak CONNECT, plain HTTP and SOCKS5 byte by byte."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from executor.netproxy import Decision, ProxyLimits, ProxyServer
from executor.netproxy.policy import Resolver, resolve
from executor.sandbox.network import NetworkAccess, NetworkPolicy

T = TypeVar("T")
TIMEOUT = 10.0


class LoopThread:
    """An asyncio loop running in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = TIMEOUT) -> T:
        """Run ``coro`` on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        """Stop the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(TIMEOUT)
        self.loop.close()


@dataclass
class RunningProxy:
    """A started ``ProxyServer`` and the decisions it reported."""

    server: ProxyServer
    port: int
    runner: LoopThread
    decisions: list[Decision] = field(default_factory=list)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def refusals(self) -> list[Decision]:
        """The refused decisions so far."""
        return [decision for decision in self.decisions if not decision.allowed]

    def wait_for(self, predicate: Callable[[], bool], timeout: float = TIMEOUT) -> None:
        """Until ``predicate()`` holds (asserting it does within ``timeout``)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, "condition not reached in time"
            time.sleep(0.01)

    def stat(self, name: str) -> int:
        """A counter of the server, read on its loop."""

        async def read() -> int:
            value: int = getattr(self.server, name)
            return value

        return self.runner.run(read())

    def close(self) -> None:
        """``ProxyServer.close()`` on its loop."""
        self.runner.run(self.server.close())


def start_proxy(
    runner: LoopThread,
    *,
    allow: tuple[str, ...] = ("localhost",),
    deny: tuple[str, ...] = (),
    limits: ProxyLimits | None = None,
    resolver: Resolver = resolve,
    loopback_ports: tuple[int, ...] | None = None,
) -> RunningProxy:
    """A proxy for ``allow``/``deny`` listening on 127.0.0.1 (a socket made here, as the
    daemon makes it)."""
    policy = NetworkPolicy(mode=NetworkAccess.PROXY, allow=allow, deny=deny)
    decisions: list[Decision] = []
    listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
    port = listener.getsockname()[1]

    async def start() -> ProxyServer:
        server = ProxyServer(
            policy,
            on_decision=decisions.append,
            limits=limits or ProxyLimits(),
            resolver=resolver,
            loopback_ports=loopback_ports,
        )
        await server.start(listener)
        return server

    return RunningProxy(runner.run(start()), port, runner, decisions)


def ipv6_loopback() -> bool:
    """Whether ``::1`` can be listened on here."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


class EchoServer:
    """A threaded TCP server on ``address`` that echoes until EOF, then closes."""

    def __init__(self, address: str = "127.0.0.1") -> None:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.listener = socket.create_server((address, 0), family=family, backlog=1024)
        self.address = address
        self.port: int = self.listener.getsockname()[1]
        self.accepted = 0
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            self._conns.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            try:
                while chunk := conn.recv(262144):
                    conn.sendall(chunk)
                conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        """Stop accepting; close the open connections."""
        self.listener.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.close()


# Clients


def _read_head(sock: socket.socket) -> tuple[int, bytes]:
    """``(status, rest after the head)`` of an HTTP response on ``sock``."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), rest


def connect_proxy(proxy: RunningProxy) -> socket.socket:
    """A blocking connection to the proxy, with a timeout."""
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=TIMEOUT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def http_connect(proxy: RunningProxy, target: str) -> tuple[int, socket.socket, bytes]:
    """``CONNECT target``: (status, the socket, what followed the head: the body of a
    refusal, read to EOF)."""
    sock = connect_proxy(proxy)
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    status, rest = _read_head(sock)
    if status != 200:
        rest += read_all(sock)
    return status, sock, rest


def read_all(sock: socket.socket) -> bytes:
    """Everything until EOF."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def exchange(sock: socket.socket, data: bytes) -> bytes:
    """Send ``data`` and read as many bytes back."""
    sock.sendall(data)
    received = b""
    while len(received) < len(data):
        chunk = sock.recv(len(data) - len(received))
        if not chunk:
            break
        received += chunk
    return received


def socks5(
    proxy: RunningProxy,
    host: str,
    port: int,
    *,
    command: int = 1,
    methods: bytes = b"\x00",
) -> tuple[int, socket.socket]:
    """A SOCKS5 request: (reply code, the socket). ``host`` is sent as an IPv4 or IPv6
    address when it is one, else as a name."""
    sock = connect_proxy(proxy)
    sock.sendall(b"\x05" + bytes((len(methods),)) + methods)
    choice = recv_exactly(sock, 2)
    if choice[1] != 0:
        return 0x100 | choice[1], sock
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        encoded = host.encode()
        target = b"\x03" + bytes((len(encoded),)) + encoded
    else:
        target = (b"\x01" if address.version == 4 else b"\x04") + address.packed
    sock.sendall(b"\x05" + bytes((command, 0)) + target + struct.pack("!H", port))
    head = recv_exactly(sock, 4)
    recv_exactly(sock, 4 if head[3] == 1 else 16 if head[3] == 4 else 0)
    recv_exactly(sock, 2)
    return head[1], sock


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes (fewer at EOF)."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


class Streamer:
    """A tunnel kept busy from a thread: random blocks out, the same blocks back,
    checked; ``rounds`` counts them, ``error`` keeps what went wrong."""

    def __init__(self, sock: socket.socket, block: int = 65536) -> None:
        self.sock = sock
        self.block = block
        self.rounds = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                data = os.urandom(self.block)
                if exchange(self.sock, data) != data:
                    raise AssertionError("the tunnel corrupted or cut the stream")
                self.rounds += 1
        except BaseException as exc:
            self.error = exc

    def progresses(self, timeout: float = TIMEOUT) -> bool:
        """Whether some more rounds complete within ``timeout``."""
        start = self.rounds
        deadline = time.monotonic() + timeout
        while self.rounds < start + 3 and self.error is None and time.monotonic() < deadline:
            time.sleep(0.005)
        return self.rounds >= start + 3 and self.error is None

    def stop(self) -> None:
        """Stop and check nothing went wrong."""
        self._stop.set()
        self._thread.join(TIMEOUT)
        assert self.error is None, self.error


@contextlib.contextmanager
def streaming(proxy: RunningProxy, echo: EchoServer) -> Iterator[Streamer]:
    """A busy CONNECT tunnel to ``echo`` for the duration of the block, checked to keep
    streaming at its end."""
    status, sock, _ = http_connect(proxy, f"localhost:{echo.port}")
    assert status == 200
    streamer = Streamer(sock)
    try:
        assert streamer.progresses()
        yield streamer
        assert streamer.progresses(), "the busy tunnel stalled"
    finally:
        streamer.stop()
        sock.close()
