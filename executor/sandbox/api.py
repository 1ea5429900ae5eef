"""The types a sandbox backend plugin works with (re-exported by ``executor.sandbox``)."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from executor.protocol.messages import SandboxType
from executor.sandbox.command import ChildSetup, Command
from executor.sandbox.host import state_directory
from executor.sandbox.rules import Feature, RuleSet

__all__ = [
    "BackendStatus",
    "ChildSetup",
    "Command",
    "EnforcementReport",
    "HostInfo",
    "LaunchPlan",
    "SandboxBackend",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class HostInfo:
    """Facts about this host every backend may need; backends probe their own details."""

    platform: str
    release: str
    machine: str
    uid: int
    #: The executor's private state directory (hidden from every sandbox), where a backend
    #: may keep what its launches need on the host. Default: ``EXECUTOR_STATE_DIR``, else
    #: under ``XDG_RUNTIME_DIR``, else under ``/tmp``; ``serve --state-dir`` overrides it.
    state_dir: str = field(default_factory=state_directory)

    @classmethod
    def current(cls, state_dir: str | None = None) -> HostInfo:
        """This host, for an executor whose state lives in ``state_dir``."""
        return cls(
            platform=sys.platform,
            release=platform.release(),
            machine=platform.machine(),
            uid=os.getuid(),
            state_dir=state_dir or state_directory(),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendStatus:
    """What a backend can do on this host."""

    available: bool
    #: Why the backend is unavailable (empty when available).
    reason: str = ""
    #: Features it enforces here.
    features: frozenset[Feature] = frozenset()
    #: Why a feature it knows is not enforceable here (feature -> reason).
    missing: Mapping[Feature, str] = field(default_factory=dict)
    #: Probe results worth showing (``executor backends``, ``executor doctor``).
    details: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class EnforcementReport:
    """What a launch will really enforce: the layers, in order, and their details."""

    layers: tuple[str, ...]
    details: Mapping[str, str] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for logs and ``executor run --verbose``."""
        extra = ", ".join(f"{key}={value}" for key, value in sorted(self.details.items()))
        return " + ".join(self.layers) + (f" ({extra})" if extra else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchPlan:
    """How to launch one sandboxed command; built immediately before spawn.

    ``argv``/``executable`` may wrap the command (``sandbox-exec … -- argv``); ``env`` is added
    to the command's environment; ``setup`` runs in the forked child before ``execve``;
    ``release`` is called once the process has closed (or failed to start).
    """

    sandbox_type: SandboxType
    executable: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    setup: ChildSetup | None = None
    report: EnforcementReport = field(default_factory=lambda: EnforcementReport(layers=()))
    release: Callable[[], None] | None = None


@runtime_checkable
class SandboxBackend(Protocol):
    """What a sandbox backend implements. Register instances with ``executor_sandbox_backends``."""

    #: Unique short name (``linux``, ``macos``, ...), used by ``--backend`` and in reports.
    name: str

    def probe(self, host: HostInfo) -> BackendStatus:
        """Whether the backend works on ``host`` and which features it enforces there."""
        ...

    def prepare(self, rules: RuleSet, command: Command) -> LaunchPlan:
        """Plan ``command`` under ``rules``; raise ``SandboxUnavailable`` to refuse it."""
        ...
