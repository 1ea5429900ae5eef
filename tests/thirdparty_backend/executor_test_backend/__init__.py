"""A third-party sandbox plugin used by the tests (inert unless EXECUTOR_TEST_BACKEND is set).

With ``EXECUTOR_TEST_BACKEND=select`` it selects its own backend, which wraps the first-party
Linux backend's plan and adds ``EXECUTOR_TEST_BACKEND_PLANNED=1`` to the command's
environment: commands stay sandboxed for real, and a test can see this plugin planned them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from executor.sandbox import (
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
        from executor_linux.backend import LinuxBackend

        self.inner = LinuxBackend()

    def probe(self, host: HostInfo) -> BackendStatus:
        """Available when activated and when the wrapped backend is."""
        if not _active():
            return BackendStatus(
                available=False, reason="test fixture; set EXECUTOR_TEST_BACKEND=select"
            )
        status = self.inner.probe(host)
        return replace(status, details={**status.details, "wraps": self.inner.name})

    def prepare(self, rules: RuleSet, command: Command) -> LaunchPlan:
        """The wrapped backend's plan, plus the marker."""
        plan = self.inner.prepare(rules, command)
        return replace(plan, env={**plan.env, MARKER: "1"})


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
