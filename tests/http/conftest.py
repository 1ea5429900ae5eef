"""Fixtures of the http/request tests: a loopback HTTP server per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.http.servers import HttpServer, serve


@pytest.fixture
def server() -> Iterator[HttpServer]:
    """A real HTTP server on 127.0.0.1 that records every request."""
    with serve() as running:
        yield running
