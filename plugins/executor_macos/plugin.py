"""Registers the macOS backend (work in progress: contributes nothing yet)."""

from __future__ import annotations

from collections.abc import Sequence

from executor.sandbox import HostInfo, SandboxBackend, hookimpl


@hookimpl
def executor_sandbox_backends(host: HostInfo) -> Sequence[SandboxBackend]:
    """The macOS backend."""
    return []
