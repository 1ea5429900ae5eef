"""relay_connection: a listener whose connections are relayed to a fixed host port (what a
session's ``local_ports`` relays do), on real sockets."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from executor.netproxy.relay import relay_connection
from tests.netproxy.helpers import TIMEOUT, EchoServer, LoopThread, exchange, read_all


def relay_to(runner: LoopThread, port: int) -> tuple[int, asyncio.Server]:
    async def start() -> asyncio.Server:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await relay_connection(reader, writer, "127.0.0.1", port)

        return await asyncio.start_server(handle, "127.0.0.1", 0)

    server = runner.run(start())
    return server.sockets[0].getsockname()[1], server


def stop(runner: LoopThread, server: asyncio.Server) -> None:
    """Close ``server`` on its loop (asyncio objects are not thread-safe)."""

    async def close() -> None:
        server.close()

    runner.run(close())


@pytest.fixture
def relayed(runner: LoopThread, echo: EchoServer) -> Iterator[int]:
    port, server = relay_to(runner, echo.port)
    yield port
    stop(runner, server)


def test_bytes_and_half_close_go_through(relayed: int) -> None:
    with socket.create_connection(("127.0.0.1", relayed), timeout=TIMEOUT) as sock:
        assert exchange(sock, b"to the database") == b"to the database"
        sock.sendall(b"last words")
        sock.shutdown(socket.SHUT_WR)
        assert read_all(sock) == b"last words"  # the echo's EOF came back too


def test_an_unreachable_target_resets_the_client(runner: LoopThread) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    port, server = relay_to(runner, closed_port)
    try:
        # The reset may come as early as the connect.
        with (
            pytest.raises(ConnectionResetError),
            socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock,
        ):
            read_all(sock)
    finally:
        stop(runner, server)
