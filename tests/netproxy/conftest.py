"""Fixtures of the proxy tests: one event loop thread for the proxies, origin servers on
loopback (127.0.0.1, 127.0.0.2, ::1), and proxies made per test and closed after it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.http.servers import HttpServer, serve
from tests.netproxy.helpers import EchoServer, LoopThread, RunningProxy, ipv6_loopback, start_proxy

MakeProxy = Callable[..., RunningProxy]


@pytest.fixture(scope="session")
def runner() -> Iterator[LoopThread]:
    """The loop every proxy of the session runs on (as the daemon runs them on its own)."""
    thread = LoopThread()
    yield thread
    thread.stop()


@pytest.fixture(scope="session")
def echo() -> Iterator[EchoServer]:
    """An echo server on 127.0.0.1."""
    server = EchoServer("127.0.0.1")
    yield server
    server.close()


@pytest.fixture(scope="session")
def echo2() -> Iterator[EchoServer]:
    """An echo server on 127.0.0.2 (another loopback address)."""
    server = EchoServer("127.0.0.2")
    yield server
    server.close()


@pytest.fixture(scope="session")
def echo6() -> Iterator[EchoServer]:
    """An echo server on ::1."""
    if not ipv6_loopback():
        pytest.skip("no IPv6 loopback here")
    server = EchoServer("::1")
    yield server
    server.close()


@pytest.fixture
def origin() -> Iterator[HttpServer]:
    """An HTTP server on 127.0.0.1 recording what it is sent (tests/http/servers.py)."""
    with serve() as running:
        yield running


@pytest.fixture
def make_proxy(runner: LoopThread) -> Iterator[MakeProxy]:
    """``make_proxy(allow=..., deny=..., limits=..., resolver=...)``: a started proxy,
    closed at the end of the test."""
    made: list[RunningProxy] = []

    def make(**options: Any) -> RunningProxy:
        proxy = start_proxy(runner, **options)
        made.append(proxy)
        return proxy

    yield make
    for proxy in made:
        proxy.close()


@pytest.fixture
def proxy(make_proxy: MakeProxy) -> RunningProxy:
    """A proxy that allows ``localhost`` (explicitly: it may lead to loopback)."""
    return make_proxy(allow=("localhost",))
