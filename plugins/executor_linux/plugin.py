"""Registers the Linux backend through the ``executor.sandbox`` entry-point group."""

from __future__ import annotations

from collections.abc import Sequence

from executor.sandbox import HostInfo, SandboxBackend, hookimpl
from executor_linux.backend import LinuxBackend


@hookimpl
def executor_sandbox_backends(host: HostInfo) -> Sequence[SandboxBackend]:
    """The Linux backend (it reports itself unavailable on other platforms)."""
    return [LinuxBackend(state_dir=host.state_dir)]
