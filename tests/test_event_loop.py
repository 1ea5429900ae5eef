"""The daemon's event loop: uvloop's when installed, asyncio's when asked for (or without it)."""

from __future__ import annotations

import asyncio

import pytest

from executor.daemon import EVENT_LOOP_ENV, run_event_loop


async def _loop_module() -> int:
    return 1 if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else 0


def test_uvloop_runs_the_daemon_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the fast extra installed, the daemon's loop is uvloop's."""
    pytest.importorskip("uvloop")
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    assert run_event_loop(_loop_module()) == 1


def test_asyncio_is_kept_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """``EXECUTOR_EVENT_LOOP=asyncio`` keeps asyncio's own loop."""
    monkeypatch.setenv(EVENT_LOOP_ENV, "asyncio")
    assert run_event_loop(_loop_module()) == 0
