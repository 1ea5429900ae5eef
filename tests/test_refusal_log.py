"""The refusal log (executor.audit.refusals): a burst per reason, then a summary line."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from executor.audit.refusals import RefusalLog


class FakeTimers:
    """A clock and a ``call_later`` that run nothing until ``advance`` passes their time."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.pending: list[tuple[float, Callable[[], None], Handle]] = []

    def call_later(self, delay: float, callback: Callable[[], None]) -> Handle:
        handle = Handle()
        self.pending.append((self.now + delay, callback, handle))
        return handle

    def advance(self, seconds: float) -> None:
        self.now += seconds
        due = [entry for entry in self.pending if entry[0] <= self.now]
        self.pending = [entry for entry in self.pending if entry[0] > self.now]
        for _, callback, handle in due:
            if not handle.cancelled:
                callback()


class Handle:
    """A timer handle that records its cancellation."""

    cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


@pytest.fixture
def timers() -> FakeTimers:
    return FakeTimers()


def refusal_log(timers: FakeTimers) -> RefusalLog:
    return RefusalLog(
        logging.getLogger("test.refusals"),
        burst=3,
        interval=60,
        clock=lambda: timers.now,
        call_later=timers.call_later,
    )


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "test.refusals"]


def test_a_burst_is_logged_then_counted_then_summarized(
    timers: FakeTimers, caplog: pytest.LogCaptureFixture
) -> None:
    """The first refusals of a reason are logged; the rest become one line at window end."""
    caplog.set_level(logging.INFO, "test.refusals")
    log = refusal_log(timers)
    for index in range(10):
        log.refused("http 400", logging.INFO, "refused %d", index)
        timers.advance(1)
    assert messages(caplog) == ["refused 0", "refused 1", "refused 2"]
    timers.advance(50)  # the window opened 60 s ago
    assert messages(caplog)[3:] == [
        "7 more refused (http 400) in the last 60 s, not logged one by one"
    ]
    log.refused("http 400", logging.INFO, "refused %d", 10)  # a new window logs again
    assert messages(caplog)[-1] == "refused 10"


def test_reasons_have_their_own_bursts(
    timers: FakeTimers, caplog: pytest.LogCaptureFixture
) -> None:
    """A flood of one reason does not hide the first refusals of another."""
    caplog.set_level(logging.INFO, "test.refusals")
    log = refusal_log(timers)
    for _ in range(5):
        log.refused("protocol 1002", logging.INFO, "protocol error")
    log.refused("http 401", logging.WARNING, "refused a WebSocket upgrade")
    assert messages(caplog) == ["protocol error"] * 3 + ["refused a WebSocket upgrade"]
    assert caplog.records[-1].levelno == logging.WARNING


def test_no_summary_when_nothing_was_suppressed(
    timers: FakeTimers, caplog: pytest.LogCaptureFixture
) -> None:
    """A window that stayed within its burst ends silently (and schedules no timer)."""
    caplog.set_level(logging.INFO, "test.refusals")
    log = refusal_log(timers)
    log.refused("http 404", logging.INFO, "not found")
    timers.advance(120)
    assert messages(caplog) == ["not found"]
    assert timers.pending == []


def test_a_late_timer_is_caught_up_by_the_next_refusal(
    timers: FakeTimers, caplog: pytest.LogCaptureFixture
) -> None:
    """If the summary's timer has not run by the window's end, the next refusal writes it."""
    caplog.set_level(logging.INFO, "test.refusals")
    log = refusal_log(timers)
    for _ in range(4):
        log.refused("http 431", logging.INFO, "too large")
    timers.now += 61  # time passes, the timer does not run (a blocked loop)
    log.refused("http 431", logging.INFO, "too large")
    assert messages(caplog) == ["too large"] * 3 + [
        "1 more refused (http 431) in the last 60 s, not logged one by one",
        "too large",
    ]
    timers.advance(0)
    assert len(messages(caplog)) == 5  # the cancelled timer adds nothing
