"""The macOS backend as the core sees it: registration, probe, launch plan (runs anywhere).

Off macOS the backend is listed but unavailable. Its darwin code path is exercised with a fake
``sandbox-exec`` (a Python script that records its arguments), which is as far as a Linux host
can go; the real binary is used by test_macos_enforcement.py on a Mac.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import pytest
from executor_macos.plugin import FEATURES, MANAGED_NETWORK, SANDBOX_EXEC, MacosBackend
from executor_macos.profile import render_profile

from executor.errors import SandboxUnavailable
from executor.process.confinement import plan_command
from executor.protocol.messages import SandboxType
from executor.sandbox import Command, Feature, HostInfo, SandboxBackend, hookimpl
from executor.sandbox.manager import SandboxManager, get_plugin_manager
from tests.executor_macos.fakehost import rules_for
from tests.executor_macos.sexpr import split_define
from tests.executor_macos.test_golden import (
    ALL_CASES,
    codex_payload_rules,
    entry,
    rendered,
    rules_of,
    sandbox,
    special,
)

LINUX = HostInfo(platform="linux", release="6.8", machine="x86_64", uid=1000)
DARWIN = HostInfo(platform="darwin", release="24.0.0", machine="arm64", uid=501)


def command(argv: Sequence[str] = ("/bin/echo", "hi"), executable: str = "/bin/echo") -> Command:
    """A resolved command."""
    return Command(
        executable=executable,
        argv=tuple(argv),
        env={"PATH": "/usr/bin:/bin"},
        cwd="/Users/dev/ws",
        tty=False,
    )


def fake_sandbox_exec(tmp_path: Path, *, exit_code: int = 0, stderr: str = "") -> tuple[Path, Path]:
    """A stand-in for sandbox-exec that appends its argv (JSON, one call per line) to a log."""
    log = tmp_path / "calls.jsonl"
    script = tmp_path / "sandbox-exec"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"with open({str(log)!r}, 'a') as f: f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"sys.stderr.write({stderr!r})\n"
        f"sys.exit({exit_code})\n"
    )
    script.chmod(0o755)
    return script, log


def test_probe_off_macos_names_the_platform() -> None:
    """On Linux the backend is unavailable, and says why."""
    status = MacosBackend().probe(LINUX)
    assert not status.available
    assert status.reason == "requires macOS (this host is linux)"
    assert status.features == frozenset()


def test_probe_without_sandbox_exec(tmp_path: Path) -> None:
    """A Mac without sandbox-exec is unavailable, naming the missing binary."""
    missing = str(tmp_path / "sandbox-exec")
    status = MacosBackend(missing).probe(DARWIN)
    assert not status.available
    assert status.reason == f"{missing} is missing or not executable"


def test_probe_self_test_passes(tmp_path: Path) -> None:
    """On macOS the probe runs /usr/bin/true under four sample profiles before saying yes: two
    for the filesystem sections, one proxy route and one loopback isolation."""
    script, log = fake_sandbox_exec(tmp_path)
    status = MacosBackend(str(script)).probe(DARWIN)
    assert status.available
    assert status.features == FEATURES
    assert status.details["self-test"] == "passed"
    assert status.details["network-self-test"] == "passed"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 4
    for call in calls:
        assert call[0] == "-p"
        assert call[-2:] == ["--", "/usr/bin/true"]
        for define in call[2:-2]:
            split_define(define)
    texts = [call[1] for call in calls]
    assert "(remote ip4" in texts[3]
    assert '(remote ip "localhost:3128")' in texts[2]
    assert '(local ip "localhost:*")' in texts[2]


def refusing_sandbox_exec(tmp_path: Path, marker: str) -> Path:
    """A sandbox-exec that refuses (exit 65) any profile containing ``marker``."""
    script = tmp_path / "sandbox-exec"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"if {marker!r} in sys.argv[2]:\n"
        "    sys.stderr.write('sandbox-exec: unbound variable\\n')\n"
        "    sys.exit(65)\n"
    )
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("marker", ["(remote ip4", '(remote ip "localhost:'])
def test_network_self_test_failure_withdraws_only_managed_network(
    tmp_path: Path, marker: str
) -> None:
    """A macOS that refuses the managed-network rules keeps the backend for everything else;
    requests that need a proxy route or loopback isolation are then refused by the core."""
    script = refusing_sandbox_exec(tmp_path, marker)
    status = MacosBackend(str(script)).probe(DARWIN)
    assert status.available
    assert status.features == FEATURES - MANAGED_NETWORK
    assert "exit 65" in status.details["network-self-test"]
    assert "unbound variable" in status.details["network-self-test"]

    @hookimpl
    def executor_sandbox_backends(host: HostInfo) -> Sequence[SandboxBackend]:
        return [MacosBackend(str(script))]

    plugin = SimpleNamespace(executor_sandbox_backends=executor_sandbox_backends)
    manager = SandboxManager(get_plugin_manager(blocked=["macos"], plugins=[plugin]), DARWIN)
    for case, feature in (
        ("workspace-proxy", "network-proxy"),
        ("workspace-isolated", "loopback-isolation"),
    ):
        with pytest.raises(SandboxUnavailable, match=feature):
            plan_command(manager, rules_of(case), command())
    plan, _request = plan_command(manager, rules_of("workspace-network"), command())
    assert plan.argv[0] == str(script)


def test_probe_self_test_failure_makes_it_unavailable(tmp_path: Path) -> None:
    """If sandbox-exec cannot apply our profile (nested sandbox, syntax), the backend is off."""
    script, _log = fake_sandbox_exec(
        tmp_path, exit_code=71, stderr="sandbox_apply: Operation not permitted\n"
    )
    status = MacosBackend(str(script)).probe(DARWIN)
    assert not status.available
    assert "exit 71" in status.reason
    assert "sandbox_apply: Operation not permitted" in status.reason


def test_features_cover_everything_a_rule_set_can_need() -> None:
    """Seatbelt expresses every feature, so the core never refuses a rule set on macOS."""
    assert frozenset(Feature) == FEATURES


def test_launch_plan_shape() -> None:
    """sandbox-exec -p PROFILE -D... -- executable argv[1:]; no environment is added."""
    rules = rules_for(sandbox([entry(special("root"), "read")]))
    plan = MacosBackend().prepare(rules, command(("echo-alias", "hi", "there")))
    profile = render_profile(rules)
    defines = tuple(f"-D{name}={value}" for name, value in profile.params)
    assert plan.sandbox_type is SandboxType.MACOS_SEATBELT
    assert plan.executable == SANDBOX_EXEC
    assert plan.argv == (
        SANDBOX_EXEC,
        "-p",
        profile.text,
        *defines,
        "--",
        "/bin/echo",
        "hi",
        "there",
    )
    assert dict(plan.env) == {}
    assert plan.setup is None
    assert plan.report.layers == ("seatbelt",)


def test_launch_plan_for_the_captured_codex_request() -> None:
    """The §7.12 request runs bash from its resolved path, its arguments untouched."""
    params, rules = codex_payload_rules()
    argv = tuple(params["argv"])
    plan = MacosBackend().prepare(rules, command(argv, executable=argv[0]))
    separator = plan.argv.index("--")
    assert plan.argv[separator:] == ("--", *argv)
    assert plan.argv[1:3] == ("-p", rendered("codex-0.169-payload").text)
    assert dict(split_define(arg) for arg in plan.argv[3:separator]) == dict(
        render_profile(rules).params
    )


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("workspace", {"network": "restricted"}),
        ("workspace-network", {"network": "enabled"}),
        (
            "workspace-proxy",
            {"network": "proxy", "loopback-ports": "3128,5432", "local-binding": "loopback"},
        ),
        (
            "workspace-proxy-no-binding",
            {"network": "proxy", "loopback-ports": "3128", "local-binding": "no"},
        ),
        ("workspace-isolated", {"network": "loopback-isolated", "loopback-ports": "5432"}),
    ],
)
def test_report_names_the_network_mode(case: str, expected: dict[str, str]) -> None:
    """The launch report says which network section the profile has, and its loopback ports."""
    details = MacosBackend().prepare(rules_of(case), command()).report.details
    assert {key: details.get(key) for key in expected} == expected
    if case in ("workspace", "workspace-network"):
        assert "loopback-ports" not in details


def test_report_mentions_legacy_landlock() -> None:
    """useLegacyLandlock is not silently dropped: the report says it does not apply."""
    wire = sandbox([entry(special("root"), "read")])
    wire["useLegacyLandlock"] = True
    plan = MacosBackend().prepare(rules_for(wire), command())
    assert plan.report.details["legacy-landlock"] == "not applicable on macOS"


def test_registered_through_the_entry_point() -> None:
    """The plugin is found through executor.sandbox and listed as unavailable off macOS."""
    manager = SandboxManager(get_plugin_manager(), LINUX)
    statuses = {backend.name: status for backend, status in manager.candidates}
    assert "macos" in statuses
    assert statuses["macos"].reason == "requires macOS (this host is linux)"


def test_core_plans_a_launch_through_the_backend(tmp_path: Path) -> None:
    """On a (faked) Mac the core selects the backend and spawns sandbox-exec."""
    script, _log = fake_sandbox_exec(tmp_path)

    @hookimpl
    def executor_sandbox_backends(host: HostInfo) -> Sequence[SandboxBackend]:
        return [MacosBackend(str(script), self_test=False)]

    plugin = SimpleNamespace(executor_sandbox_backends=executor_sandbox_backends)
    manager = SandboxManager(get_plugin_manager(blocked=["macos"], plugins=[plugin]), DARWIN)
    rules = codex_payload_rules()[1]
    plan, request = plan_command(manager, rules, command())
    assert request.executable == str(script)
    assert request.argv == plan.argv
    assert request.argv[-3:] == ("--", "/bin/echo", "hi")
    assert request.env == {"PATH": "/usr/bin:/bin"}


@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_CASES)
def test_golden_rule_sets_need_only_what_seatbelt_enforces(case: str) -> None:
    """Every golden rule set passes the core's feature check against this backend."""
    assert rules_of(case).needs <= FEATURES
