"""Shared fixtures: a real daemon on loopback, connected clients, a workspace directory."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.client import WsClient
from tests.support.daemon import RunningDaemon

# A skipped `enforcement` test fails when EXECUTOR_REQUIRE_ENFORCEMENT is set (CI).
pytest_plugins = ("tests.support.enforcement",)

# The third-party backend fixture is installed (by `make test`) into this directory, so its
# entry points are discovered for real, and never by the daemon `make run` starts.
TEST_PLUGINS = Path(__file__).parent / "build" / "test-plugins"
if TEST_PLUGINS.is_dir():
    sys.path.insert(0, str(TEST_PLUGINS))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(TEST_PLUGINS), os.environ.get("PYTHONPATH")])
    )

# Hypothesis draws fresh examples on every developer run, which is how it keeps finding new
# cases. On CI (`.ci/run` sets HYPOTHESIS_PROFILE=ci) the examples are derandomized, so a
# change lands or not on its own merits, never on a lucky draw; a failure found locally
# becomes an @example in its test.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def shared_daemon() -> Iterator[RunningDaemon]:
    """One daemon for tests that only need a working server (default options)."""
    daemon = RunningDaemon()
    yield daemon
    daemon.stop()


@pytest.fixture
def daemon_factory() -> Iterator[type[RunningDaemon]]:
    """Start daemons with custom options; each is stopped after the test."""
    started: list[RunningDaemon] = []

    class Factory(RunningDaemon):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            started.append(self)

    yield Factory
    for daemon in started:
        daemon.stop()


@pytest.fixture
def client(shared_daemon: RunningDaemon) -> Iterator[WsClient]:
    """A connection to the shared daemon that has completed the handshake."""
    connection = shared_daemon.session()
    yield connection
    connection.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace directory (resolved, so paths compare equal to the daemon's)."""
    path = tmp_path.resolve() / "workspace"
    path.mkdir()
    return path
