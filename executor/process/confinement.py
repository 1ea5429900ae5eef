"""The sandbox decision for a command: unsandboxed, confined by a backend, or refused.

Every ``process/start`` (and ``executor run``) takes this one path: refuse what we cannot
honour (``networkProxy``), materialize the typed intent for this host, choose the command's
network (``network.py``) and give it its place in the session's network (the proxy, relays,
the private namespace: ``executor.netproxy.session``), let the plugin manager select a
backend that enforces everything the rules need, and get its launch plan — all before
anything runs. Requests without ``sandbox`` run unsandboxed; ``permissions.type = disabled``
too, and reports ``sandboxType: none`` truthfully.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from executor.errors import InvalidParams, SandboxUnavailable
from executor.floor import PolicyFloor
from executor.netproxy.session import SessionNetwork
from executor.process.network import choose, network_rules
from executor.protocol.intent import SandboxIntent
from executor.protocol.messages import SandboxType, StartParams
from executor.sandbox.api import LaunchPlan
from executor.sandbox.command import Command
from executor.sandbox.hostview import HostView
from executor.sandbox.identity import ByIdentity
from executor.sandbox.limits import ResourceLimits, default_limits
from executor.sandbox.manager import SandboxManager
from executor.sandbox.memo import MaterializeMemo
from executor.sandbox.network import NetworkAccess, NetworkPolicy
from executor.sandbox.purpose import Purpose
from executor.sandbox.rules import RuleSet

__all__ = [
    "ConfinedCommand",
    "Confinement",
    "RefuseSandbox",
    "SandboxConfinement",
    "plan_command",
]

log = logging.getLogger("executor.sandbox")


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfinedCommand:
    """A command as it will be launched, after the sandbox decision."""

    request: Command
    sandbox_type: SandboxType
    sandboxed: bool
    linux: bool = True
    release: Callable[[], None] | None = None
    summary: str | None = None
    #: A denial observed while it ran (the proxy's refusals), for the exit's verdict.
    evidence: Callable[[], str | None] | None = None


class Confinement(Protocol):
    """Turns a start request into a launch: unsandboxed, sandboxed, or refused (raises)."""

    async def confine(
        self, params: StartParams, command: Command, network: SessionNetwork | None = None
    ) -> ConfinedCommand:
        """Decide how ``command`` runs (in ``network``, its session's); raise
        ``SandboxUnavailable`` to refuse it."""


class RefuseSandbox:
    """The confinement used when no sandbox support is configured: refuse every sandbox."""

    async def confine(
        self, params: StartParams, command: Command, network: SessionNetwork | None = None
    ) -> ConfinedCommand:
        """Run unsandboxed requests as they are; refuse any request carrying a sandbox."""
        if params.sandbox is not None:
            raise SandboxUnavailable("no sandbox backend is configured")
        if params.enforce_managed_network:
            raise InvalidParams(
                "enforceManagedNetwork requires a sandbox, and managed networking is not supported"
            )
        return ConfinedCommand(request=command, sandbox_type=SandboxType.NONE, sandboxed=False)


def _refuse_managed_network(params: StartParams, *, sandboxed: bool) -> None:
    """Managed networking is enforcement; without a sandbox there is nothing to enforce it
    with (the reference runs such a command unconfined, or with an advisory proxy)."""
    if sandboxed:
        return
    if params.network_proxy is not None:
        raise InvalidParams("networkProxy requires a sandbox")
    if params.enforce_managed_network:
        raise InvalidParams("enforceManagedNetwork requires a sandbox")


def plan_command(
    manager: SandboxManager, rules: RuleSet, command: Command
) -> tuple[LaunchPlan, Command]:
    """Select a backend for ``rules`` and plan ``command``; returns the plan and the spawn."""
    backend = manager.select(rules)
    plan = manager.prepare(backend, rules, command)
    env = {**command.env, **plan.env} if plan.env else command.env
    request = replace(
        command, executable=plan.executable, argv=plan.argv, env=env, setup=plan.setup
    )
    return plan, request


class SandboxConfinement:
    """The ``Confinement`` of the daemon: enforce sandbox intent or refuse it."""

    def __init__(
        self,
        manager: SandboxManager,
        host: HostView,
        limits: ResourceLimits | None = None,
        floor: PolicyFloor | None = None,
        *,
        shared_loopback: bool = False,
    ) -> None:
        self.manager = manager
        self.host = host
        #: What every sandboxed command gets: a wire request carries no limits of its own.
        self.limits = limits if limits is not None else default_limits()
        #: The operator's required sandbox (``serve --require-sandbox``): every command runs
        #: under it or under a sandbox that grants no more.
        self.floor = floor
        #: Full-network sandboxes may reach the host's loopback (the operator opted out of
        #: loopback isolation); otherwise a backend must isolate it or the command is refused.
        self.shared_loopback = shared_loopback
        #: Rule sets of recent launches, reused while the host answers as it did (``memo.py``).
        self.memo = MaterializeMemo()
        #: Rule sets derived from the memo's (the daemon's limits, the command's network): the
        #: same object for the same source and inputs, so whatever is cached on it
        #: (``RuleSet.needs``, rule lookups) or keyed on it (a backend's plans) holds too.
        self._derived: ByIdentity[RuleSet, RuleSet] = ByIdentity()

    def rules_for(self, intent: SandboxIntent, command: Command) -> RuleSet | None:
        """Materialized rules of ``intent`` for ``command`` (None: sandbox disabled)."""
        rules = self.memo.materialize(
            intent,
            self.host,
            purpose=Purpose.PROCESS,
            process_cwd=command.cwd,
            child_env=command.env,
        )
        if rules is None or rules.limits == self.limits:
            return rules
        limited = rules
        return self._derived.get(
            limited, ("limits", self.limits), lambda: replace(limited, limits=self.limits)
        )

    async def confine(
        self, params: StartParams, command: Command, network: SessionNetwork | None = None
    ) -> ConfinedCommand:
        """Decide how a ``process/start`` runs; raises ``SandboxUnavailable`` to refuse it."""
        sandboxed = params.sandbox is not None or self.floor is not None
        _refuse_managed_network(params, sandboxed=sandboxed)
        if not sandboxed:  # what ``enforce`` decides for no intent and no floor, sooner
            return ConfinedCommand(request=command, sandbox_type=SandboxType.NONE, sandboxed=False)
        return await self.enforce(
            params.sandbox,
            command,
            label=f"process {params.process_id}",
            params=params,
            network=network,
            process_id=params.process_id,
        )

    async def enforce(
        self,
        intent: SandboxIntent | None,
        command: Command,
        *,
        label: str,
        params: StartParams | None = None,
        operator: NetworkPolicy | None = None,
        network: SessionNetwork | None = None,
        process_id: str = "",
    ) -> ConfinedCommand:
        """Confine ``command`` to ``intent`` (None: unsandboxed), or raise to refuse it.

        ``operator`` is the operator's network policy (``executor run``: the profile's; the
        daemon: its floor's); ``network`` the session's network (made for this command
        alone when None and it needs one)."""
        if self.floor is not None:
            floored = self.floor.process_rules(intent, self.host, cwd=command.cwd, env=command.env)
            rules: RuleSet | None = replace(floored, limits=self.limits)
            if intent is None:
                label = f"{label} (under the required sandbox {self.floor.name})"
        else:
            rules = None if intent is None else self.rules_for(intent, command)
        managed = params is not None and (
            params.enforce_managed_network or params.network_proxy is not None
        )
        if rules is None and intent is not None and managed:
            # A disabled sandbox still routes its network when asked to (the reference does
            # too): never less confinement than was asked for.
            rules = RuleSet(filesystem_restricted=False, limits=self.limits)
        if rules is None:
            return ConfinedCommand(request=command, sandbox_type=SandboxType.NONE, sandboxed=False)
        if operator is None and self.floor is not None:
            operator = self.floor.profile.network
        choice = choose(params, rules.network, command.env, operator=operator)
        policy = choice.policy
        if policy.mode is not NetworkAccess.PROXY:
            scope = None if network is None else network.session_id
            plain = rules
            rules = self._derived.get(
                plain,
                ("network", policy, self.shared_loopback, scope),
                lambda: network_rules(
                    plain, policy, shared_loopback=self.shared_loopback, scope=scope
                ),
            )
            return self._planned(rules, command, label)
        own = network is None
        session = SessionNetwork(f"{label} (own network)") if network is None else network
        attachment = await session.attach(
            policy,
            process_id=process_id,
            executor_proxy=choice.executor_proxy,
            socks=choice.socks,
        )
        try:
            rules = network_rules(rules, policy, route=attachment.route)
            command = replace(command, env={**command.env, **attachment.env})
            confined = self._planned(rules, command, label)
        except BaseException:
            attachment.release()
            if own:
                await session.close()
            raise

        def release() -> None:
            attachment.release()
            if confined.release is not None:
                confined.release()
            if own:
                asyncio.get_running_loop().create_task(session.close())

        return replace(confined, release=release, evidence=attachment.evidence)

    def _planned(self, rules: RuleSet, command: Command, label: str) -> ConfinedCommand:
        try:
            plan, request = plan_command(self.manager, rules, command)
        except SandboxUnavailable as exc:
            if rules.isolate_loopback and "loopback" in exc.reason:
                raise SandboxUnavailable(
                    f"{exc.reason} (an operator who accepts that sandboxes with the full "
                    "network reach this host's loopback services passes --shared-loopback)"
                ) from None
            raise
        # Debug only: the audit trail's process.start line carries the same summary.
        log.debug("%s: %s", label, plan.report.summary())
        return ConfinedCommand(
            request=request,
            sandbox_type=plan.sandbox_type,
            sandboxed=True,
            linux=sys.platform.startswith("linux"),
            release=plan.release,
            summary=plan.report.summary(),
        )
