"""Parsing the wire ``sandbox`` object (protocol.md §7.1-§7.4): exact, and errors name the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from executor.errors import InvalidParams, SandboxUnavailable
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
    parse_process_sandbox,
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


# --- parsed sandboxes remembered by their exact wire form ------------------------------------


def _twins() -> list[tuple[str, Any]]:
    """Values equal to ``REAL_CLIENT_SANDBOX`` under ``==`` (or in JSON) but not in type."""
    fs = REAL_CLIENT_SANDBOX["permissions"]["file_system"]

    class Dict(dict[str, Any]):
        pass

    class Str(str):
        pass

    def with_fs(**changed: Any) -> dict[str, Any]:
        permissions = {**REAL_CLIENT_SANDBOX["permissions"], "file_system": {**fs, **changed}}
        return {**REAL_CLIENT_SANDBOX, "permissions": permissions}

    return [
        ("legacy 1 for true", {**REAL_CLIENT_SANDBOX, "useLegacyLandlock": 1}),
        ("legacy 0 for false", {**REAL_CLIENT_SANDBOX, "useLegacyLandlock": 0}),
        ("entries as a tuple", with_fs(entries=tuple(fs["entries"]))),
        ("depth 1.0 for 1", with_fs(glob_scan_max_depth=1.0)),
        ("depth true for 1", with_fs(glob_scan_max_depth=True)),
        ("a dict subclass", Dict(REAL_CLIENT_SANDBOX)),
        ("a str subclass", {**REAL_CLIENT_SANDBOX, "windowsSandboxLevel": Str("disabled")}),
    ]


def _outcome(parse: Any, value: Any) -> Any:
    try:
        return parse(value, "sandbox")
    except InvalidParams as exc:
        return type(exc), exc.message


def test_a_sandbox_sent_again_is_the_same_parse() -> None:
    from executor.protocol.intent import _parse_sandbox

    first = parse_sandbox(REAL_CLIENT_SANDBOX)
    again = parse_sandbox(copy.deepcopy(REAL_CLIENT_SANDBOX))
    assert again is first
    assert first == _parse_sandbox(REAL_CLIENT_SANDBOX, "sandbox")
    depth = {**REAL_CLIENT_SANDBOX}
    depth["permissions"] = copy.deepcopy(depth["permissions"])
    depth["permissions"]["file_system"]["glob_scan_max_depth"] = 1
    with_depth = parse_sandbox(depth)
    assert with_depth is not first and with_depth == _parse_sandbox(depth, "sandbox")


@pytest.mark.parametrize(("what", "twin"), _twins())
def test_a_value_equal_in_json_but_not_in_type_is_parsed_for_itself(what: str, twin: Any) -> None:
    """Each twin gets what parsing it afresh gets (a refusal, or its own parse), whether or
    not its equal was parsed just before."""
    from executor.protocol.intent import _parse_sandbox

    expected = _outcome(_parse_sandbox, twin)
    parse_sandbox(REAL_CLIENT_SANDBOX)
    assert _outcome(parse_sandbox, twin) == expected
    assert _outcome(parse_sandbox, twin) == expected


def test_refusals_are_not_remembered_and_the_memo_stays_small() -> None:
    from executor.protocol import intent

    bad = {**REAL_CLIENT_SANDBOX, "windowsSandboxLevel": "sometimes"}
    for _ in range(2):
        with pytest.raises(InvalidParams, match="unknown variant `sometimes`"):
            parse_sandbox(bad)
    for i in range(intent._PARSED_SIZE + 10):
        parse_sandbox(context(managed(special("root", "read")), cwd=f"/w{i}"))
    assert len(intent._PARSED) == intent._PARSED_SIZE
    huge = context(managed(*(path(f"/p{i:05}", "read") for i in range(1000))), cwd="/w")
    assert len(parse_sandbox(huge).permissions.file_system.entries) == 1000  # type: ignore[union-attr]
    assert parse_sandbox(huge) is not parse_sandbox(huge)  # too long a form to keep


def test_mxc_is_refused_for_a_process_and_left_to_the_filesystem_methods() -> None:
    """``windowsSandboxLevel: "mxc"``: ``process/start`` refuses it with the reference's words
    (a sandbox this executor cannot provide: ``sandboxUnavailable``); for the filesystem
    methods it parses, and each call decides by what its permissions restrict (``fs/mxc.py``,
    tested in ``tests/fs``), as the reference does."""
    mxc = {**REAL_CLIENT_SANDBOX, "windowsSandboxLevel": "mxc"}
    with pytest.raises(SandboxUnavailable) as refused:
        parse_process_sandbox(mxc)
    assert refused.value.message == "native MXC is unavailable on this executor"
    assert refused.value.start_kind == "sandboxUnavailable"
    with pytest.raises(SandboxUnavailable):
        decode(StartParams, {**_START, "sandbox": mxc})
    intent = parse_sandbox(mxc)
    assert intent.permissions == parse_sandbox(REAL_CLIENT_SANDBOX).permissions
    read = decode(ReadFileParams, {"path": "file:///tmp/x", "sandbox": mxc})
    assert read.sandbox is not None and read.sandbox.permissions == intent.permissions


_START = {"processId": "p", "argv": ["/bin/true"], "cwd": "file:///tmp", "env": {}, "tty": False}
