"""The plugin manager: hookspecs, entry-point discovery, blocking, backend selection."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from functools import cached_property

import pluggy

from executor.errors import SandboxUnavailable
from executor.sandbox import defaults, hookspecs
from executor.sandbox.api import BackendStatus, Command, HostInfo, LaunchPlan, SandboxBackend
from executor.sandbox.rules import RuleSet

__all__ = ["BLOCK_ENV", "SandboxManager", "get_plugin_manager"]

log = logging.getLogger("executor.sandbox")

#: Comma-separated plugin names that must not be loaded (e.g. ``EXECUTOR_BLOCK_PLUGINS=macos``).
BLOCK_ENV = "EXECUTOR_BLOCK_PLUGINS"


def blocked_from_env(environ: os._Environ[str] | dict[str, str] = os.environ) -> list[str]:
    """Plugin names blocked through ``EXECUTOR_BLOCK_PLUGINS``."""
    return [name.strip() for name in environ.get(BLOCK_ENV, "").split(",") if name.strip()]


def get_plugin_manager(
    blocked: Iterable[str] = (), plugins: Sequence[object] = ()
) -> pluggy.PluginManager:
    """A plugin manager with every hookspec, the built-in defaults and all discovered plugins.

    Plugins come from the ``executor.sandbox`` entry-point group (the first-party backends
    too), plus ``plugins`` registered directly (tests). Names in ``blocked`` are never loaded.
    Misspelled hook implementations fail here, through ``check_pending()``.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(defaults, name="executor-defaults")
    for name in blocked:
        pm.set_blocked(name)
    pm.load_setuptools_entrypoints(hookspecs.ENTRY_POINT_GROUP)
    for plugin in plugins:
        pm.register(plugin)
    pm.check_pending()
    return pm


class SandboxManager:
    """Backends known to the plugin manager, their status here, and the launch path."""

    def __init__(self, pm: pluggy.PluginManager, host: HostInfo | None = None) -> None:
        self.pm = pm
        self.host = host or HostInfo.current()

    @cached_property
    def candidates(self) -> list[tuple[SandboxBackend, BackendStatus]]:
        """Every registered backend with its status on this host (probed once)."""
        found: list[tuple[SandboxBackend, BackendStatus]] = []
        for contributed in self.pm.hook.executor_sandbox_backends(host=self.host):
            for backend in contributed:
                try:
                    status = backend.probe(self.host)
                except Exception as exc:  # a broken plugin must not take the daemon down
                    log.exception(
                        "probing sandbox backend %s failed", getattr(backend, "name", backend)
                    )
                    status = BackendStatus(available=False, reason=f"probe failed: {exc}")
                found.append((backend, status))
        return found

    def status_of(self, backend: SandboxBackend) -> BackendStatus:
        """The probed status of ``backend``."""
        for candidate, status in self.candidates:
            if candidate is backend:
                return status
        return BackendStatus(available=False, reason="not registered")

    def select(self, rules: RuleSet) -> SandboxBackend:
        """The backend for ``rules``, or ``SandboxUnavailable`` naming what is missing."""
        backend: SandboxBackend | None = self.pm.hook.executor_select_backend(
            rules=rules, host=self.host, candidates=self.candidates
        )
        if backend is None:
            reasons = [f"{b.name}: {s.reason}" for b, s in self.candidates if not s.available]
            detail = "; ".join(reasons) if reasons else "no sandbox backend is installed"
            raise SandboxUnavailable(f"no sandbox backend is available on this host ({detail})")
        status = self.status_of(backend)
        missing = sorted(rules.needs - status.features)
        if missing:
            why = "; ".join(
                f"{feature}: {status.missing.get(feature, 'not supported')}" for feature in missing
            )
            raise SandboxUnavailable(f"the {backend.name} backend cannot enforce {why}")
        return backend

    def prepare(self, backend: SandboxBackend, rules: RuleSet, command: Command) -> LaunchPlan:
        """The launch plan for ``command`` (the ``executor_prepare_launch`` hook)."""
        plan: LaunchPlan | None = self.pm.hook.executor_prepare_launch(
            backend=backend, rules=rules, command=command
        )
        if plan is None:
            raise SandboxUnavailable(f"the {backend.name} backend produced no launch plan")
        self.pm.hook.executor_launch_planned(plan=plan, rules=rules, command=command)
        return plan
