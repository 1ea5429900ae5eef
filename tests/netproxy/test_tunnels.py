"""Tunnels under load and under attack, with both relay engines (splice and transports):
hundreds at once, half-close, resets, close(), and hostile clients refused while another
tunnel keeps streaming."""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import struct
import sys
import threading
import time

import pytest

from executor.netproxy import ProxyLimits
from tests.netproxy.conftest import MakeProxy
from tests.netproxy.helpers import (
    TIMEOUT,
    EchoServer,
    RunningProxy,
    connect_proxy,
    exchange,
    http_connect,
    read_all,
    recv_exactly,
    socks5,
    streaming,
)

TUNNELS = 300


@pytest.fixture(params=["splice", "transport"])
def engine(request: pytest.FixtureRequest) -> bool:
    """Whether the proxy splices (Linux) or relays through asyncio transports."""
    return bool(request.param == "splice")


@pytest.fixture
def fast(make_proxy: MakeProxy, engine: bool) -> RunningProxy:
    """A proxy for ``localhost`` with short deadlines and a small header limit."""
    limits = ProxyLimits(handshake_timeout=0.3, max_header_bytes=4096, splice=engine)
    return make_proxy(allow=("localhost",), limits=limits)


@pytest.mark.skipif(sys.platform != "linux", reason="splice(2) is Linux's")
def test_linux_tunnels_are_spliced(make_proxy: MakeProxy) -> None:
    """The "splice" runs of these tests do test splicing (the probe found it usable)."""
    assert make_proxy().server.splicing
    assert not make_proxy(limits=ProxyLimits(splice=False)).server.splicing


def test_hundreds_of_concurrent_tunnels(
    make_proxy: MakeProxy, echo: EchoServer, engine: bool
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * TUNNELS + 200:  # client, proxy (two) and echo ends of each tunnel
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    proxy = make_proxy(limits=ProxyLimits(splice=engine))
    all_open = threading.Event()
    counted: list[int] = []

    async def one(index: int, ready: asyncio.Barrier) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(f"CONNECT localhost:{echo.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        payload = os.urandom(16384) + index.to_bytes(4, "big")
        writer.write(payload)
        echoed = await reader.readexactly(len(payload))
        await ready.wait()  # every tunnel is open at once here
        writer.close()
        await writer.wait_closed()
        return echoed if echoed == payload else b"corrupted"

    async def main() -> list[bytes]:
        ready = asyncio.Barrier(TUNNELS + 1)
        tasks = [asyncio.create_task(one(index, ready)) for index in range(TUNNELS)]
        while ready.n_waiting < TUNNELS:
            await asyncio.sleep(0.01)
            for task in tasks:
                if task.done() and task.exception():
                    raise task.exception()  # type: ignore[misc]
        all_open.set()
        counted.append(proxy.stat("tunnels"))
        await ready.wait()
        return await asyncio.gather(*tasks)

    results = asyncio.run(asyncio.wait_for(main(), 60))
    assert all(result != b"corrupted" for result in results)
    assert counted == [TUNNELS]
    proxy.wait_for(lambda: proxy.stat("tunnels") == 0)
    assert len(proxy.decisions) == TUNNELS and all(d.allowed for d in proxy.decisions)


def test_a_large_transfer_arrives_intact(proxy_engine: RunningProxy, echo: EchoServer) -> None:
    data = os.urandom(24 * 1024 * 1024)
    status, sock, _ = http_connect(proxy_engine, f"localhost:{echo.port}")
    assert status == 200
    received = bytearray()

    def reader() -> None:
        while chunk := sock.recv(1 << 20):
            received.extend(chunk)

    thread = threading.Thread(target=reader)
    thread.start()
    sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)
    thread.join(TIMEOUT * 3)
    sock.close()
    assert bytes(received) == data


@pytest.fixture
def proxy_engine(make_proxy: MakeProxy, engine: bool) -> RunningProxy:
    return make_proxy(limits=ProxyLimits(splice=engine))


def test_half_close_is_passed_on_both_ways(proxy_engine: RunningProxy) -> None:
    """The client's EOF reaches the server, which still answers; then the server's EOF
    reaches the client."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        seen: list[bytes] = []

        def server() -> None:
            conn, _ = listener.accept()
            with conn:
                seen.append(read_all(conn))  # until the client's EOF
                conn.sendall(b"answer after your EOF")
                conn.shutdown(socket.SHUT_WR)
                seen.append(conn.recv(1))  # the tunnel stays until both ends closed

        thread = threading.Thread(target=server, daemon=True)
        thread.start()
        status, sock, _ = http_connect(proxy_engine, f"localhost:{listener.getsockname()[1]}")
        assert status == 200
        sock.sendall(b"request")
        sock.shutdown(socket.SHUT_WR)
        assert read_all(sock) == b"answer after your EOF"
        sock.close()
        thread.join(TIMEOUT)
    assert seen == [b"request", b""]
    proxy_engine.wait_for(lambda: proxy_engine.stat("tunnels") == 0)


def test_a_reset_upstream_resets_the_client(proxy_engine: RunningProxy) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def server() -> None:
            conn, _ = listener.accept()
            conn.recv(5)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

        thread = threading.Thread(target=server, daemon=True)
        thread.start()
        status, sock, _ = http_connect(proxy_engine, f"localhost:{listener.getsockname()[1]}")
        with sock:
            assert status == 200
            sock.sendall(b"hello")
            with pytest.raises(ConnectionResetError):
                read_all(sock)
        thread.join(TIMEOUT)


def test_close_ends_every_tunnel_and_stops_accepting(
    make_proxy: MakeProxy, echo: EchoServer, engine: bool
) -> None:
    proxy = make_proxy(limits=ProxyLimits(splice=engine))
    tunnels = [http_connect(proxy, f"localhost:{echo.port}")[1] for _ in range(3)]
    idle = connect_proxy(proxy)  # still handshaking
    for sock in tunnels:
        assert exchange(sock, b"up") == b"up"
    started = time.monotonic()
    proxy.close()
    for sock in [*tunnels, idle]:
        with sock:
            try:
                assert read_all(sock) == b""
            except ConnectionResetError:
                pass
    assert time.monotonic() - started < 2
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", proxy.port), timeout=TIMEOUT)
    assert proxy.stat("tunnels") == 0


def test_too_many_connections_are_closed_without_disturbing_the_others(
    make_proxy: MakeProxy, echo: EchoServer
) -> None:
    proxy = make_proxy(limits=ProxyLimits(max_connections=3))
    first = http_connect(proxy, f"localhost:{echo.port}")[1]
    waiting = [connect_proxy(proxy) for _ in range(2)]
    proxy.wait_for(lambda: proxy.stat("connections") == 3)
    extra = connect_proxy(proxy)
    with extra:
        try:
            assert extra.recv(1) == b""
        except ConnectionResetError:
            pass
    assert proxy.stat("rejected") == 1
    assert exchange(first, b"still here") == b"still here"
    first.close()
    proxy.wait_for(lambda: proxy.stat("connections") == 2)
    for sock in waiting:
        with sock:
            sock.sendall(f"CONNECT localhost:{echo.port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert sock.recv(12) == b"HTTP/1.1 200"


# Hostile clients, each refused while another tunnel keeps streaming


def test_garbage_is_dropped(fast: RunningProxy, echo: EchoServer) -> None:
    with streaming(fast, echo):
        for garbage in (b"\x00\x01\x02\x03", b"\xff" * 1000, b"\x16\x03\x01\x02\x00"):
            with connect_proxy(fast) as sock:
                sock.sendall(garbage)
                try:
                    assert sock.recv(1) == b""
                except ConnectionResetError:
                    pass
    assert fast.stat("rejected") == 3 and fast.refusals() == []


def test_an_http_request_that_is_not_http_is_a_bad_request(
    fast: RunningProxy, echo: EchoServer
) -> None:
    with streaming(fast, echo), connect_proxy(fast) as sock:
        sock.sendall(b"GARBAGE\r\n\r\n")
        assert read_all(sock).startswith(b"HTTP/1.1 400 Bad Request")


def test_slowloris_heads_are_cut_at_the_deadline(fast: RunningProxy, echo: EchoServer) -> None:
    with streaming(fast, echo):
        silent = connect_proxy(fast)
        slow = connect_proxy(fast)
        slow_socks = connect_proxy(fast)
        started = time.monotonic()
        slow.sendall(b"CONNECT local")
        slow_socks.sendall(b"\x05\x01")  # the greeting, without its method
        for sock in (silent, slow, slow_socks):
            with sock:
                try:
                    answer = read_all(sock)
                except ConnectionResetError:
                    answer = b""
                if sock is slow:
                    assert answer.startswith(b"HTTP/1.1 408 Request Timeout")
                else:
                    assert answer == b""
        assert time.monotonic() - started < 0.3 + 2
    assert fast.stat("rejected") == 3


def test_huge_headers_are_refused(fast: RunningProxy, echo: EchoServer) -> None:
    with streaming(fast, echo), connect_proxy(fast) as sock:
        sock.sendall(f"CONNECT localhost:{echo.port} HTTP/1.1\r\n".encode())
        try:
            for _ in range(100):
                sock.sendall(b"X-Filler: " + b"a" * 1000 + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the proxy answered and closed while we were still sending
        answer = recv_exactly(sock, 60)
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large")
    assert fast.decisions[-1].host == "localhost"  # only the streaming tunnel's decision


@pytest.mark.enforcement
def test_refused_destinations_do_not_disturb_a_tunnel(
    fast: RunningProxy, echo: EchoServer, echo6: EchoServer
) -> None:
    with streaming(fast, echo):
        status, sock, _ = http_connect(fast, f"example.invalid:{echo.port}")
        sock.close()
        assert status == 403
        code, sock = socks5(fast, "::1", echo6.port)
        sock.close()
        assert code == 2
        for command in (2, 3):  # BIND, UDP ASSOCIATE
            code, sock = socks5(fast, "localhost", echo.port, command=command)
            sock.close()
            assert code == 7
    assert [d.reason for d in fast.refusals()] == [
        "not in allow list",
        "IP literal not listed",
        "SOCKS5 BIND is not supported",
        "SOCKS5 UDP ASSOCIATE is not supported",
    ]
