"""Every hook a sandbox plugin may implement. Plugins are found through the entry-point
group ``executor.sandbox`` (the first-party backends register through it too).

Naming: ``executor_<verb>_<noun>``. Built-in defaults are ``trylast`` so any plugin can
override them. A hook that picks one answer is ``firstresult`` and says so. "No sandbox" is
never a silent fallback: selection returns a backend or None, and None refuses the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from executor.sandbox.api import BackendStatus, Command, HostInfo, LaunchPlan, SandboxBackend
    from executor.sandbox.rules import RuleSet

PROJECT = "executor"
#: The entry-point group through which every sandbox plugin is discovered.
ENTRY_POINT_GROUP = "executor.sandbox"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def executor_sandbox_backends(host: HostInfo) -> Sequence[SandboxBackend]:
    """Contribute sandbox backends.

    Called once when the plugin manager is set up. Return the backend objects this plugin
    provides (usually one), available on ``host`` or not: unavailable backends still appear
    in ``executor backends`` with the reason they cannot run here.
    """


@hookspec(firstresult=True)
def executor_select_backend(
    rules: RuleSet, host: HostInfo, candidates: Sequence[tuple[SandboxBackend, BackendStatus]]
) -> SandboxBackend | None:
    """Choose the backend that enforces ``rules`` on ``host``.

    ``candidates`` pairs every registered backend with its status on this host. Stops at the
    first non-None result. The built-in selector (``trylast``) picks the first available
    backend that enforces every feature ``rules.needs``, else the first available one (so
    that the refusal can name what is missing). Return None to pass; raise
    ``SandboxUnavailable`` to refuse the request outright.
    """


@hookspec(firstresult=True)
def executor_prepare_launch(
    backend: SandboxBackend, rules: RuleSet, command: Command
) -> LaunchPlan | None:
    """Turn ``command`` into a ``LaunchPlan`` under ``rules``, immediately before spawn.

    Stops at the first non-None result. The built-in implementation (``trylast``) calls
    ``backend.prepare(rules, command)``. A plugin may wrap or replace plans (e.g. to add
    auditing); raise ``SandboxUnavailable`` to refuse the launch.
    """


@hookspec
def executor_launch_planned(plan: LaunchPlan, rules: RuleSet, command: Command) -> None:
    """Observe every sandboxed launch that is about to happen (logging, auditing).

    Called after a plan was made and before the command is spawned. Must not modify anything.
    """
