"""Registers the Windows backend: on Windows it refuses every sandboxed launch before spawn.

The executor has no Windows enforcement (restricted tokens, MXC). A request carrying a sandbox
is answered ``-32602 sandbox intent cannot be enforced on this executor: …`` — the reference's
wording, which clients already handle — and nothing runs. Requests without a sandbox still run.
"""

from __future__ import annotations

from collections.abc import Sequence

from executor.sandbox import (
    BackendStatus,
    Command,
    Feature,
    HostInfo,
    LaunchPlan,
    RuleSet,
    SandboxBackend,
    SandboxUnavailable,
    hookimpl,
)

REASON = "sandboxed remote process launch is not supported on Windows"


class WindowsBackend:
    """Selected on Windows so that the refusal names the real reason; enforces nothing."""

    name = "windows"

    def probe(self, host: HostInfo) -> BackendStatus:
        """Present on Windows (to refuse precisely), absent elsewhere."""
        if host.platform != "win32":
            return BackendStatus(
                available=False, reason=f"requires Windows (this host is {host.platform})"
            )
        return BackendStatus(
            available=True,
            features=frozenset(),
            missing={feature: REASON for feature in Feature},
            details={"enforcement": "none: every sandboxed launch is refused"},
        )

    def prepare(self, rules: RuleSet, command: Command) -> LaunchPlan:
        """Always refuses: there is no Windows sandbox here."""
        raise SandboxUnavailable(REASON)


@hookimpl
def executor_sandbox_backends(host: HostInfo) -> Sequence[SandboxBackend]:
    """The Windows backend."""
    return [WindowsBackend()]
