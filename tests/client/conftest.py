"""A real daemon on loopback for the client's tests, and a bounded way to run a coroutine."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from tests.support.daemon import RunningDaemon

T = TypeVar("T")


def arun(coroutine: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
    """Run ``coroutine`` on a fresh event loop, failing it after ``timeout`` seconds."""

    async def bounded() -> T:
        async with asyncio.timeout(timeout):
            return await coroutine

    return asyncio.run(bounded())


@pytest.fixture(scope="module")
def daemon() -> Iterator[RunningDaemon]:
    """A daemon with the default options."""
    running = RunningDaemon()
    try:
        yield running
    finally:
        running.stop()
