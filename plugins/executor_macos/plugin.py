"""Registers the macOS backend: Seatbelt profiles run through ``/usr/bin/sandbox-exec``.

``prepare()`` renders the rule set (``executor_macos.profile``) and wraps the command::

    /usr/bin/sandbox-exec -p PROFILE -DNAME=VALUE ... -- EXECUTABLE ARG...

``sandbox-exec`` applies the profile to itself and then ``execvp``s the command, so the
command's pid is the one the spawner started and every descendant inherits the profile. The
wrapper owns ``argv[0]``: the command sees its executable path there, an ``arg0`` override is
not carried through (as in the reference).

The environment is passed through as given; no variable is added. The reference's exec-server
adds none either (its ``codex sandbox`` CLI sets ``CODEX_SANDBOX=seatbelt``), clients already
send ``CODEX_SANDBOX_NETWORK_DISABLED`` themselves, and Linux children get nothing extra, so
a command sees the same environment on every platform.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from typing import Final

from executor.sandbox import (
    Access,
    BackendStatus,
    Command,
    EnforcementReport,
    Feature,
    HostInfo,
    LaunchPlan,
    NetworkMode,
    NetworkRoute,
    PathKind,
    PathRule,
    RuleOrigin,
    RuleSet,
    SandboxBackend,
    SandboxType,
    hookimpl,
    minimal_paths,
)
from executor_macos.profile import SeatbeltProfile, render_profile

__all__ = [
    "FEATURES",
    "MANAGED_NETWORK",
    "SANDBOX_EXEC",
    "MacosBackend",
    "executor_sandbox_backends",
]

#: Only this binary is used, never one found on PATH: a replaced /usr/bin/sandbox-exec would
#: already need root.
SANDBOX_EXEC: Final = "/usr/bin/sandbox-exec"
#: The network modes beyond on/off: outbound only to the proxy's loopback port, and the network
#: minus the host's loopback. Rendered like the rest; they lean on Seatbelt's network filters
#: more than anything else does, so their own self-test can withdraw them alone.
MANAGED_NETWORK: Final = frozenset({Feature.NETWORK_PROXY, Feature.LOOPBACK_ISOLATION})
#: Everything a rule set can need; Seatbelt expresses all of it.
FEATURES: Final = frozenset(
    {
        Feature.WRITE_RESTRICTION,
        Feature.READ_RESTRICTION,
        Feature.CARVE_OUT,
        Feature.MISSING_PATH_PROTECTION,
        Feature.NETWORK_BLOCK,
        *MANAGED_NETWORK,
    }
)
#: A path the self-test profiles name; it need not exist.
_SELF_TEST_DIR: Final = "/private/tmp/executor-seatbelt-self-test"
_SELF_TEST_TIMEOUT: Final = 10.0


class MacosBackend:
    """Seatbelt through ``sandbox-exec``; available on macOS only."""

    name = "macos"

    def __init__(self, executable: str = SANDBOX_EXEC, *, self_test: bool = True) -> None:
        #: The ``sandbox-exec`` binary (tests point it elsewhere).
        self.executable = executable
        #: Whether ``probe()`` runs ``/usr/bin/true`` under sample profiles to prove that this
        #: macOS compiles and applies what we render.
        self.self_test = self_test

    def probe(self, host: HostInfo) -> BackendStatus:
        """Available on macOS when ``sandbox-exec`` exists (and applies our profiles)."""
        details = {"sandbox-exec": self.executable}
        if host.platform != "darwin":
            return BackendStatus(
                available=False,
                reason=f"requires macOS (this host is {host.platform})",
                details=details,
            )
        if not os.access(self.executable, os.X_OK):
            return BackendStatus(
                available=False,
                reason=f"{self.executable} is missing or not executable",
                details=details,
            )
        features = FEATURES
        if self.self_test:
            failure = self._run_self_tests(_self_test_rules())
            if failure:
                return BackendStatus(available=False, reason=failure, details=details)
            details["self-test"] = "passed"
            # A macOS that refuses the managed-network rules still confines everything else;
            # requests needing them are then refused by the core, naming the feature.
            failure = self._run_self_tests(_network_self_test_rules())
            if failure:
                features = FEATURES - MANAGED_NETWORK
                details["network-self-test"] = failure
            else:
                details["network-self-test"] = "passed"
        return BackendStatus(available=True, features=features, details=details)

    def prepare(self, rules: RuleSet, command: Command) -> LaunchPlan:
        """Wrap ``command`` in ``sandbox-exec`` with the profile of ``rules``."""
        profile = render_profile(rules)
        argv = (self.executable, *profile.arguments(), "--", command.executable, *command.argv[1:])
        return LaunchPlan(
            sandbox_type=SandboxType.MACOS_SEATBELT,
            executable=self.executable,
            argv=argv,
            report=_report(rules, profile),
        )

    def _run_self_tests(self, samples: list[tuple[str, RuleSet]]) -> str:
        """Empty when every sample profile runs ``/usr/bin/true``, else why not."""
        for label, rules in samples:
            argv = [self.executable, *render_profile(rules).arguments(), "--", "/usr/bin/true"]
            try:
                done = subprocess.run(
                    argv, capture_output=True, timeout=_SELF_TEST_TIMEOUT, check=False
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return f"sandbox-exec could not run the {label} self-test: {exc}"
            if done.returncode != 0:
                stderr = done.stderr.decode("utf-8", "replace").strip()[:300]
                code = done.returncode
                return f"sandbox-exec refused the {label} self-test profile (exit {code}: {stderr})"
        return ""


def _report(rules: RuleSet, profile: SeatbeltProfile) -> EnforcementReport:
    details = {
        "network": str(rules.network),
        "rules": str(len(rules.rules)),
        "parameters": str(len(profile.params)),
    }
    if rules.network is NetworkMode.ENABLED and rules.route is not None:
        ports = dict.fromkeys((*rules.route.ports, *rules.local_ports))
        details["network"] = "proxy"
        details["loopback-ports"] = ",".join(map(str, ports)) or "none"
        details["local-binding"] = "loopback" if rules.route.local_binding else "no"
    elif rules.network is NetworkMode.ENABLED and rules.isolate_loopback:
        details["network"] = "loopback-isolated"
        details["loopback-ports"] = ",".join(map(str, dict.fromkeys(rules.local_ports))) or "none"
    if not rules.filesystem_restricted:
        details["filesystem"] = "unrestricted"
    if rules.landlock_only:
        # useLegacyLandlock picks a Linux implementation; it has no meaning under Seatbelt.
        details["legacy-landlock"] = "not applicable on macOS"
    return EnforcementReport(layers=("seatbelt",), details=details)


def _self_test_rules() -> list[tuple[str, RuleSet]]:
    """Two rule sets that between them use every section a profile can have."""
    scratch = PathRule(_SELF_TEST_DIR, Access.WRITE, RuleOrigin.ENTRY, PathKind.MISSING)
    protected = PathRule(
        f"{_SELF_TEST_DIR}/.git", Access.READ, RuleOrigin.PROTECTED, PathKind.MISSING
    )
    denied = PathRule(f"{_SELF_TEST_DIR}/secret", Access.DENY, RuleOrigin.ENTRY, PathKind.MISSING)
    full_read = RuleSet(
        filesystem_restricted=True,
        rules=(PathRule("/", Access.READ), scratch, protected, denied),
        deny_globs=(f"{_SELF_TEST_DIR}/**/*.env",),
        network=NetworkMode.ENABLED,
    )
    system = sorted({os.path.realpath(path) for path in minimal_paths("darwin")})
    minimal = RuleSet(
        filesystem_restricted=True,
        rules=(*(PathRule(path, Access.READ) for path in system), scratch, protected),
        network=NetworkMode.RESTRICTED,
    )
    return [("full-read", full_read), ("minimal", minimal)]


def _network_self_test_rules() -> list[tuple[str, RuleSet]]:
    """A proxy route (with a loopback listener) and loopback isolation with a local port."""
    system = sorted({os.path.realpath(path) for path in minimal_paths("darwin")})
    proxied = RuleSet(
        filesystem_restricted=True,
        rules=tuple(PathRule(path, Access.READ) for path in system),
        network=NetworkMode.ENABLED,
        route=NetworkRoute(ports=(3128,), local_binding=True),
        local_ports=(5432,),
    )
    isolated = RuleSet(
        filesystem_restricted=True,
        rules=(PathRule("/", Access.READ),),
        network=NetworkMode.ENABLED,
        isolate_loopback=True,
        local_ports=(5432,),
    )
    return [("proxy", proxied), ("loopback-isolation", isolated)]


@hookimpl
def executor_sandbox_backends(host: HostInfo) -> Sequence[SandboxBackend]:
    """The macOS backend (listed everywhere; available only on macOS)."""
    return [MacosBackend()]
