"""The daemon's confinement plans the next launch of a request from the same rule set object
while its memo holds (``confinement._Derived``), and from fresh rules once the host changed.

The backend here records the rule sets it is asked to plan; every plan is compared with what
a fresh confinement (nothing remembered) plans for the same request on the same host.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from executor.netproxy.session import SessionNetwork
from executor.process.confinement import SandboxConfinement
from executor.protocol.intent import parse_sandbox
from executor.protocol.messages import SandboxType
from executor.sandbox import Command, Feature, hookimpl
from executor.sandbox.api import BackendStatus, HostInfo, LaunchPlan, SandboxBackend
from executor.sandbox.limits import ResourceLimits, default_limits
from executor.sandbox.manager import SandboxManager, get_plugin_manager
from executor.sandbox.rules import RuleSet
from tests.sandbox.fakehost import FakeHost
from tests.sandbox.wire import REAL_CLIENT_SANDBOX, context, managed, special

WORKSPACE = "/R/workspace"
COMMAND = Command(
    executable="/bin/true", argv=("true",), env={"PATH": "/usr/bin:/bin"}, cwd=WORKSPACE, tty=False
)


class Recording:
    """A backend that enforces everything and remembers every rule set it planned."""

    name = "recording"

    def __init__(self) -> None:
        self.planned: list[RuleSet] = []

    def probe(self, host: HostInfo) -> BackendStatus:
        return BackendStatus(available=True, features=frozenset(Feature))

    def prepare(self, rules: RuleSet, command: Command) -> LaunchPlan:
        self.planned.append(rules)
        return LaunchPlan(
            sandbox_type=SandboxType.LINUX_SECCOMP,
            executable=command.executable,
            argv=command.argv,
        )


def _confinement(host: FakeHost, limits: ResourceLimits | None = None) -> tuple[Any, Recording]:
    backend = Recording()

    class Plugin:
        @hookimpl
        def executor_sandbox_backends(self, host: HostInfo) -> Sequence[SandboxBackend]:
            return [backend]

    pm = get_plugin_manager(
        blocked=("linux", "macos", "windows", "testbackend"), plugins=[Plugin()]
    )
    return SandboxConfinement(SandboxManager(pm, HostInfo.current()), host, limits), backend


def _plan(
    confinement: SandboxConfinement,
    backend: Recording,
    sandbox: dict[str, Any] = REAL_CLIENT_SANDBOX,
    session: str | None = None,
) -> RuleSet:
    network = None if session is None else SessionNetwork(session, private_namespace=False)
    asyncio.run(
        confinement.enforce(parse_sandbox(sandbox), COMMAND, label="reuse", network=network)
    )
    return backend.planned[-1]


def _fresh(host: FakeHost, limits: ResourceLimits | None = None, **kwargs: Any) -> RuleSet:
    return _plan(*_confinement(host, limits), **kwargs)


OTHER_LIMITS = ResourceLimits(processes=64, memory=128 << 20)


@pytest.mark.parametrize("limits", [None, OTHER_LIMITS])
def test_the_next_launch_on_an_unchanged_host_gets_the_same_rule_set(
    limits: ResourceLimits | None,
) -> None:
    host = FakeHost(dirs=[WORKSPACE])
    confinement, backend = _confinement(host, limits)
    first = _plan(confinement, backend)
    assert first == _fresh(host, limits)
    assert first.limits == (limits or default_limits())
    assert _plan(confinement, backend) is first
    assert "needs" in vars(first)  # worked out once, kept on the object


def _gitdir_inside(host: FakeHost) -> None:
    host.files.add(f"{WORKSPACE}/.git")
    host.gitdirs[f"{WORKSPACE}/.git"] = f"{WORKSPACE}/modules/x.git"
    host.dirs |= {f"{WORKSPACE}/modules", f"{WORKSPACE}/modules/x.git"}


def _symlink_swapped_in(host: FakeHost) -> None:
    host.dirs.add(f"{WORKSPACE}/elsewhere")
    host.symlinks[f"{WORKSPACE}/.codex"] = f"{WORKSPACE}/elsewhere"


@pytest.mark.parametrize("limits", [None, OTHER_LIMITS])
@pytest.mark.parametrize("change", [_gitdir_inside, _symlink_swapped_in])
def test_a_host_changed_between_two_launches_gets_what_a_fresh_confinement_plans(
    limits: ResourceLimits | None, change: Any
) -> None:
    host = FakeHost(dirs=[WORKSPACE])
    confinement, backend = _confinement(host, limits)
    before = _plan(confinement, backend)
    change(host)
    expected = _fresh(host, limits)
    assert expected != before
    after = _plan(confinement, backend)
    assert after == expected and after is not before
    assert _plan(confinement, backend) is after


def test_the_network_each_launch_asks_for_is_its_own() -> None:
    """Another session (loopback scope) or another network mode is another rule set."""
    host = FakeHost(dirs=[WORKSPACE])
    confinement, backend = _confinement(host)
    enabled = context(
        managed(special("root", "read"), special("project_roots", "write"), network="enabled"),
        cwd=WORKSPACE,
        roots=(WORKSPACE,),
    )
    plans = {
        (sandbox_name, session): _plan(confinement, backend, sandbox, session)
        for sandbox_name, sandbox in (("restricted", REAL_CLIENT_SANDBOX), ("enabled", enabled))
        for session in (None, "s1", "s2")
    }
    for (sandbox_name, session), rules in plans.items():
        sandbox = REAL_CLIENT_SANDBOX if sandbox_name == "restricted" else enabled
        assert rules == _fresh(host, sandbox=sandbox, session=session)
        assert _plan(confinement, backend, sandbox, session) is rules
    assert plans["enabled", "s1"].network_scope == "s1"
    assert plans["enabled", "s2"].network_scope == "s2"
