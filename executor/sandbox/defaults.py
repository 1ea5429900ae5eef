"""Built-in hook implementations; all ``trylast`` so that any plugin can override them."""

from __future__ import annotations

from collections.abc import Sequence

from executor.sandbox.api import BackendStatus, Command, HostInfo, LaunchPlan, SandboxBackend
from executor.sandbox.hookspecs import hookimpl
from executor.sandbox.rules import RuleSet


@hookimpl(trylast=True)
def executor_select_backend(
    rules: RuleSet, host: HostInfo, candidates: Sequence[tuple[SandboxBackend, BackendStatus]]
) -> SandboxBackend | None:
    """First available backend that enforces everything ``rules`` needs, else first available."""
    available = [(backend, status) for backend, status in candidates if status.available]
    for backend, status in available:
        if rules.needs <= status.features:
            return backend
    return available[0][0] if available else None


@hookimpl(trylast=True)
def executor_prepare_launch(
    backend: SandboxBackend, rules: RuleSet, command: Command
) -> LaunchPlan | None:
    """Ask the selected backend for its plan."""
    return backend.prepare(rules, command)
