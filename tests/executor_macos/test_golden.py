"""Golden Seatbelt profiles: the exact SBPL text and ``-D`` parameters for typical intents.

Each case is a wire ``sandbox`` object materialized on the fake Mac of ``fakehost`` (so the
output never depends on the machine running the tests) and rendered. The managed-network cases
(``NETWORK_CASES``) take one of those rule sets and add what the daemon sets for them: a proxy
route, or loopback isolation with ``local_ports``. The expected text is in
``golden/<case>.sbpl`` and the parameters, one ``NAME=VALUE`` per line in the order they are
passed, in ``golden/<case>.params``.

To regenerate after an intended change, run::

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/executor_macos/test_golden.py

then review the diff of ``tests/executor_macos/golden/`` like any other code change.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from executor_macos.profile import SeatbeltProfile, render_profile

from executor.sandbox import NetworkRoute, RuleSet
from tests.executor_macos.fakehost import TMPDIR, cwd_of, rules_for
from tests.executor_macos.sexpr import params_used, parse

GOLDEN = Path(__file__).with_name("golden")
PAYLOADS = Path(__file__).with_name("payloads")
UPDATE = os.environ.get("UPDATE_GOLDEN", "") not in ("", "0")
WS = "file:///Users/dev/ws"


def special(kind: str, **extra: str) -> dict[str, Any]:
    """A ``special`` FileSystemPath."""
    return {"type": "special", "value": {"kind": kind, **extra}}


def entry(path: dict[str, Any], access: str, *, skip: bool = False) -> dict[str, Any]:
    """A FileSystemEntry."""
    item: dict[str, Any] = {"path": path, "access": access}
    if skip:
        item["missing_path_behavior"] = "skip"
    return item


def sandbox(entries: list[dict[str, Any]], network: str = "restricted") -> dict[str, Any]:
    """A ``sandbox`` context for the fake workspace."""
    return {
        "permissions": {
            "type": "managed",
            "file_system": {"type": "restricted", "entries": entries},
            "network": network,
        },
        "cwd": WS,
        "workspaceRoots": [WS],
        "windowsSandboxLevel": "disabled",
    }


WORKSPACE_ENTRIES = [
    entry(special("root"), "read"),
    entry(special("project_roots"), "write"),
    entry(special("slash_tmp"), "write"),
    entry(special("tmpdir"), "write"),
    *(
        entry(special("project_roots", subpath=name), "read", skip=True)
        for name in (".git", ".agents", ".codex", ".aws")
    ),
]
CASES: dict[str, tuple[dict[str, Any], Mapping[str, str]]] = {
    "read-only": (sandbox([entry(special("root"), "read")]), {}),
    "workspace": (sandbox(WORKSPACE_ENTRIES), {"TMPDIR": TMPDIR}),
    "workspace-network": (sandbox(WORKSPACE_ENTRIES, network="enabled"), {"TMPDIR": TMPDIR}),
    "minimal": (
        sandbox([entry(special("minimal"), "read"), entry(special("project_roots"), "write")]),
        {},
    ),
    "deny-globs": (
        sandbox(
            [
                entry(special("root"), "read"),
                entry(special("project_roots"), "write"),
                entry(special("slash_tmp"), "write"),
                entry({"type": "glob_pattern", "pattern": "**/*.env"}, "deny"),
                entry({"type": "glob_pattern", "pattern": "/tmp/*.env"}, "deny"),
                entry({"type": "glob_pattern", "pattern": "secrets/[0-9]?.key"}, "deny"),
                entry({"type": "path", "path": f"{WS}/private"}, "deny"),
                entry({"type": "path", "path": f"{WS}/private/public"}, "read"),
            ]
        ),
        {},
    ),
    "network-only": (
        {
            "permissions": {"type": "external", "network": "restricted"},
            "windowsSandboxLevel": "disabled",
        },
        {},
    ),
}


#: The proxy's port and a database the profile lists in ``local_ports``.
PROXY_PORT, DATABASE_PORT = 3128, 5432
#: Managed-network cases: (the case whose rule set they start from, the fields the daemon sets).
NETWORK_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "workspace-proxy": (
        "workspace-network",
        {
            "route": NetworkRoute(ports=(PROXY_PORT, DATABASE_PORT), local_binding=True),
            "local_ports": (DATABASE_PORT,),
        },
    ),
    "workspace-proxy-no-binding": (
        "workspace-network",
        {"route": NetworkRoute(ports=(PROXY_PORT,), local_binding=False)},
    ),
    "workspace-isolated": (
        "workspace-network",
        {"isolate_loopback": True, "local_ports": (DATABASE_PORT,)},
    ),
}


def codex_payload_rules() -> tuple[dict[str, Any], Any]:
    """The §7.12 capture of a real Codex 0.169 client, and its rule set on the fake Mac."""
    params = json.loads((PAYLOADS / "codex-0.169-workspace-write.json").read_text())["params"]
    return params, rules_for(params["sandbox"], cwd=cwd_of(params["cwd"]), env=params["env"])


def rules_of(case: str) -> RuleSet:
    """The rule set of one golden case."""
    if case == "codex-0.169-payload":
        rules: RuleSet = codex_payload_rules()[1]
        return rules
    if case in NETWORK_CASES:
        base, changes = NETWORK_CASES[case]
        return replace(rules_of(base), **changes)
    wire, env = CASES[case]
    return rules_for(wire, env=env)


def rendered(case: str) -> SeatbeltProfile:
    """The profile of one golden case."""
    return render_profile(rules_of(case))


def params_text(profile: SeatbeltProfile) -> str:
    """The ``.params`` file content."""
    for _name, value in profile.params:
        assert "\n" not in value, "golden parameters are one per line"
    return "".join(f"{name}={value}\n" for name, value in profile.params)


ALL_CASES = [*CASES, *NETWORK_CASES, "codex-0.169-payload"]


@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_CASES)
def test_golden_profile(case: str) -> None:
    """The rendered profile and its parameters equal the checked-in golden files."""
    profile = rendered(case)
    text_file, params_file = GOLDEN / f"{case}.sbpl", GOLDEN / f"{case}.params"
    if UPDATE:
        text_file.write_text(profile.text)
        params_file.write_text(params_text(profile))
    assert profile.text == text_file.read_text()
    assert params_text(profile) == params_file.read_text()


@pytest.mark.parametrize("case", ALL_CASES, ids=ALL_CASES)
def test_golden_profile_is_well_formed(case: str) -> None:
    """Every golden profile parses, and its parameters are exactly the ones it refers to."""
    profile = rendered(case)
    used = params_used(parse(profile.text))
    assert set(used) == {name for name, _value in profile.params}
    assert len(profile.params) == len(dict(profile.params))
