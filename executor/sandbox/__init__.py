"""The sandbox plugin API: everything a third-party backend imports lives here.

A backend is an object with ``name``, ``probe(host)`` and ``prepare(rules, command)`` (see
``SandboxBackend``); a plugin module contributes it through the ``executor_sandbox_backends``
hook and is registered in the ``executor.sandbox`` entry-point group::

    # pyproject.toml of the plugin
    [project.entry-points."executor.sandbox"]
    mybackend = "my_backend.plugin"

    # my_backend/plugin.py
    from executor.sandbox import hookimpl

    @hookimpl
    def executor_sandbox_backends(host):
        return [MyBackend()]
"""

from __future__ import annotations

from executor.errors import SandboxUnavailable
from executor.protocol.intent import Access, NetworkMode, SandboxIntent
from executor.protocol.messages import SandboxType
from executor.sandbox.api import (
    BackendStatus,
    ChildSetup,
    Command,
    EnforcementReport,
    HostInfo,
    LaunchPlan,
    SandboxBackend,
)
from executor.sandbox.hookspecs import ENTRY_POINT_GROUP, hookimpl, hookspec
from executor.sandbox.host import minimal_paths
from executor.sandbox.identity import ByIdentity
from executor.sandbox.limits import ResourceLimits
from executor.sandbox.network import (
    NetworkAccess,
    NetworkPolicy,
    NetworkRoute,
    host_pattern_problem,
    pattern_matches,
)
from executor.sandbox.rules import (
    Feature,
    GlobClass,
    PathKind,
    PathRule,
    RuleOrigin,
    RuleSet,
    glob_class,
    is_within,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "Access",
    "BackendStatus",
    "ByIdentity",
    "ChildSetup",
    "Command",
    "EnforcementReport",
    "Feature",
    "GlobClass",
    "HostInfo",
    "LaunchPlan",
    "NetworkAccess",
    "NetworkMode",
    "NetworkPolicy",
    "NetworkRoute",
    "PathKind",
    "PathRule",
    "ResourceLimits",
    "RuleOrigin",
    "RuleSet",
    "SandboxBackend",
    "SandboxIntent",
    "SandboxType",
    "SandboxUnavailable",
    "glob_class",
    "hookimpl",
    "hookspec",
    "host_pattern_problem",
    "is_within",
    "minimal_paths",
    "pattern_matches",
]
