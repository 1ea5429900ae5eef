"""Memory that comes back: coalesced heap trims, and caches bounded in bytes, not only entries."""

from __future__ import annotations

import platform
from collections.abc import Callable

import pytest

from executor.http.url import CACHED_URL_CHARS, parse_url
from executor.memory import MemoryReclaimer, release_free_memory


class FakeLoop:
    """Records ``call_later`` calls; the test runs them and moves the clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[tuple[float, Callable[[], None]]] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> object:
        self.calls.append((self.now + delay, callback))
        return None

    def run_due(self) -> None:
        due = sorted(self.calls, key=lambda call: call[0])
        self.calls = []
        for when, callback in due:
            self.now = max(self.now, when)
            callback()


def _reclaimer(loop: FakeLoop, trims: list[float], works: bool = True) -> MemoryReclaimer:
    def release() -> bool:
        trims.append(loop.now)
        return works

    return MemoryReclaimer(loop, delay=0.2, interval=2.0, release=release, clock=lambda: loop.now)


def test_a_burst_of_requests_costs_one_trim() -> None:
    """Requests until the trim runs share it; it runs ``delay`` after the first."""
    loop, trims = FakeLoop(), list[float]()
    reclaimer = _reclaimer(loop, trims)
    for _ in range(50):
        reclaimer.request()
    assert len(loop.calls) == 1
    loop.run_due()
    assert trims == [pytest.approx(0.2)]
    assert reclaimer.count == 1


def test_trims_are_at_least_an_interval_apart() -> None:
    """A request right after a trim waits for the interval; a late one only for the delay."""
    loop, trims = FakeLoop(), list[float]()
    reclaimer = _reclaimer(loop, trims)
    reclaimer.request()
    loop.run_due()
    reclaimer.request()
    loop.run_due()
    assert trims == [pytest.approx(0.2), pytest.approx(2.2)]
    loop.now = 10.0
    reclaimer.request()
    loop.run_due()
    assert trims[-1] == pytest.approx(10.2)
    assert reclaimer.count == 3


def test_no_trim_is_counted_where_the_allocator_has_none() -> None:
    """Without ``malloc_trim`` (musl, macOS) nothing is counted or logged."""
    loop, trims = FakeLoop(), list[float]()
    reclaimer = _reclaimer(loop, trims, works=False)
    reclaimer.request()
    loop.run_due()
    assert len(trims) == 1
    assert reclaimer.count == 0


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_release_free_memory_trims_on_glibc() -> None:
    """On glibc the trim is available and runs."""
    assert release_free_memory() is True


def test_short_urls_are_cached_long_ones_are_not() -> None:
    """The URL cache counts entries; long URLs bypass it so 512 of them cannot pin memory."""
    short = "http://example.com/a"
    assert parse_url(short) is parse_url(short)
    long = "http://example.com/" + "a" * CACHED_URL_CHARS
    first, second = parse_url(long), parse_url(long)
    assert first == second
    assert first is not second
