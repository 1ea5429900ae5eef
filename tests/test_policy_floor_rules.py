"""The policy floor's decisions on an imaginary host (``executor.floor``; pure, no daemon).

What a floor binds to, and when a request's sandbox is weaker than it: decided on the
materialized rules, so symlinks, ``:tmpdir`` from the request's environment, a client's
workspace roots, protected names, deny globs and pins are all seen as what they are.
"""

from __future__ import annotations

from typing import Any

import pytest

from executor.errors import ConfigError, InvalidParams
from executor.floor import PolicyFloor, excesses
from executor.protocol.intent import Access, NetworkMode, SandboxIntent, parse_permissions
from executor.protocol.intent import parse_sandbox as parse_intent
from executor.sandbox.profiles import Profile, ProfileLibrary, shipped_directory
from executor.sandbox.rules import PathKind, PathRule, RuleSet
from tests.sandbox.fakehost import FakeHost
from tests.sandbox.wire import REAL_CLIENT_SANDBOX, context, glob, managed, path, special

HOST = FakeHost(
    dirs=["/ws", "/ws/src", "/home/u/.ssh", "/srv/data", "/daemon-tmp", "/other"],
    files=["/home/u/.ssh/id_rsa", "/srv/data/notes"],
    symlinks={"/ws/link": "/etc", "/home/u/docs": "/srv/data"},
)


def profile(wire: dict[str, Any], name: str = "floor") -> Profile:
    return Profile(
        name=name,
        description="",
        source=f"{name}.toml",
        permissions=parse_permissions(wire),
        wire=wire,
    )


READ_ONLY = profile(managed(special("root", "read")), "read-only")


def with_protected(wire: dict[str, Any], *names: str) -> dict[str, Any]:
    return {**wire, "file_system": {**wire["file_system"], "protected_names": list(names)}}


#: Like the shipped ``workspace`` profile, with one extra protected name.
WORKSPACE = profile(
    with_protected(
        managed(
            special("root", "read"),
            special("project_roots", "write"),
            special("slash_tmp", "write"),
            special("tmpdir", "write"),
        ),
        ".envrc",
    ),
    "workspace",
)


def floor_of(prof: Profile = READ_ONLY, **kwargs: Any) -> PolicyFloor:
    return PolicyFloor(prof, tmpdir="/daemon-tmp", **kwargs)


def sandbox(permissions: dict[str, Any], **kwargs: Any) -> SandboxIntent:
    return parse_intent(context(permissions, **kwargs))


def process(
    floor: PolicyFloor, intent: SandboxIntent | None, env: dict[str, str] | None = None
) -> RuleSet:
    return floor.process_rules(intent, HOST, cwd="/ws", env=env or {})


def refusal(floor: PolicyFloor, intent: SandboxIntent, env: dict[str, str] | None = None) -> str:
    with pytest.raises(InvalidParams) as caught:
        process(floor, intent, env)
    assert caught.value.code == -32602
    return caught.value.message


# --- what the floor binds to -------------------------------------------------------------------


def test_an_unsandboxed_request_runs_under_the_floor() -> None:
    rules = process(floor_of(), None)
    assert rules.filesystem_restricted and rules.network is NetworkMode.RESTRICTED
    assert rules.access_of("/") is Access.READ
    assert rules.effective("/run/executor") is Access.DENY  # the executor's state


def test_workspace_roots_bind_to_the_operators_roots_only() -> None:
    """Without ``--workspace`` roots ``:workspace_roots`` grants nothing; a client's
    ``workspaceRoots`` never widen the floor (they are not even looked at)."""
    assert process(floor_of(WORKSPACE), None).access_of("/ws") is Access.READ
    assert process(floor_of(WORKSPACE, workspace_roots=("/ws",)), None).access_of("/ws") is (
        Access.WRITE
    )


def test_tmpdir_binds_to_the_daemons_tmpdir_not_the_requests() -> None:
    floor = floor_of(WORKSPACE)
    rules = floor.process_rules(None, HOST, cwd="/ws", env={"TMPDIR": "/etc"})
    assert rules.access_of("/daemon-tmp") is Access.WRITE
    assert rules.access_of("/etc") is Access.READ
    fs_rules, _, _ = floor.filesystem_rules(None, HOST)
    assert fs_rules.access_of("/daemon-tmp") is Access.WRITE


# --- equal or stronger runs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "entries",
    [
        [special("root", "read")],
        [path("/", "read")],  # :root and an explicit / are the same rules
        [special("minimal", "read"), path("/ws", "read")],
        [special("root", "read"), path("/home/u/.ssh", "deny")],
    ],
    ids=["same", "explicit-root", "narrower", "with-a-deny"],
)
def test_an_equal_or_stronger_sandbox_runs_under_its_own_rules(entries: list[Any]) -> None:
    intent = sandbox(managed(*entries), cwd="/ws")
    rules = process(floor_of(), intent)
    assert rules.access_of("/ws/src") in (Access.READ, Access.DENY)


def test_the_reference_clients_workspace_sandbox_fits_a_workspace_floor_on_the_same_root() -> None:
    """The captured Codex request (workspace-write) under a workspace floor over the same
    root: accepted, and the floor's extra protected names are added to it."""
    wire = {**REAL_CLIENT_SANDBOX, "cwd": "file:///ws", "workspaceRoots": ["file:///ws"]}
    intent = parse_intent(wire)
    floor = floor_of(WORKSPACE, workspace_roots=("/ws",))
    rules = process(floor, intent, {"TMPDIR": "/daemon-tmp"})
    assert rules.access_of("/ws/src") is Access.WRITE
    assert rules.access_of("/ws/.envrc") is Access.READ  # the floor's protected name


def test_the_reference_clients_modes_under_the_shipped_workspace_floor() -> None:
    """The shipped ``workspace`` floor over /ws (its many protected names, pins, ``:tmpdir``):
    Codex's workspace-write sandbox on /ws runs, its read-only one runs, full access does not."""
    shipped = ProfileLibrary([shipped_directory()]).get("workspace")
    floor = floor_of(shipped, workspace_roots=("/ws",))
    wire = {**REAL_CLIENT_SANDBOX, "cwd": "file:///ws", "workspaceRoots": ["file:///ws"]}
    rules = process(floor, parse_intent(wire), {"TMPDIR": "/daemon-tmp"})
    assert rules.access_of("/ws/src") is Access.WRITE
    assert rules.access_of("/ws/.bashrc") is Access.READ  # a shipped protected name
    read_only = {**wire, "permissions": managed(special("root", "read"))}
    assert process(floor, parse_intent(read_only)).access_of("/ws") is Access.READ
    full = {**wire, "permissions": {"type": "disabled"}}
    assert "reads, writes and network" in refusal(floor, parse_intent(full))


# --- weaker is refused, on the materialized rules ---------------------------------------------


def test_network_wider_than_the_floor_is_refused() -> None:
    message = refusal(floor_of(), sandbox(managed(special("root", "read"), network="enabled")))
    assert "required sandbox `read-only`" in message
    assert "it would exceed network." in message


def test_a_writable_root_the_floor_keeps_read_only_is_refused() -> None:
    message = refusal(floor_of(), sandbox(managed(special("root", "read"), path("/ws", "write"))))
    assert "it would exceed writes." in message
    assert "writes: /ws (the required sandbox allows reading only)" in message


def test_a_symlinked_entry_is_judged_by_where_it_leads() -> None:
    """``/ws/link -> /etc``: under a floor that lets the workspace be written, a write entry
    on the link is a write on /etc, which the floor keeps read-only."""
    floor = floor_of(WORKSPACE, workspace_roots=("/ws",))
    message = refusal(floor, sandbox(managed(special("root", "read"), path("/ws/link", "write"))))
    assert "writes: /etc" in message


def test_tmpdir_from_the_requests_environment_is_what_counts() -> None:
    """The request's ``:tmpdir`` is its child's TMPDIR: pointed at /etc, it asks to write /etc."""
    floor = floor_of(WORKSPACE, workspace_roots=("/ws",))
    intent = sandbox(managed(special("root", "read"), special("tmpdir", "write")))
    assert "writes: /etc" in refusal(floor, intent, {"TMPDIR": "/etc"})
    assert process(floor, intent, {"TMPDIR": "/daemon-tmp"}).access_of("/etc") is Access.READ


def test_a_clients_workspace_roots_do_not_widen_the_floor() -> None:
    floor = floor_of(WORKSPACE, workspace_roots=("/ws",))
    intent = sandbox(
        managed(special("root", "read"), special("project_roots", "write")), roots=("/other",)
    )
    assert "writes: /other" in refusal(floor, intent)


def test_reading_what_the_floor_denies_is_refused() -> None:
    floor = floor_of(profile(managed(special("root", "read"), path("/home/u/.ssh", "deny"))))
    message = refusal(floor, sandbox(managed(special("root", "read"))))
    assert "it would exceed reads." in message
    assert "reads: /home/u/.ssh (read; the required sandbox denies it)" in message


@pytest.mark.parametrize(
    ("permissions", "named"),
    [
        ({"type": "disabled"}, "permissions.type disabled runs it unconfined"),
        ({"type": "external", "network": "restricted"}, "permissions.type external"),
        (
            {"type": "managed", "file_system": {"type": "unrestricted"}, "network": "restricted"},
            "writes: / (the required sandbox allows reading only)",
        ),
    ],
    ids=["disabled", "external", "unrestricted-filesystem"],
)
def test_unconfined_filesystems_are_refused(permissions: dict[str, Any], named: str) -> None:
    message = refusal(floor_of(), sandbox(permissions))
    assert named in message


def test_filesystem_calls_compare_their_temporary_directories_and_ignore_the_network() -> None:
    floor = floor_of(WORKSPACE, workspace_roots=("/ws",))
    wide = sandbox(
        managed(special("root", "read"), special("tmpdir", "write"), network="enabled"),
        temporaryDirectories=["file:///etc"],
    )
    with pytest.raises(InvalidParams, match="writes: /etc"):
        floor.filesystem_rules(wide, HOST)
    fits = sandbox(
        managed(special("root", "read"), special("tmpdir", "write"), network="enabled"),
        temporaryDirectories=["file:///daemon-tmp"],
    )
    rules, _, _ = floor.filesystem_rules(fits, HOST)
    assert rules.access_of("/daemon-tmp") is Access.WRITE


# --- deny globs and pins ------------------------------------------------------------------------


def rule_set(*rules: tuple[str, Access], **kwargs: Any) -> RuleSet:
    return RuleSet(
        filesystem_restricted=True,
        rules=tuple(PathRule(p, access, kind=PathKind.DIRECTORY) for p, access in rules),
        network=NetworkMode.RESTRICTED,
        **kwargs,
    )


def test_a_floor_deny_glob_must_be_the_requests_too() -> None:
    floor = rule_set(("/", Access.READ), deny_globs=("/srv/**/*.key",))
    assert [e.kind for e in excesses(rule_set(("/", Access.READ)), floor)] == ["reads"]
    same = rule_set(("/", Access.READ), deny_globs=("/srv/**/*.key",))
    assert excesses(same, floor) == []
    denied_tree = rule_set(("/", Access.READ), ("/srv", Access.DENY))
    assert excesses(denied_tree, floor) == []
    partly = rule_set(("/", Access.READ), ("/srv", Access.DENY), ("/srv/pub", Access.READ))
    assert [e.kind for e in excesses(partly, floor)] == ["reads"]


def test_a_glob_in_the_floor_profile_refuses_a_request_without_it() -> None:
    floor = floor_of(profile(managed(special("root", "read"), glob("/srv/**/notes"))))
    assert "what matches /srv/**/notes" in refusal(floor, sandbox(managed(special("root", "read"))))
    intent = sandbox(managed(special("root", "read"), glob("/srv/**/notes")))
    assert process(floor, intent).effective("/srv/data/notes") is Access.DENY


def test_a_request_that_could_move_a_pinned_path_is_refused() -> None:
    floor = rule_set(("/", Access.READ), ("/tmp", Access.WRITE), pinned=("/tmp/ws",))
    loose = rule_set(("/", Access.READ), ("/tmp", Access.WRITE))
    assert [e.detail for e in excesses(loose, floor)] == [
        "/tmp/ws could be moved (the required sandbox pins it)"
    ]
    pinned = rule_set(("/", Access.READ), ("/tmp", Access.WRITE), pinned=("/tmp/ws",))
    assert excesses(pinned, floor) == []


def test_every_path_is_compared_not_only_the_rule_paths_of_one_side() -> None:
    """A deeper rule on either side splits the comparison: /a read in the request but
    /a/b denied in the floor is caught at /a/b."""
    floor = rule_set(("/", Access.READ), ("/a/b", Access.DENY))
    request = rule_set(("/", Access.DENY), ("/a", Access.READ))
    assert [(e.kind, e.detail.split(" ")[0]) for e in excesses(request, floor)] == [
        ("reads", "/a/b")
    ]


# --- the floor itself ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["disabled", "external"])
def test_a_floor_that_confines_nothing_is_a_configuration_error(kind: str) -> None:
    wire: dict[str, Any] = (
        {"type": kind} if kind == "disabled" else {"type": kind, "network": "enabled"}
    )
    with pytest.raises(ConfigError, match=f"type {kind} confines nothing"):
        PolicyFloor(profile(wire))


def test_allows_reading_follows_symlinks() -> None:
    floor = floor_of(profile(managed(special("root", "read"), path("/srv/data", "deny"))))
    assert floor.allows_reading(HOST, "/ws/src/x")
    assert not floor.allows_reading(HOST, "/srv/data/notes")
    assert not floor.allows_reading(HOST, "/home/u/docs/notes")  # -> /srv/data/notes
