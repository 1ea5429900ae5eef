"""A third-party sandbox plugin used by the tests (inert unless EXECUTOR_TEST_BACKEND is set).

With ``EXECUTOR_TEST_BACKEND=select`` it selects its own backend, which wraps the plan of the
first available backend another registered plugin offers (the Linux one, here) and adds
``EXECUTOR_TEST_BACKEND_PLANNED=1`` to the command's environment: commands stay sandboxed for
real, and a test can see this plugin planned them. Like any third-party plugin it uses only
the plugin API: the other backend is found through its entry point and its hook, never by
importing that plugin's modules.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from importlib.metadata import entry_points

from executor.sandbox import (
    ENTRY_POINT_GROUP,
    BackendStatus,
    Command,
    HostInfo,
    LaunchPlan,
    RuleSet,
    SandboxBackend,
    hookimpl,
)

MARKER = "EXECUTOR_TEST_BACKEND_PLANNED"


def _active() -> bool:
    return os.environ.get("EXECUTOR_TEST_BACKEND") == "select"


class WrappingBackend:
    """Delegates enforcement to another backend and marks the command's environment."""

    name = "test-wrapper"

    def __init__(self) -> None:
        self.inner: SandboxBackend | None = None

    def probe(self, host: HostInfo) -> BackendStatus:
        """Available when activated and when a backend to wrap is."""
        if not _active():
            return BackendStatus(
                available=False, reason="test fixture; set EXECUTOR_TEST_BACKEND=select"
            )
        found = _other_backend(host)
        if found is None:
            return BackendStatus(available=False, reason="no other backend to wrap")
        self.inner, status = found
        return replace(status, details={**status.details, "wraps": self.inner.name})

    def prepare(self, rules: RuleSet, command: Command) -> LaunchPlan:
        """The wrapped backend's plan, plus the marker."""
        assert self.inner is not None, "prepare() before a successful probe()"
        plan = self.inner.prepare(rules, command)
        return replace(plan, env={**plan.env, MARKER: "1"})


def _other_backend(host: HostInfo) -> tuple[SandboxBackend, BackendStatus] | None:
    """The first available backend of another plugin, asked through its own hook."""
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        module = entry.load()
        if module.__name__ == __name__:
            continue
        for backend in module.executor_sandbox_backends(host=host):
            status = backend.probe(host)
            if status.available:
                return backend, status
    return None


BACKEND = WrappingBackend()


@hookimpl
def executor_sandbox_backends(host: HostInfo) -> Sequence[SandboxBackend]:
    """The wrapper (it reports itself unavailable unless activated)."""
    return [BACKEND]


@hookimpl(tryfirst=True)
def executor_select_backend(
    rules: RuleSet, host: HostInfo, candidates: Sequence[tuple[SandboxBackend, BackendStatus]]
) -> SandboxBackend | None:
    """When activated and available, select the wrapper ahead of everything else."""
    for backend, status in candidates:
        if backend is BACKEND and status.available:
            return BACKEND
    return None
