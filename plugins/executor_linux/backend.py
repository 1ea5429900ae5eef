"""The Linux backend: probe the layers, and plan each launch (daemon side)."""

from __future__ import annotations

import functools
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

from executor.errors import SandboxUnavailable
from executor.sandbox import (
    BackendStatus,
    ByIdentity,
    ChildSetup,
    Command,
    EnforcementReport,
    Feature,
    HostInfo,
    LaunchPlan,
    NetworkMode,
    NetworkRoute,
    RuleOrigin,
    RuleSet,
    SandboxType,
)
from executor_linux import host_sockets, launch_spec, native_spec, plan, seccomp_policy
from executor_linux.loopback_guard import GuardedCommand, loopback_guard, loopback_guard_support
from executor_linux.placeholders import Placeholders, lock_directory
from executor_linux.probe import HostSupport, host_support
from executor_linux.resources import chain, limit_mechanisms, plan_limits

__all__ = ["LinuxBackend"]

_LAUNCHER = str(Path(__file__).with_name("launcher.py"))
_NAMESPACE_FEATURES = frozenset({Feature.CARVE_OUT, Feature.MISSING_PATH_PROTECTION})


class LinuxBackend:
    """Landlock + seccomp + dropped capabilities, in private namespaces where the host allows."""

    name = "linux"

    def __init__(self, state_dir: str | None = None) -> None:
        self.state_dir = state_dir
        self.placeholders = Placeholders(lambda: lock_directory(self._state_dir()))
        self._filesystem_plans = _FilesystemPlans()

    def probe(self, host: HostInfo) -> BackendStatus:
        """Which layers work here, and so which features this backend enforces."""
        if not host.platform.startswith("linux"):
            return BackendStatus(
                available=False, reason=f"requires Linux (this host is {host.platform})"
            )
        support = host_support()
        if not support.seccomp:
            return BackendStatus(
                available=False, reason=f"seccomp is unusable: {support.seccomp_reason}"
            )
        features = {Feature.NETWORK_BLOCK}
        missing: dict[Feature, str] = {}
        if support.network_proxy_reason:
            missing[Feature.NETWORK_PROXY] = support.network_proxy_reason
        else:
            features.add(Feature.NETWORK_PROXY)
        guard_ok, guard_reason = loopback_guard_support()
        if guard_ok:
            features.add(Feature.LOOPBACK_ISOLATION)
        else:
            missing[Feature.LOOPBACK_ISOLATION] = guard_reason
        if support.landlock_abi:
            features |= {Feature.WRITE_RESTRICTION, Feature.READ_RESTRICTION}
        else:
            missing[Feature.READ_RESTRICTION] = support.landlock_reason
        if support.namespaces:
            features |= {Feature.WRITE_RESTRICTION, *_NAMESPACE_FEATURES}
        else:
            for feature in _NAMESPACE_FEATURES:
                missing[feature] = f"needs a private mount namespace; {support.namespaces_reason}"
        if Feature.WRITE_RESTRICTION not in features:
            missing[Feature.WRITE_RESTRICTION] = "needs Landlock or a private mount namespace"
        return BackendStatus(
            available=True,
            features=frozenset(features),
            missing=missing,
            details={
                **_details(support),
                **limit_mechanisms(user_namespace=support.namespaces and support.user_namespace),
            },
        )

    def prepare(self, rules: RuleSet, command: Command) -> LaunchPlan:
        """The launch plan: layers applied in the forked child, then ``execve``."""
        support = host_support()
        use_namespaces = support.namespaces and not rules.landlock_only
        if not use_namespaces and rules.needs & _NAMESPACE_FEATURES:
            why = (
                "useLegacyLandlock asks for Landlock only"
                if rules.landlock_only
                else support.namespaces_reason
            )
            raise SandboxUnavailable(
                "read-only or denied paths inside a granted tree need a private mount namespace, "
                f"and the linux backend cannot use one here ({why})"
            )
        if not use_namespaces and rules.pinned:
            raise SandboxUnavailable(
                f"{rules.pinned[0]} must stay where it is while the command runs (a workspace "
                "root, or a directory above one, inside a writable tree); that needs a private "
                "mount namespace, and the linux backend cannot use one here"
            )
        restricted = rules.network is NetworkMode.RESTRICTED
        route = None if restricted else rules.route
        join_net = None if route is None else _session_netns(route, support, rules)
        lock_metadata = rules.filesystem_restricted and not use_namespaces
        seccomp = seccomp_policy.compile_filter(
            restricted,
            lock_metadata,
            shared_pids=not use_namespaces,
            deny_listen=route is not None and not route.local_binding,
        )
        layers: list[str] = []
        release = None
        namespaces = None
        mounts, ruleset = self._filesystem_plans.get(rules, support.landlock_abi, use_namespaces)
        masked_sockets: tuple[str, ...] = ()
        if use_namespaces:
            staging = plan.staging_dir(self._state_dir())
            mount_spec = (
                launch_spec.Mounts(staging=staging) if mounts is None else mounts.to_spec(staging)
            )
            if not restricted:
                masked_sockets = host_sockets.sockets_to_mask(host_sockets.unhidden_by(mount_spec))
                mount_spec = mount_spec._replace(
                    operations=mount_spec.operations
                    + tuple(("mask_socket", path) for path in masked_sockets)
                )
            namespaces = launch_spec.Namespaces(
                user=support.user_namespace,
                net=restricted,
                proc=support.fresh_proc,
                uid=os.getuid(),
                gid=os.getgid(),
                mounts=mount_spec,
                join_net=join_net,
            )
            kinds = ["user"] if support.user_namespace else []
            kinds += ["mount", "pid", "ipc"]
            if restricted or join_net is not None:
                kinds.append("net" if restricted else "net=session")
            layers.append(f"namespaces({','.join(kinds)})")
            mount_parts = [] if mounts is None else ["private-dev"]
            if mounts is not None and rules.pinned:
                mount_parts.append("pins")
            if masked_sockets:
                mount_parts.append(f"host-unix-sockets:{len(masked_sockets)}")
            if mount_parts:
                layers.append(f"mounts({','.join(mount_parts)})")
            if mounts is not None and mounts.placeholders:
                release = self.placeholders.acquire(mounts.placeholders)
        layers.append("no_new_privs")
        if ruleset is not None:
            layers.append(f"landlock({ruleset.describe()})")
        elif rules.filesystem_restricted and not use_namespaces:
            raise SandboxUnavailable("no layer can restrict the filesystem here")
        layers.append("capabilities-dropped")
        details = _details(support)
        if not use_namespaces and any(r.origin is RuleOrigin.EXECUTOR_STATE for r in rules.rules):
            details["executor_state"] = "not hidden (no mount namespace; it holds no secrets)"
        if not restricted:
            details["host_unix_sockets"] = (
                f"{len(masked_sockets)} masked"
                if use_namespaces
                else "reachable by path (no mount namespace to mask them in)"
            )
        seccomp_modes = [
            mode
            for mode, on in (
                ("network-off", restricted),
                ("network-proxied", route is not None),
                ("no-listen", route is not None and not route.local_binding),
                ("metadata-locked", lock_metadata),
                ("own-pid-only", not use_namespaces),
            )
            if on
        ]
        layers.append(f"seccomp({','.join(seccomp_modes)})" if seccomp_modes else "seccomp")
        # Last, so that no refusal above can leak the command's cgroups; applied first.
        limits = plan_limits(rules.limits, user_namespace=use_namespaces and support.user_namespace)
        layers.insert(0, limits.layer)
        release = chain(limits.release, release)
        limits_spec = limits.spec
        if Feature.LOOPBACK_ISOLATION in rules.needs:
            guard = _guard_loopback(rules, limits_spec.cgroups, release)
            # Its own cgroup (if the limits' v2 one is not guarded in place) is joined after
            # the limits' ones and released after them.
            limits_spec = limits_spec._replace(cgroups=limits_spec.cgroups + guard.joins)
            release = chain(release, guard.release)
            layers.insert(1, "loopback-guard(cgroup-bpf)")
            ports = ",".join(map(str, rules.local_ports)) or "none"
            details["loopback_isolation"] = f"local ports {ports}, DNS (53), same-scope listeners"
        spec = launch_spec.LaunchSpec(
            limits=limits_spec,
            namespaces=namespaces,
            landlock=None if ruleset is None else ruleset.to_spec(),
            seccomp=seccomp,
        )
        return LaunchPlan(
            sandbox_type=SandboxType.LINUX_SECCOMP,
            executable=command.executable,
            argv=command.argv,
            setup=ChildSetup(
                module_path=_LAUNCHER,
                function="run",
                payload=launch_spec.encode(spec),
                native=native_spec.encode(spec),
            ),
            report=EnforcementReport(layers=tuple(layers), details=details),
            release=release,
        )

    def _state_dir(self) -> str:
        if self.state_dir is None:
            self.state_dir = HostInfo.current().state_dir
        staging = plan.staging_dir(self.state_dir)
        # Looked at on every launch (something may have removed it: a /tmp cleaner), made
        # only when it is not there: one stat where makedirs takes three calls.
        try:
            there = stat.S_ISDIR(os.stat(staging).st_mode)
        except OSError:
            there = False
        if not there:
            os.makedirs(staging, mode=0o700, exist_ok=True)
        return self.state_dir


FilesystemPlan = tuple[plan.MountPlan | None, plan.LandlockPlan | None]


def filesystem_plan(rules: RuleSet, abi: int, use_namespaces: bool) -> FilesystemPlan:
    """The mounts (in a private mount namespace) and the Landlock ruleset that enforce
    ``rules`` (``plan.py``)."""
    mounts = plan.mount_plan(rules) if use_namespaces and rules.filesystem_restricted else None
    private_shm = bool(mounts and mounts.private_shm)
    ruleset = (
        plan.landlock_plan(rules, abi, private_shm=private_shm, private_dev=mounts is not None)
        if abi
        else None
    )
    return mounts, ruleset


class _FilesystemPlans:
    """``filesystem_plan`` of recent rule sets: a pure function of them, so an equal rule set
    (the next launch of the same sandbox) gets the same plans. Not kept when the plan read
    the host (Landlock without a private ``/dev`` lists ``/``, which may change).

    The daemon's confinement hands the very same rule set object to launch after launch
    while its memo holds: that one is found by identity, without hashing every rule."""

    def __init__(self, size: int = 32) -> None:
        self._pure = functools.lru_cache(maxsize=size)(filesystem_plan)
        self._same: ByIdentity[RuleSet, FilesystemPlan] = ByIdentity(size)

    def get(self, rules: RuleSet, abi: int, use_namespaces: bool) -> FilesystemPlan:
        if rules.filesystem_restricted and not use_namespaces:
            return filesystem_plan(rules, abi, use_namespaces)
        return self._same.get(
            rules, (abi, use_namespaces), lambda: self._pure(rules, abi, use_namespaces)
        )


def _session_netns(route: NetworkRoute, support: HostSupport, rules: RuleSet) -> tuple[str, int]:
    """The session's network namespace a proxied command joins, or why it cannot."""
    why = support.network_proxy_reason or (
        "useLegacyLandlock asks for Landlock only, without namespaces"
        if rules.landlock_only
        else ""
    )
    if not why and (route.netns_path is None or route.netns_inode is None):
        why = "the route names no network namespace to join"
    if why:
        raise SandboxUnavailable(
            "proxy mode needs the command in the session's network namespace, and the linux "
            f"backend cannot put it there: {why}"
        )
    assert route.netns_path is not None and route.netns_inode is not None
    return route.netns_path, route.netns_inode


def _guard_loopback(
    rules: RuleSet, joins: tuple[str, ...], release: Callable[[], None] | None
) -> GuardedCommand:
    """The command's loopback guard (``loopback_guard.py``), or the launch refused with what
    is planned so far released."""
    ok, why = loopback_guard_support()
    if ok:
        try:
            return loopback_guard().join(rules.network_scope, rules.local_ports, joins)
        except (OSError, ValueError) as exc:
            why = str(exc)
    if release is not None:
        release()
    raise SandboxUnavailable(
        f"loopback isolation needs cgroup BPF hooks on the command, and the linux backend "
        f"cannot attach them: {why}"
    )


def _details(support: HostSupport) -> dict[str, str]:
    details = {
        "landlock_abi": str(support.landlock_abi),
        "namespaces": "yes" if support.namespaces else f"no ({support.namespaces_reason})",
        "user_namespace": "yes" if support.user_namespace else "no (running as root)",
        "fresh_proc": "yes" if support.fresh_proc else "no",
        "network_proxy": "yes"
        if not support.network_proxy_reason
        else f"no ({support.network_proxy_reason})",
        "python": sys.version.split()[0],
    }
    if not support.landlock_abi:
        details["landlock"] = support.landlock_reason
    return details
