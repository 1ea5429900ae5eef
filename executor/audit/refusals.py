"""Logging of refused requests that a hostile peer cannot turn into a flood.

Every refusal (an HTTP error answer, a WebSocket protocol error) used to log one line: a
client refusing to behave could fill the log, at ~15 µs per line. Here each reason logs its
first ``burst`` refusals in a window of ``interval`` seconds as before; the rest are only
counted, and one summary line at the end of the window says how many went unlogged.
Lines may carry audit fields (``executor.audit``); the summary line carries its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

__all__ = ["DEFAULT_BURST", "DEFAULT_INTERVAL", "RefusalLog"]

#: Refusals logged one by one per reason and window.
DEFAULT_BURST: Final = 10
#: Seconds of a window.
DEFAULT_INTERVAL: Final = 60.0


class _Handle(Protocol):
    def cancel(self) -> None: ...


Scheduler = Callable[[float, Callable[[], None]], _Handle]


def _call_later(delay: float, callback: Callable[[], None]) -> _Handle:
    return asyncio.get_running_loop().call_later(delay, callback)


class _Window:
    __slots__ = ("level", "logged", "start", "suppressed", "timer")

    def __init__(self, start: float, level: int) -> None:
        self.start = start
        self.level = level
        self.logged = 0
        self.suppressed = 0
        self.timer: _Handle | None = None


class RefusalLog:
    """At most ``burst`` lines per reason per ``interval`` seconds, then one summary line.

    ``reason`` is a short fixed key ("http 400", "protocol 1002"), never text the peer
    chose: the keys are the bound on memory. ``call_later`` schedules the summary (the
    running event loop's by default; tests pass their own, with ``clock``).
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        burst: int = DEFAULT_BURST,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        call_later: Scheduler = _call_later,
    ) -> None:
        self._logger = logger
        self.burst = burst
        self.interval = interval
        self._clock = clock
        self._call_later = call_later
        self._windows: dict[str, _Window] = {}

    def refused(
        self,
        reason: str,
        level: int,
        message: str,
        *args: object,
        audit: dict[str, Any] | None = None,
    ) -> None:
        """Log ``message % args`` (with ``audit`` fields) unless ``reason`` already had its
        burst in this window."""
        now = self._clock()
        window = self._windows.get(reason)
        if window is not None and now - window.start >= self.interval:
            self._summarize(reason)  # its timer is late (a busy loop): close it here
            window = None
        if window is None:
            window = self._windows[reason] = _Window(now, level)
        if window.logged < self.burst:
            window.logged += 1
            if audit is None:
                self._logger.log(level, message, *args)
            else:
                self._logger.log(level, message, *args, extra={"audit": audit})
            return
        window.suppressed += 1
        if window.timer is None:
            delay = window.start + self.interval - now
            window.timer = self._call_later(delay, lambda: self._summarize(reason))

    def _summarize(self, reason: str) -> None:
        window = self._windows.pop(reason, None)
        if window is None:
            return
        if window.timer is not None:
            window.timer.cancel()
        if window.suppressed:
            self._logger.log(
                window.level,
                "%d more refused (%s) in the last %.0f s, not logged one by one",
                window.suppressed,
                reason,
                self.interval,
                extra={
                    "audit": {"event": "suppressed", "reason": reason, "count": window.suppressed}
                },
            )
