"""Fixtures of the http/request tests: a loopback HTTP server per test, and a daemon that
may reach it (loopback is refused by default: ``--http-allow-private``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.http.helpers import LOOPBACK
from tests.http.servers import HttpServer, serve
from tests.support.daemon import RunningDaemon


@pytest.fixture(scope="session")
def shared_daemon() -> Iterator[RunningDaemon]:
    """One daemon for the http/request tests that need no other options: it may reach
    loopback (the ``client`` fixture connects to it)."""
    daemon = RunningDaemon(LOOPBACK)
    yield daemon
    daemon.stop()


@pytest.fixture
def server() -> Iterator[HttpServer]:
    """A real HTTP server on 127.0.0.1 that records every request."""
    with serve() as running:
        yield running
