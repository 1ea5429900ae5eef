"""Binding symbolic intent to this host's paths (protocol.md §7.4-§7.9, sandbox.md §1.8-§1.9)."""

from __future__ import annotations

from typing import Any

import pytest

from executor.errors import InvalidParams, SandboxUnavailable
from executor.protocol.intent import Access, NetworkMode, parse_sandbox
from executor.sandbox.materialize import materialize
from executor.sandbox.purpose import Purpose
from executor.sandbox.rules import Feature, PathKind, RuleOrigin, RuleSet
from tests.sandbox.fakehost import FakeHost
from tests.sandbox.wire import REAL_CLIENT_SANDBOX, context, glob, managed, path, special

HOST = FakeHost(
    dirs=[
        "/ws/.git/hooks",
        "/ws/sub/deeper",
        "/ws/private",
        "/opt",
        "/home/u/.ssh",
        "/R/workspace",
    ],
    files=["/ws/top.env", "/ws/top.key", "/ws/sub/deeper/d.key", "/ws/sub/s.env", "/ws/w.txt"],
)
PROTECTED = (".git", ".agents", ".codex", ".aws")


def rules(sandbox: dict[str, Any], host: FakeHost = HOST, **kwargs: Any) -> RuleSet:
    """Materialize a wire sandbox for a process in /ws (child TMPDIR /ws-tmp unless given)."""
    kwargs.setdefault("process_cwd", "/ws")
    kwargs.setdefault("child_env", {})
    result = materialize(parse_sandbox(sandbox), host, **kwargs)
    assert result is not None
    return result


def table(rule_set: RuleSet) -> dict[str, str]:
    """path -> access, for compact assertions."""
    return {rule.path: str(rule.access) for rule in rule_set.rules}


def test_disabled_means_no_sandbox() -> None:
    """`disabled` materializes to nothing: the command runs unsandboxed."""
    assert materialize(parse_sandbox(context({"type": "disabled"})), HOST) is None


@pytest.mark.parametrize(
    ("permissions", "network"),
    [
        ({"type": "external", "network": "restricted"}, NetworkMode.RESTRICTED),
        (
            {"type": "managed", "file_system": {"type": "unrestricted"}, "network": "restricted"},
            NetworkMode.RESTRICTED,
        ),
        (
            {"type": "managed", "file_system": {"type": "unrestricted"}, "network": "enabled"},
            NetworkMode.ENABLED,
        ),
        (managed(special("root", "write"), network="enabled"), NetworkMode.ENABLED),
    ],
    ids=["external", "unrestricted-net-off", "unrestricted-net-on", "full-disk-write"],
)
def test_unrestricted_filesystem_keeps_only_the_network_part(
    permissions: dict[str, Any], network: NetworkMode
) -> None:
    """external / unrestricted / `:root = write` alone: no filesystem rules, network as asked."""
    result = rules(context(permissions))
    assert not result.filesystem_restricted
    assert result.network is network
    assert result.needs == ({Feature.NETWORK_BLOCK} if network is NetworkMode.RESTRICTED else set())


def test_read_only_is_root_read_and_nothing_else() -> None:
    """`[:root read]`: everything readable, nothing writable, executor state hidden."""
    result = rules(context(managed(special("root", "read"))))
    assert table(result) == {"/": "read", "/run/executor": "deny"}
    assert result.access_of("/ws/w.txt") is Access.READ
    # Hiding the executor's own state is hardening where a backend can: never a reason to refuse.
    assert result.needs == {Feature.WRITE_RESTRICTION, Feature.NETWORK_BLOCK}


def test_project_roots_without_workspace_roots_expand_to_nothing() -> None:
    """With only a cwd, `:project_roots` is dropped (the cwd is not substituted); /tmp stays."""
    result = rules(
        context(
            managed(
                special("root", "read"),
                special("project_roots", "write"),
                special("slash_tmp", "write"),
            ),
            cwd="/ws",
        )
    )
    assert result.access_of("/ws/w.txt") is Access.READ
    assert result.access_of("/tmp/x") is Access.WRITE
    assert any("expands to nothing" in note for note in result.notes)


@pytest.mark.parametrize(
    "sandbox",
    [
        context(
            managed(special("root", "read"), special("project_roots", "write")),
            cwd="/ws",
            roots=("/ws",),
        ),
        context(
            managed(special("root", "read"), special("project_roots", "write")),
            policyContext={"cwd": "file:///ws", "workspaceRoots": ["file:///ws"]},
        ),
        context(managed(special("root", "read"), path("/ws", "write")), cwd="/ws"),
    ],
    ids=["workspaceRoots", "policyContext", "explicit-path"],
)
def test_workspace_write_protects_metadata(sandbox: dict[str, Any]) -> None:
    """The workspace is writable; .git stays read-only; missing protected names too."""
    result = rules(sandbox)
    assert result.access_of("/ws/w.txt") is Access.WRITE
    for name in PROTECTED:
        assert result.access_of(f"/ws/{name}/x") is Access.READ, name
    missing = {rule.path for rule in result.rules if rule.kind is PathKind.MISSING}
    assert missing == {"/ws/.agents", "/ws/.codex", "/ws/.aws"}
    assert result.access_of("/tmp/x") is Access.READ and result.access_of("/home/u") is Access.READ
    assert Feature.MISSING_PATH_PROTECTION in result.needs


def test_no_cwd_no_roots_means_nothing_writable() -> None:
    """`[:root read, :project_roots write]` with neither cwd nor roots writes nowhere."""
    result = rules(
        context(managed(special("root", "read"), special("project_roots", "write"))),
        process_cwd="/ws",
    )
    assert not any(rule.access is Access.WRITE for rule in result.rules)


def test_minimal_hides_everything_else() -> None:
    """`[:minimal read, :project_roots write]` without roots: platform dirs readable, / is not."""
    result = rules(context(managed(special("minimal", "read"), special("project_roots", "write"))))
    assert table(result) == {"/bin": "read", "/etc": "read", "/lib": "read", "/usr": "read"}
    assert result.access_of("/ws/w.txt") is Access.DENY
    assert Feature.READ_RESTRICTION in result.needs


def test_empty_entries_deny_everything() -> None:
    """`[]`: no rule at all, so every path is denied."""
    result = rules(context(managed()))
    assert table(result) == {}
    assert result.access_of("/bin/sh") is Access.DENY


def test_unknown_special_entries_are_ignored() -> None:
    """An `unknown` kind (from a newer client) changes nothing, and says so."""
    unknown = {
        "path": {"type": "special", "value": {"kind": "unknown", "path": ":future"}},
        "access": "write",
    }
    result = rules(context(managed(special("root", "read"), unknown)))
    assert table(result) == {"/": "read", "/run/executor": "deny"}
    assert any(":future" in note for note in result.notes)


def test_most_specific_wins_and_reopens_inside_git() -> None:
    """`[:root read, /ws write, /ws/private deny, /ws/.git/allowed write]` (§7.5)."""
    host = FakeHost(dirs=["/ws/.git/allowed", "/ws/private"])
    result = rules(
        context(
            managed(
                special("root", "read"),
                path("/ws", "write"),
                path("/ws/private", "deny"),
                path("/ws/.git/allowed", "write"),
            )
        ),
        host,
    )
    assert result.access_of("/ws/w.txt") is Access.WRITE
    assert result.access_of("/ws/.git/x") is Access.READ
    assert result.access_of("/ws/.git/allowed/y") is Access.WRITE
    assert result.access_of("/ws/private/secret") is Access.DENY


def test_root_write_with_a_deny_protects_root_names() -> None:
    """`[:root write, /ws/sub deny]`: all writable but /ws/sub; /.git etc. read-only (§7.5)."""
    result = rules(context(managed(special("root", "write"), path("/ws/sub", "deny"))))
    assert result.access_of("/ws/w.txt") is Access.WRITE
    assert result.access_of("/ws/sub/x") is Access.DENY
    for name in PROTECTED:
        assert result.access_of(f"/{name}") is Access.READ


def test_ties_at_one_path_go_deny_write_read() -> None:
    """At the same path, deny beats write beats read."""
    assert (
        rules(
            context(managed(special("root", "read"), path("/ws", "read"), path("/ws", "write")))
        ).access_of("/ws/w.txt")
        is Access.WRITE
    )
    assert (
        rules(
            context(managed(special("root", "read"), path("/ws", "write"), path("/ws", "deny")))
        ).access_of("/ws/w.txt")
        is Access.DENY
    )


def test_deny_globs_expand_existing_matches_up_to_depth() -> None:
    """`**/*.key` with depth 1 masks /ws/top.key but not /ws/sub/deeper/d.key; the pattern stays."""
    result = rules(
        context(
            managed(
                special("root", "read"),
                special("project_roots", "write"),
                glob("**/*.key"),
                depth=1,
            ),
            cwd="/ws",
            roots=("/ws",),
        )
    )
    assert result.access_of("/ws/top.key") is Access.DENY
    assert result.access_of("/ws/sub/deeper/d.key") is Access.WRITE
    assert result.deny_globs == ("/ws/**/*.key",)
    assert result.effective("/ws/sub/deeper/d.key") is Access.DENY  # at access time, every level
    assert result.effective("/ws/sub/new.key") is Access.DENY


def test_deny_glob_without_depth_scans_every_level() -> None:
    """Without `glob_scan_max_depth` all levels are scanned; relative globs use the policy cwd."""
    result = rules(
        context(
            managed(special("root", "read"), special("project_roots", "write"), glob("**/*.env")),
            cwd="/ws",
            roots=("/ws",),
        )
    )
    assert {r.path for r in result.rules if r.origin is RuleOrigin.DENY_GLOB} == {
        "/ws/top.env",
        "/ws/sub/s.env",
    }


def test_deny_glob_with_a_trailing_slash_finds_the_directory() -> None:
    """`**/deeper/` (git: directories only) masks the directory; it used to match no path."""
    result = rules(
        context(
            managed(special("root", "read"), special("project_roots", "write"), glob("**/deeper/")),
            cwd="/ws",
            roots=("/ws",),
        )
    )
    assert {r.path for r in result.rules if r.origin is RuleOrigin.DENY_GLOB} == {"/ws/sub/deeper"}
    assert result.effective("/ws/sub/deeper/d.key") is Access.DENY
    assert result.effective("/ws/sub/s.env") is Access.WRITE


def test_home_and_project_root_glob_forms() -> None:
    """`~/` globs use userHomeDir; `codex-project-roots://` globs each workspace root."""
    sandbox = context(
        managed(special("root", "read"), glob("~/.ssh/**"), glob("codex-project-roots://**/*.key")),
        cwd="/ws",
        roots=("/ws", "/opt"),
        userHomeDir="file:///home/u",
    )
    assert rules(sandbox).deny_globs == ("/home/u/.ssh/**", "/ws/**/*.key", "/opt/**/*.key")


def test_tmpdir_comes_from_the_child_for_processes_and_the_context_for_fs() -> None:
    """`:tmpdir` is the child's TMPDIR for processes, `temporaryDirectories` for fs calls."""
    host = FakeHost(dirs=["/ws", "/child-tmp", "/ctx-tmp"])
    sandbox = context(
        managed(special("root", "read"), special("tmpdir", "write")),
        cwd="/ws",
        temporaryDirectories=["file:///ctx-tmp"],
    )
    process = rules(sandbox, host, child_env={"TMPDIR": "/child-tmp"})
    assert (
        process.access_of("/child-tmp/x") is Access.WRITE
        and process.access_of("/ctx-tmp/x") is Access.READ
    )
    fs = rules(sandbox, host, purpose=Purpose.FILESYSTEM)
    assert (
        fs.access_of("/ctx-tmp/x") is Access.WRITE and fs.access_of("/child-tmp/x") is Access.READ
    )


def test_filesystem_calls_need_a_cwd_for_dynamic_entries() -> None:
    """An fs sandbox with `:project_roots` and no cwd is the documented -32602."""
    with pytest.raises(
        InvalidParams, match="file system sandbox context with dynamic permissions requires cwd"
    ):
        rules(
            context(managed(special("project_roots", "write")), roots=("/ws",)),
            purpose=Purpose.FILESYSTEM,
        )


def test_gitdir_pointer_target_is_protected() -> None:
    """A `.git` file pointing elsewhere protects the git dir it names, when it is writable."""
    host = FakeHost(dirs=["/ws", "/ws/gitdirs/wt"], gitdirs={"/ws/.git": "/ws/gitdirs/wt"})
    result = rules(context(managed(special("root", "read"), path("/ws", "write"))), host)
    assert result.access_of("/ws/gitdirs/wt/hooks/x") is Access.READ
    assert any(rule.origin is RuleOrigin.GITDIR for rule in result.rules)


def test_executor_state_is_always_hidden() -> None:
    """The executor's own directories are denied even under a writable root."""
    host = FakeHost(dirs=["/ws"], hidden=("/ws/.executor-state",))
    result = rules(context(managed(special("root", "read"), path("/ws", "write"))), host)
    assert result.access_of("/ws/.executor-state/x") is Access.DENY


def test_skip_if_missing_drops_the_entry() -> None:
    """`missing_path_behavior: skip` ignores entries for paths that do not exist."""
    result = rules(
        context(
            managed(
                special("root", "read"), {**path("/nope", "deny"), "missing_path_behavior": "skip"}
            )
        )
    )
    assert "/nope" not in table(result)


def test_real_client_payload_materializes_like_the_reference() -> None:
    """§7.12: workspace and /tmp writable, protected names read-only, network off."""
    result = rules(REAL_CLIENT_SANDBOX, process_cwd="/R/workspace")
    assert result.access_of("/R/workspace/inside.txt") is Access.WRITE
    assert result.access_of("/R/outside/x.txt") is Access.READ
    assert result.access_of("/tmp/scratch") is Access.WRITE
    assert result.access_of("/R/workspace/.git/config") is Access.READ
    assert result.access_of("/tmp/.codex/x") is Access.READ
    assert result.network is NetworkMode.RESTRICTED


def test_legacy_workspace_write_with_writable_roots() -> None:
    """sandbox.md §1.9: every writable root gets the metadata protection, /opt included."""
    result = rules(
        context(
            managed(
                special("root", "read"),
                special("project_roots", "write"),
                path("/opt", "write"),
                special("slash_tmp", "write"),
            ),
            cwd="/ws",
            roots=("/ws",),
        )
    )
    for root in ("/ws", "/opt", "/tmp"):
        for name in PROTECTED:
            assert result.access_of(f"{root}/{name}/x") is Access.READ, (root, name)


# --- the ground under protected metadata (issue 11, class 4) ---------------------------------

NESTED = FakeHost(dirs=["/tmp/box/ws/.git", "/tmp/box/other", "/home/u/.ssh"])
WORKSPACE_WRITE = managed(
    special("root", "read"), special("project_roots", "write"), special("slash_tmp", "write")
)


def test_workspace_and_directories_up_to_a_writable_parent_are_pinned() -> None:
    """/tmp/box/ws under the writable /tmp: ws and box are pinned; /tmp itself, whose parent
    is read-only, needs no pin (it cannot be moved anyway)."""
    result = rules(context(WORKSPACE_WRITE, cwd="/tmp/box/ws", roots=("/tmp/box/ws",)), NESTED)
    assert result.pinned == ("/tmp/box", "/tmp/box/ws")
    assert result.pins_below("/tmp/box") and result.pins_below("/tmp")
    assert not result.pins_below("/tmp/box/other")


def test_a_workspace_in_a_read_only_parent_needs_no_pin() -> None:
    result = rules(context(WORKSPACE_WRITE, cwd="/ws", roots=("/ws",)))
    assert result.pinned == ()


def test_protected_names_apply_at_every_pinned_level() -> None:
    """A .git planted in the workspace's parent would be found by git on the host."""
    result = rules(context(WORKSPACE_WRITE, cwd="/tmp/box/ws", roots=("/tmp/box/ws",)), NESTED)
    for directory in ("/tmp", "/tmp/box", "/tmp/box/ws"):
        for name in PROTECTED:
            assert result.access_of(f"{directory}/{name}") is Access.READ, (directory, name)
    assert result.access_of("/tmp/box/other/.git") is Access.WRITE  # not on the way to a root


def test_extra_protected_names_from_the_request() -> None:
    """``protected_names`` (an executor extension) adds names; single components only."""
    permissions = managed(special("root", "read"), special("project_roots", "write"))
    permissions["file_system"]["protected_names"] = [".vscode", ".mcp.json"]
    result = rules(context(permissions, cwd="/ws", roots=("/ws",)))
    assert result.access_of("/ws/.vscode/tasks.json") is Access.READ
    assert result.access_of("/ws/.mcp.json") is Access.READ
    assert result.access_of("/ws/.git") is Access.READ  # the built-in names stay
    for bad in (["a/b"], [".."], [""], "not-a-list", [1]):
        permissions["file_system"]["protected_names"] = bad
        with pytest.raises(InvalidParams, match="protected_names"):
            rules(context(permissions, cwd="/ws", roots=("/ws",)))


def test_a_symlink_planted_in_a_writable_directory_grants_nothing() -> None:
    """``ws2 -> /home/u/.ssh`` in the writable /tmp: a later request for ws2 is refused."""
    host = FakeHost(dirs=["/tmp/box", "/home/u/.ssh"], symlinks={"/tmp/box/ws2": "/home/u/.ssh"})
    with pytest.raises(SandboxUnavailable, match="symlink /tmp/box/ws2"):
        rules(context(WORKSPACE_WRITE, cwd="/tmp/box/ws2", roots=("/tmp/box/ws2",)), host)
    # Also when this request's rules do not write /tmp: others could have planted it there.
    only_roots = managed(special("root", "read"), special("project_roots", "write"))
    with pytest.raises(SandboxUnavailable, match="symlink /tmp/box/ws2"):
        rules(context(only_roots, cwd="/tmp/box/ws2", roots=("/tmp/box/ws2",)), host)


def test_a_symlink_in_a_directory_no_sandbox_can_write_is_followed() -> None:
    """``/srv/proj -> /data/proj`` made by the operator: the rules use the real path."""
    host = FakeHost(dirs=["/srv", "/data/proj"], symlinks={"/srv/proj": "/data/proj"})
    only_roots = managed(special("root", "read"), special("project_roots", "write"))
    result = rules(context(only_roots, cwd="/srv/proj", roots=("/srv/proj",)), host)
    assert result.access_of("/data/proj/f") is Access.WRITE


def test_a_symlinked_protected_name_is_pinned_and_never_widens_access() -> None:
    """``ws/.git -> /home/u/.ssh`` (planted): the link is pinned, the denied target stays
    denied; ``ws/.git -> ws/real-git`` keeps its target read-only."""
    host = FakeHost(
        dirs=["/ws/real-git", "/home/u/.ssh"],
        symlinks={"/ws/.git": "/home/u/.ssh", "/ws/.codex": "/ws/real-git"},
    )
    permissions = managed(
        special("root", "read"), special("project_roots", "write"), path("/home/u/.ssh", "deny")
    )
    result = rules(context(permissions, cwd="/ws", roots=("/ws",)), host)
    assert "/ws/.git" in result.pinned and "/ws/.codex" in result.pinned
    assert result.access_of("/home/u/.ssh/id") is Access.DENY
    assert result.access_of("/ws/real-git/config") is Access.READ
