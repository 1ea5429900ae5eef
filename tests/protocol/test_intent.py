"""Parsing the wire ``sandbox`` object (protocol.md §7.1-§7.4): exact, and errors name the field."""

from __future__ import annotations

from typing import Any

import pytest

from executor.errors import InvalidParams
from executor.protocol.decode import decode
from executor.protocol.fs_messages import ReadFileParams
from executor.protocol.intent import (
    Access,
    GlobTarget,
    NetworkMode,
    PathTarget,
    ProfileType,
    SandboxIntent,
    SpecialKind,
    SpecialTarget,
    WindowsSandboxLevel,
    parse_sandbox,
)
from executor.protocol.messages import StartParams
from tests.sandbox.wire import REAL_CLIENT_SANDBOX, context, glob, managed, path, special


def test_real_client_payload_parses() -> None:
    """The payload captured from a real Codex client is accepted as sent."""
    intent = parse_sandbox(REAL_CLIENT_SANDBOX)
    assert intent.permissions.type is ProfileType.MANAGED
    assert intent.permissions.network is NetworkMode.RESTRICTED
    assert intent.cwd == "/R/workspace"
    assert intent.workspace_roots == ("/R/workspace",)
    assert intent.windows_level is WindowsSandboxLevel.DISABLED
    fs = intent.permissions.file_system
    assert fs is not None and fs.restricted
    assert fs.entries[0].target == SpecialTarget(SpecialKind.ROOT)
    assert fs.entries[4].target == SpecialTarget(SpecialKind.PROJECT_ROOTS, ".git")
    assert fs.entries[4].skip_if_missing and fs.entries[4].access is Access.READ


def test_every_entry_kind_parses() -> None:
    """Paths, globs, every special kind, the legacy `none` access and unknown kinds."""
    sandbox = context(
        managed(
            path("/data", "read"),
            glob("**/*.env"),
            special("minimal", "read"),
            special("current_working_directory", "write", "docs"),
            special("tmpdir", "write"),
            special("slash_tmp", "write"),
            {
                "path": {"type": "special", "value": {"kind": "unknown", "path": ":future"}},
                "access": "none",
            },
            depth=3,
        ),
        cwd="/ws",
    )
    fs = parse_sandbox(sandbox).permissions.file_system
    assert fs is not None
    targets = [entry.target for entry in fs.entries]
    assert targets[0] == PathTarget("/data")
    assert targets[1] == GlobTarget("**/*.env")
    assert targets[3] == SpecialTarget(SpecialKind.CURRENT_WORKING_DIRECTORY, "docs")
    assert targets[6] == SpecialTarget(SpecialKind.UNKNOWN, None, ":future")
    assert fs.entries[6].access is Access.DENY
    assert fs.glob_scan_max_depth == 3


def test_policy_context_is_the_same_as_top_level_fields() -> None:
    """`policyContext.cwd/workspaceRoots` is the newer spelling of `cwd/workspaceRoots`."""
    top = parse_sandbox(context(managed(special("root", "read")), cwd="/ws", roots=("/ws",)))
    nested = parse_sandbox(
        context(
            managed(special("root", "read")),
            policyContext={"cwd": "file:///ws", "workspaceRoots": ["file:///ws"]},
        )
    )
    assert (top.cwd, top.workspace_roots) == (nested.cwd, nested.workspace_roots)


def test_disabled_and_external_profiles() -> None:
    """`disabled` needs nothing else; `external` carries only the network."""
    assert parse_sandbox(context({"type": "disabled"})).permissions.type is ProfileType.DISABLED
    external = parse_sandbox(context({"type": "external", "network": "restricted"})).permissions
    assert external.type is ProfileType.EXTERNAL and external.network is NetworkMode.RESTRICTED


BAD: list[tuple[str, object, str]] = [
    (
        "no-windows-level",
        {"permissions": {"type": "disabled"}},
        "missing field `windowsSandboxLevel` at `sandbox`",
    ),
    (
        "mxc",
        context({"type": "disabled"}, windowsSandboxLevel="mxc"),
        "native MXC is unavailable on this executor",
    ),
    (
        "unknown-type",
        context({"type": "bogus"}),
        "unknown variant `bogus`, expected one of `managed`, `disabled`, `external`"
        " at `sandbox.permissions.type`",
    ),
    (
        "no-network",
        context({"type": "external"}),
        "missing field `network` at `sandbox.permissions`",
    ),
    (
        "bad-access",
        context(managed({"path": {"type": "special", "value": {"kind": "root"}}, "access": "all"})),
        "unknown variant `all`",
    ),
    (
        "glob-write",
        context(managed({**glob("*.env"), "access": "write"})),
        "glob file system permissions only support deny-read entries",
    ),
    (
        "zero-depth",
        context(managed(depth=0)),
        "expected a nonzero usize at `sandbox.permissions.file_system.glob_scan_max_depth`",
    ),
    (
        "dotdot-subpath",
        context(managed(special("project_roots", "write", "../etc"))),
        "must not contain `..`",
    ),
    (
        "absolute-subpath",
        context(managed(special("project_roots", "write", "/etc"))),
        "must be relative",
    ),
    (
        "native-path",
        context(managed({"path": {"type": "path", "path": "/etc"}, "access": "read"})),
        "relative URL without a base",
    ),
    (
        "remote-host",
        context(managed(special("root", "read")), cwd="/x", workspaceRoots=["file://evil/ws"]),
        "is not valid on this exec-server host",
    ),
    (
        "bad-missing",
        context(managed({**special("root", "read"), "missing_path_behavior": "bogus"})),
        "unknown variant `bogus`, expected `skip`",
    ),
    (
        "entries-not-list",
        context(
            {
                "type": "managed",
                "file_system": {"type": "restricted", "entries": {}},
                "network": "enabled",
            }
        ),
        "expected a sequence",
    ),
    ("too-many", context(managed(*[special("root", "read")] * 5000)), "at most 4096 entries"),
    ("not-object", [], "expected struct FileSystemSandboxContext"),
    (
        "bad-path-type",
        context(managed({"path": {"type": "file"}, "access": "read"})),
        "expected one of `path`, `glob_pattern`, `special`",
    ),
]


@pytest.mark.parametrize(
    ("sandbox", "message"), [(b[1], b[2]) for b in BAD], ids=[b[0] for b in BAD]
)
def test_malformed_sandbox_is_refused_naming_the_field(sandbox: object, message: str) -> None:
    """Every malformed sandbox is -32602 with a message that says what and where."""
    with pytest.raises(InvalidParams) as caught:
        parse_sandbox(sandbox)
    assert caught.value.code == -32602
    assert message in caught.value.message


def test_managed_network_fields_parse() -> None:
    """`managedNetwork` decodes its optional fields with the params; ports are u16."""
    params = decode(
        StartParams,
        _start(enforceManagedNetwork=True, managedNetwork={"loopbackPorts": [3128]}),
    )
    assert params.enforce_managed_network and params.managed_network is not None
    assert params.managed_network.loopback_ports == (3128,)
    with pytest.raises(InvalidParams, match=r"expected u16 at `managedNetwork\.loopbackPorts"):
        decode(StartParams, _start(managedNetwork={"loopbackPorts": [70000]}))


def _start(**fields: Any) -> dict[str, Any]:
    return {
        "processId": "p",
        "argv": ["true"],
        "cwd": "file:///",
        "env": {},
        "tty": False,
        **fields,
    }


def test_sandbox_decodes_with_the_params() -> None:
    """`sandbox` is a typed intent as soon as the params decode; a bad one names its field."""
    params = decode(StartParams, _start(sandbox=REAL_CLIENT_SANDBOX))
    assert isinstance(params.sandbox, SandboxIntent)
    assert params.sandbox == parse_sandbox(REAL_CLIENT_SANDBOX)
    bad = context(managed(path("/data", "execute")))
    with pytest.raises(InvalidParams, match=r"at `sandbox\.permissions\.file_system\.entries\[0\]"):
        decode(StartParams, _start(sandbox=bad))
    file_params = decode(ReadFileParams, {"path": "file:///x", "sandbox": REAL_CLIENT_SANDBOX})
    assert file_params.sandbox == params.sandbox
