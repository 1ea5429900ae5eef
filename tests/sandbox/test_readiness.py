"""What the daemon logs at startup about enforcement: ``SandboxManager.readiness``."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from executor.errors import ConfigError
from executor.sandbox import hookimpl
from executor.sandbox.api import BackendStatus, HostInfo, SandboxBackend
from executor.sandbox.manager import SandboxManager, get_plugin_manager
from executor.sandbox.rules import Feature

FIRST_PARTY = ("linux", "macos", "windows", "testbackend")


class Fake:
    """A backend whose probe answers ``status`` (or raises ``error``)."""

    def __init__(self, name: str, status: BackendStatus | None, error: Exception | None = None):
        self.name = name
        self.status = status
        self.error = error

    def probe(self, host: HostInfo) -> BackendStatus:
        if self.error is not None:
            raise self.error
        assert self.status is not None
        return self.status

    def prepare(self, rules: object, command: object) -> object:
        raise NotImplementedError


def manager(*backends: Fake) -> SandboxManager:
    class Plugin:
        @hookimpl
        def executor_sandbox_backends(self, host: HostInfo) -> Sequence[SandboxBackend]:
            return list(backends)  # type: ignore[arg-type]

    pm = get_plugin_manager(blocked=FIRST_PARTY, plugins=[Plugin()])
    return SandboxManager(pm, HostInfo.current())


def test_nothing_available_is_a_warning_with_every_reason() -> None:
    [(level, message)] = manager(
        Fake("a", BackendStatus(available=False, reason="needs a unicorn"))
    ).readiness()
    assert level == logging.WARNING
    assert message.startswith("no sandbox backend can enforce anything on this host (a: needs a")
    assert "blocked plugins: linux, macos, windows, testbackend" in message
    assert "every request that asks for a sandbox will be refused" in message


def test_a_feature_no_available_backend_enforces_is_a_warning() -> None:
    partial = BackendStatus(
        available=True,
        features=frozenset({Feature.NETWORK_BLOCK}),
        missing={Feature.CARVE_OUT: "no namespaces here"},
    )
    records = manager(Fake("partial", partial)).readiness()
    assert (logging.INFO, "sandbox backend partial enforces network-block") in records
    warnings = [message for level, message in records if level == logging.WARNING]
    assert warnings == [
        "no sandbox backend here can enforce carve-out (no namespaces here): requests that need"
        " it will be refused; run `executor doctor` for details"
    ]


def test_a_feature_another_backend_enforces_is_no_warning() -> None:
    partial = BackendStatus(
        available=True,
        features=frozenset({Feature.NETWORK_BLOCK}),
        missing={Feature.CARVE_OUT: "no namespaces here"},
    )
    full = BackendStatus(available=True, features=frozenset(Feature))
    records = manager(Fake("partial", partial), Fake("full", full)).readiness()
    assert all(level != logging.WARNING for level, _ in records)


def test_a_probe_that_refuses_with_a_reason_makes_its_backend_unavailable() -> None:
    records = manager(Fake("picky", None, ConfigError("FOO='x' is not understood"))).readiness()
    [(level, message)] = records
    assert level == logging.WARNING
    assert "picky: FOO='x' is not understood" in message
