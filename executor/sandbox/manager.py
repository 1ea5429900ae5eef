"""The plugin manager: hookspecs, entry-point discovery, blocking, backend selection."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from importlib import metadata

import pluggy

from executor.errors import ExecutorError, InternalError, SandboxUnavailable
from executor.sandbox import defaults, hookspecs
from executor.sandbox.api import BackendStatus, Command, HostInfo, LaunchPlan, SandboxBackend
from executor.sandbox.rules import Feature, RuleSet

__all__ = [
    "BLOCK_ENV",
    "BrokenPlugin",
    "SandboxManager",
    "broken_plugin_message",
    "get_plugin_manager",
]

log = logging.getLogger("executor.sandbox")

#: Comma-separated plugin names that must not be loaded (e.g. ``EXECUTOR_BLOCK_PLUGINS=macos``).
BLOCK_ENV = "EXECUTOR_BLOCK_PLUGINS"


def blocked_from_env(environ: os._Environ[str] | dict[str, str] = os.environ) -> list[str]:
    """Plugin names blocked through ``EXECUTOR_BLOCK_PLUGINS``."""
    return [name.strip() for name in environ.get(BLOCK_ENV, "").split(",") if name.strip()]


@dataclass(frozen=True)
class BrokenPlugin:
    """A discovered plugin that failed to import or register, and the line that says so."""

    name: str
    module: str
    message: str


def get_plugin_manager(
    blocked: Iterable[str] = (),
    plugins: Sequence[object] = (),
    broken: list[BrokenPlugin] | None = None,
) -> pluggy.PluginManager:
    """A plugin manager with every hookspec, the built-in defaults and all discovered plugins.

    Plugins come from the ``executor.sandbox`` entry-point group (the first-party backends
    too), plus ``plugins`` registered directly (tests). Names in ``blocked`` are never loaded.
    Misspelled hook implementations fail here, through ``check_pending()``.

    A discovered plugin that fails to import or to register stops everything with one line
    naming it and how to block it (``InternalError``), rather than running without it: it
    may be a selector or a launch hook the operator relies on to refuse or audit launches,
    and a daemon silently missing that would run what it was meant to stop. Only diagnosis
    (``backends``, ``doctor``) passes ``broken``: a failing plugin is then recorded there and
    left out, so that the report shows it next to everything else, and runs nothing.
    """
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    pm.register(defaults, name="executor-defaults")
    for name in blocked:
        pm.set_blocked(name)
    _load_entry_points(pm, broken)
    for plugin in plugins:
        pm.register(plugin)
    pm.check_pending()
    return pm


def _load_entry_points(pm: pluggy.PluginManager, broken: list[BrokenPlugin] | None) -> None:
    """``load_setuptools_entrypoints``, one plugin at a time, naming the one that fails."""
    for entry in metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP):
        if pm.get_plugin(entry.name) is not None or pm.is_blocked(entry.name):
            continue
        try:
            pm.register(entry.load(), name=entry.name)
            # Only this plugin's hooks can be pending: every earlier one passed this check.
            pm.check_pending()
        except Exception as exc:  # whatever a plugin's import runs may raise anything
            if pm.get_plugin(entry.name) is not None:
                pm.unregister(name=entry.name)
            message = broken_plugin_message(entry.name, entry.value, exc)
            if broken is None:
                raise InternalError(message) from None
            broken.append(BrokenPlugin(entry.name, entry.value, message))


def broken_plugin_message(name: str, module: str, exc: BaseException) -> str:
    """One line: which plugin failed, why, and how to run without it."""
    why = " ".join(f"{type(exc).__name__}: {exc}".split())
    if len(why) > 300:
        why = why[:297] + "..."
    return (
        f"sandbox plugin {name!r} ({module}) failed to load: {why}; fix or uninstall it, or"
        f" block it with {BLOCK_ENV}={name} (serve: --block-plugin {name})"
    )


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
                except ExecutorError as exc:  # a refusal with a reason (a bad setting, say)
                    name = getattr(backend, "name", backend)
                    log.error("sandbox backend %s is unavailable: %s", name, exc.message)
                    status = BackendStatus(available=False, reason=exc.message)
                except Exception as exc:  # a broken plugin must not take the daemon down
                    log.exception(
                        "probing sandbox backend %s failed", getattr(backend, "name", backend)
                    )
                    status = BackendStatus(available=False, reason=f"probe failed: {exc}")
                found.append((backend, status))
        return found

    def enforces(self, feature: Feature) -> bool:
        """Whether some available backend enforces ``feature`` here."""
        return any(status.available and feature in status.features for _, status in self.candidates)

    def readiness(self) -> list[tuple[int, str]]:
        """What ``executor doctor`` would say about enforcement here, as log records
        (level, message): a warning when no backend is available, or when some feature no
        available backend enforces (requests that need it are refused); else what is."""
        available = [(b, s) for b, s in self.candidates if s.available]
        unavailable = [f"{b.name}: {s.reason}" for b, s in self.candidates if not s.available]
        blocked = [name for name, plugin in self.pm.list_name_plugin() if plugin is None]
        if blocked:
            unavailable.append(f"blocked plugins: {', '.join(blocked)}")
        if not available:
            why = "; ".join(unavailable) or "no sandbox backend is installed"
            return [
                (
                    logging.WARNING,
                    f"no sandbox backend can enforce anything on this host ({why}): every request"
                    " that asks for a sandbox will be refused; run `executor doctor` for details",
                )
            ]
        records = [
            (
                logging.INFO,
                f"sandbox backend {backend.name} enforces "
                + (", ".join(sorted(status.features)) or "nothing"),
            )
            for backend, status in available
        ]
        enforced: set[Feature] = set()
        for _, status in available:
            enforced |= status.features
        missing = {
            feature: reason
            for _, status in available
            for feature, reason in status.missing.items()
            if feature not in enforced
        }
        if missing:
            what = "; ".join(f"{feature} ({reason})" for feature, reason in sorted(missing.items()))
            records.append(
                (
                    logging.WARNING,
                    f"no sandbox backend here can enforce {what}: requests that need it will be"
                    " refused; run `executor doctor` for details",
                )
            )
        if unavailable:
            records.append((logging.DEBUG, "not in use: " + "; ".join(unavailable)))
        return records

    def log_readiness(self) -> None:
        """Log ``readiness()`` (the daemon does at startup)."""
        try:
            records = self.readiness()
        except Exception:  # a plugin's hook failed: say so, and keep serving (selection refuses)
            log.exception("probing the sandbox backends failed")
            return
        for level, message in records:
            log.log(level, "%s", message)

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
