"""``capabilityRoots/discoverV1`` against a real daemon on loopback, on real trees.

Expected answers are the reference's (v0.171.0, compared by hand: docs/capabilities.md):
which manifests count and in which order, the warnings' exact words, the limits, and what a
root's ``sandbox`` hides.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.fs.helpers import glob_entry, path_entry, sandbox, special_entry, uri
from tests.support.client import WsClient

DISCOVER = "capabilityRoots/discoverV1"
MIB = 1024 * 1024
MANIFEST = ".codex-plugin/plugin.json"


def build(root: Path, files: dict[str, str | bytes]) -> Path:
    """Create ``files`` (relative path -> content) below ``root``."""
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def discover(client: WsClient, *roots: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``roots`` of a successful discovery."""
    result: list[dict[str, Any]] = client.request(DISCOVER, {"roots": list(roots)})["roots"]
    return result


def one(client: WsClient, root: Path, **extra: Any) -> dict[str, Any]:
    """The answer for a single root ``root`` (id ``r``)."""
    (answer,) = discover(client, {"id": "r", "path": uri(root), **extra})
    return answer


def text(root: Path, relative: str, contents: str) -> dict[str, str]:
    """A ``TextFile`` as the wire shows it."""
    return {"path": uri(root / relative), "contents": contents}


def skill_paths(answer: dict[str, Any], root: Path) -> list[str]:
    """The skills' instruction paths, relative to ``root``."""
    prefix = uri(root) + "/"
    return [skill["instructions"]["path"].removeprefix(prefix) for skill in answer["skills"]]


def short(warnings: list[str], root: Path) -> list[str]:
    """Warnings with the root's URI replaced by ``@``."""
    return [warning.replace(uri(root), "@") for warning in warnings]


# --- what is found ------------------------------------------------------------------------


def test_a_plugin_with_skills_is_read_whole(client: WsClient, workspace: Path) -> None:
    """Manifest precedence (.codex > .claude > .cursor), .mcp.json by default, skills sorted by
    URI at any depth up to the walk's limit, agents/openai.yaml as metadata, one namespace
    manifest per plugin directory (the root's own first)."""
    root = build(
        workspace / "plug",
        {
            MANIFEST: '{"name":"codex"}',
            ".claude-plugin/plugin.json": '{"name":"claude"}',
            ".cursor-plugin/plugin.json": '{"name":"cursor"}',
            ".mcp.json": '{"mcpServers":{}}',
            "SKILL.md": "root skill",
            "skills/a/SKILL.md": "# a",
            "skills/a/agents/openai.yaml": "x: 1",
            "skills/a/openai.yaml": "not metadata",
            "skills/b/SKILL.md": "# b",
            "skills/b/skill.md": "not a skill",
            "deep/1/2/3/4/SKILL.md": "d4",
            "deep/1/2/3/4/5/SKILL.md": "d5",
            "deep/1/2/3/4/5/6/SKILL.md": "too deep",
            ".hidden/SKILL.md": "hidden directories are walked",
            "sub/.cursor-plugin/plugin.json": '{"name":"sub-cursor"}',
            "sub/.claude-plugin/plugin.json": '{"name":"sub"}',
            "other/.codex-plugin/other.json": "{}",
            "plugin.json": "{}",
        },
    )
    assert one(client, root) == {
        "id": "r",
        "path": uri(root),
        "plugin": {
            "manifest": text(root, MANIFEST, '{"name":"codex"}'),
            "mcpConfig": text(root, ".mcp.json", '{"mcpServers":{}}'),
            "appsConfig": None,
        },
        "skills": [
            {
                "instructions": text(root, ".hidden/SKILL.md", "hidden directories are walked"),
                "metadata": None,
            },
            {"instructions": text(root, "SKILL.md", "root skill"), "metadata": None},
            {"instructions": text(root, "deep/1/2/3/4/5/SKILL.md", "d5"), "metadata": None},
            {"instructions": text(root, "deep/1/2/3/4/SKILL.md", "d4"), "metadata": None},
            {
                "instructions": text(root, "skills/a/SKILL.md", "# a"),
                "metadata": text(root, "skills/a/agents/openai.yaml", "x: 1"),
            },
            {"instructions": text(root, "skills/b/SKILL.md", "# b"), "metadata": None},
        ],
        "namespaceManifests": [
            text(root, MANIFEST, '{"name":"codex"}'),
            text(root, "sub/.claude-plugin/plugin.json", '{"name":"sub"}'),
        ],
        "warnings": [],
        "error": None,
    }


def test_a_root_inside_a_plugin_names_it_and_roots_keep_their_order(
    client: WsClient, workspace: Path
) -> None:
    """Without a manifest of its own a root's namespace is the nearest ancestor's manifest;
    answers come in request order, duplicate ids included."""
    root = build(
        workspace / "plug",
        {".claude-plugin/plugin.json": "{}", "x/skills/s/SKILL.md": "s", "x/y/z.txt": ""},
    )
    first, second, third = discover(
        client,
        {"id": "same", "path": uri(root / "x")},
        {"id": "same", "path": uri(root / "x" / "y")},
        {"id": "top", "path": uri(root)},
    )
    manifest = text(root, ".claude-plugin/plugin.json", "{}")
    assert (first["id"], first["plugin"], first["namespaceManifests"]) == ("same", None, [manifest])
    assert skill_paths(first, root) == ["x/skills/s/SKILL.md"]
    assert (second["id"], second["skills"], second["namespaceManifests"]) == (
        "same",
        [],
        [manifest],
    )
    assert third["plugin"]["manifest"] == manifest
    assert third["plugin"]["mcpConfig"] is None  # no .mcp.json: nothing, no warning
    assert third["warnings"] == []


@pytest.mark.parametrize(
    ("manifest", "files", "mcp", "apps", "warnings"),
    [
        (
            '{"mcpServers":"./conf/m.json","apps":"./conf/a.json"}',
            {},
            "conf/m.json",
            "conf/a.json",
            [],
        ),
        ('{"mcpServers":{"inline":{}},"apps":{"x":1}}', {}, None, None, []),
        ('{"mcpServers":"./x/./m.json/"}', {"x/m.json": "m"}, "x/m.json", None, []),
        ('["./conf/m.json", "./conf/a.json"]', {}, "conf/m.json", "conf/a.json", []),
        ("{not json", {}, ".mcp.json", None, []),
        ('{"mcpServers":"./conf/m.json","mcpServers":"./conf/a.json"}', {}, ".mcp.json", None, []),
        ('{"mcpServers":"./m.json","x":NaN}', {"m.json": "m"}, ".mcp.json", None, []),
        (
            '{"mcpServers":"conf/m.json","apps":"/etc/hostname"}',
            {},
            ".mcp.json",
            None,
            [
                "ignoring mcpServers in @/.codex-plugin/plugin.json: path must start with `./`",
                "ignoring apps in @/.codex-plugin/plugin.json: path must start with `./`",
            ],
        ),
        (
            '{"mcpServers":"./../m.json","apps":".//etc/hostname"}',
            {},
            ".mcp.json",
            None,
            [
                "ignoring mcpServers in @/.codex-plugin/plugin.json: path must remain below "
                "the capability root",
                "ignoring apps in @/.codex-plugin/plugin.json: path must remain below the "
                "capability root",
            ],
        ),
    ],
    ids=[
        "files",
        "inline",
        "normalized",
        "positional",
        "invalid-json",
        "repeated",
        "nan",
        "no-dot-slash",
        "escapes",
    ],
)
def test_mcp_and_apps_configurations_follow_the_manifest(
    client: WsClient,
    workspace: Path,
    manifest: str,
    files: dict[str, str],
    mcp: str | None,
    apps: str | None,
    warnings: list[str],
) -> None:
    """What ``mcpServers`` and ``apps`` lead to; a manifest that does not parse is still the
    plugin's manifest (the client judges it), with the default ``.mcp.json``."""
    root = build(
        workspace / "plug",
        {
            MANIFEST: manifest,
            ".mcp.json": "default",
            "conf/m.json": "m",
            "conf/a.json": "a",
            **files,
        },
    )
    answer = one(client, root)
    plugin = answer["plugin"]
    assert plugin["manifest"] == text(root, MANIFEST, manifest)
    shown = {
        key: None if plugin[key] is None else plugin[key]["path"]
        for key in ("mcpConfig", "appsConfig")
    }
    assert shown == {
        "mcpConfig": None if mcp is None else uri(root / mcp),
        "appsConfig": None if apps is None else uri(root / apps),
    }
    assert short(answer["warnings"], root) == warnings


# --- broken files and limits ----------------------------------------------------------------


def test_broken_files_are_warnings_and_the_next_manifest_counts(
    client: WsClient, workspace: Path
) -> None:
    """Text that is not UTF-8 and files over 1 MiB are left out with the reference's words; an
    unreadable first manifest of the root gives way to the next one, of a nested plugin it
    leaves that plugin without a namespace manifest."""
    root = build(
        workspace / "plug",
        {
            MANIFEST: b"{\xff}",
            ".claude-plugin/plugin.json": "{}",
            "nested/.codex-plugin/plugin.json": b"\xe2\x82",
            "nested/.claude-plugin/plugin.json": "{}",
            "a/SKILL.md": b"ab\xe2\x82x",
            "b/SKILL.md": "b" * MIB,
            "c/SKILL.md": "c" * (MIB + 1),
            "d/SKILL.md": "d",
            "d/agents/openai.yaml": b"\xed\xa0\x80",
            "e/SKILL.md": "",
        },
    )
    answer = one(client, root)
    assert answer["plugin"]["manifest"] == text(root, ".claude-plugin/plugin.json", "{}")
    assert answer["namespaceManifests"] == [text(root, ".claude-plugin/plugin.json", "{}")]
    assert skill_paths(answer, root) == ["b/SKILL.md", "d/SKILL.md", "e/SKILL.md"]
    assert answer["skills"][1]["metadata"] is None
    assert len(answer["skills"][0]["instructions"]["contents"]) == MIB
    assert short(answer["warnings"], root) == [
        "capability file @/.codex-plugin/plugin.json is not UTF-8: invalid utf-8 sequence of "
        "1 bytes from index 1",
        "capability file @/nested/.codex-plugin/plugin.json is not UTF-8: incomplete utf-8 "
        "byte sequence from index 0",
        "capability file @/a/SKILL.md is not UTF-8: invalid utf-8 sequence of 2 bytes from index 2",
        "capability file @/c/SKILL.md exceeds the 1048576-byte limit",
        "capability file @/d/agents/openai.yaml is not UTF-8: invalid utf-8 sequence of 1 "
        "bytes from index 0",
    ]


def test_a_root_carries_at_most_16_mib(client: WsClient, workspace: Path) -> None:
    """Files past the root's 16 MiB budget are left out, each with a warning; smaller files
    after them still fit."""
    files: dict[str, str | bytes] = {f"s{i:02d}/SKILL.md": "x" * MIB for i in range(17)}
    files["s03/SKILL.md"] = "x" * (MIB - 8)
    files["s18/SKILL.md"] = "tiny"
    root = build(workspace / "big", files)
    answer = one(client, root)
    assert skill_paths(answer, root) == [f"s{i:02d}/SKILL.md" for i in range(16)] + ["s18/SKILL.md"]
    assert answer["warnings"] == ["capability root bundle exceeds the 16777216-byte limit"]


def test_the_walk_is_bounded(client: WsClient, workspace: Path) -> None:
    """2,000 directories per root: past that the scan stops with a warning."""
    root = build(workspace / "many", {"d0000/SKILL.md": "first", "zz/SKILL.md": "never read"})
    for index in range(2001):
        (root / f"d{index:04d}").mkdir(exist_ok=True)
    answer = one(client, root)
    assert skill_paths(answer, root) == ["d0000/SKILL.md"]
    assert short(answer["warnings"], root) == [
        "capability scan reached its traversal limit (root: @)"
    ]


# --- roots that cannot be scanned, and bad requests -------------------------------------------


def test_each_bad_root_has_its_own_error(client: WsClient, workspace: Path) -> None:
    """Missing, a file, a symlink loop, a dangling link, another host: the root's ``error``;
    a symlink to a directory is scanned; nothing fails the request."""
    build(workspace, {"file.txt": "x", "real/SKILL.md": "via link"})
    (workspace / "loop").symlink_to(workspace / "loop")
    (workspace / "dangling").symlink_to(workspace / "nowhere")
    (workspace / "link").symlink_to(workspace / "real")
    answers = discover(
        client,
        *(
            {"id": name, "path": uri(workspace / name)}
            for name in ("missing", "file.txt", "loop", "dangling", "link")
        ),
        {"id": "remote", "path": "file://otherhost/x"},
    )
    assert [answer["error"] for answer in answers] == [
        f"failed to inspect capability root {uri(workspace / 'missing')}: No such file or "
        "directory (os error 2)",
        f"capability root {uri(workspace / 'file.txt')} is not a directory",
        f"failed to inspect capability root {uri(workspace / 'loop')}: Too many levels of "
        "symbolic links (os error 40)",
        f"failed to inspect capability root {uri(workspace / 'dangling')}: No such file or "
        "directory (os error 2)",
        None,
        "failed to inspect capability root file://otherhost/x: 'file://otherhost/x' is "
        "invalid on 'linux'",
    ]
    assert answers[4]["skills"] == [
        {"instructions": text(workspace, "link/SKILL.md", "via link"), "metadata": None}
    ]
    failed = answers[0]
    assert (failed["plugin"], failed["skills"], failed["namespaceManifests"]) == (None, [], [])


def test_root_paths_are_echoed_as_the_reference_spells_them(
    client: WsClient, workspace: Path
) -> None:
    """The URI is shown in its URL form (trailing slash kept, dot segments gone) and what is
    found below it extends that spelling."""
    root = build(workspace / "a b", {"s/SKILL.md": "s"})
    sent = "FILE://localhost" + uri(root).removeprefix("file://").replace("%20", " ") + "/x/../"
    (answer,) = discover(client, {"id": "r", "path": sent})
    assert answer["path"] == uri(root) + "/"
    assert skill_paths(answer, root) == ["s/SKILL.md"]


def test_names_are_encoded_and_sorted_as_the_reference_does(
    client: WsClient, workspace: Path
) -> None:
    """Skills sort by their URIs, and a URI keeps what a URL path may hold (``[``, ``^``,
    ``|``) while escaping the rest (v0.171.0 sends exactly these)."""
    names = ["a|b", "a[b]", "a^b", "a b", "a%b", "é", "a#b", "a\\b"]
    root = build(workspace / "names", {f"{name}/SKILL.md": name for name in names})
    prefix = uri(root) + "/"
    paths = [skill["instructions"]["path"] for skill in one(client, root)["skills"]]
    assert [path.removeprefix(prefix) for path in paths] == [
        f"{name}/SKILL.md"
        for name in ("%C3%A9", "a%20b", "a%23b", "a%25b", "a%5Cb", "a[b]", "a^b", "a|b")
    ]


@pytest.mark.parametrize(
    ("params", "code", "message"),
    [
        (
            {"roots": [{"id": "a", "path": "relative/path"}]},
            -32602,
            "invalid URI: relative URL without a base",
        ),
        (
            {"roots": [{"id": "a", "path": "http://host/x"}]},
            -32602,
            "unsupported path URI scheme `http`",
        ),
        (
            {"roots": [{"id": "a", "path": "file:///tmp?q"}]},
            -32602,
            "query parameters are not allowed in path URIs",
        ),
        (
            {"roots": [{"id": "a", "path": "file:///tmp/a%00b"}]},
            -32602,
            "'file:///tmp/a%00b' is invalid on 'linux'",
        ),
        ({"roots": [{"path": "file:///tmp"}]}, -32602, "missing field `id`"),
        ({}, -32602, "missing field `roots`"),
        (
            {"roots": [{"id": str(n), "path": "file:///nonexistent"} for n in range(129)]},
            -32600,
            "capability root discovery accepts at most 128 roots",
        ),
    ],
    ids=["relative", "scheme", "query", "nul", "no-id", "no-roots", "too-many"],
)
def test_bad_requests_fail_whole(
    client: WsClient, params: dict[str, Any], code: int, message: str
) -> None:
    """What the reference refuses for the whole request; the connection keeps working."""
    error = client.call(DISCOVER, params)["error"]
    assert error["code"] == code
    assert error["message"].startswith(message)
    assert client.request(DISCOVER, {"roots": []}) == {"roots": []}


def test_the_capability_is_advertised(client: WsClient) -> None:
    """``capabilityDiscoverySandbox``: discovery honours each root's sandbox."""
    info = client.request("environment/info")
    assert info["capabilities"]["capabilityDiscoverySandbox"] is True


# --- sandboxed discovery --------------------------------------------------------------------


@pytest.fixture
def guarded(workspace: Path) -> Path:
    """A plugin whose ``secret/`` subtree and ``*.env`` files a sandbox will deny; the secret
    skill is also reachable through a directory symlink and a hard link."""
    root = build(
        workspace / "plug",
        {
            MANIFEST: '{"mcpServers":"./secret/mcp.json","apps":"./apps.json"}',
            "apps.json": "apps",
            "secret/mcp.json": "SECRET-MCP",
            "secret/skills/hidden/SKILL.md": "SECRET-SKILL",
            "secret/.claude-plugin/plugin.json": "SECRET-MANIFEST",
            "skills/ok/SKILL.md": "visible",
            "skills/ok/agents/openai.yaml": "visible metadata",
            "skills/env/SKILL.md": "SECRET-GLOBBED",
            "skills/env/agents/openai.yaml": "not read: its skill is denied",
            "skills/cfg/SKILL.md": "ok",
            "skills/token.env": "SECRET-ENV",
        },
    )
    (root / "a-link").symlink_to(root / "secret")
    (root / "skills" / "hl").mkdir()
    os.link(root / "secret/skills/hidden/SKILL.md", root / "skills/hl/SKILL.md")
    return root


@pytest.mark.enforcement
def test_a_sandboxed_root_sees_no_denied_subtree(client: WsClient, guarded: Path) -> None:
    """A denied directory is neither listed into nor read — not by its name, not through a
    symlink, not through a hard link to a file in it — and neither is a file a deny glob
    matches, while everything allowed beside them is found as without a sandbox."""
    rules = sandbox(
        path_entry(guarded, "read"),
        path_entry(guarded / "secret", "deny"),
        glob_entry(str(guarded / "**" / "*.env")),
        glob_entry(str(guarded / "skills" / "env" / "*.md")),
    )
    answer = one(client, guarded, sandbox=rules)
    assert "SECRET" not in json.dumps(answer)
    assert answer["plugin"]["manifest"]["path"] == uri(guarded / MANIFEST)
    assert answer["plugin"]["mcpConfig"] is None
    assert answer["plugin"]["appsConfig"] == text(guarded, "apps.json", "apps")
    assert skill_paths(answer, guarded) == ["skills/cfg/SKILL.md", "skills/ok/SKILL.md"]
    assert answer["skills"][1]["metadata"] == text(
        guarded, "skills/ok/agents/openai.yaml", "visible metadata"
    )
    assert [m["path"] for m in answer["namespaceManifests"]] == [uri(guarded / MANIFEST)]
    assert short(answer["warnings"], guarded) == [
        # ``a-link`` sorts first, so the walk meets the denied directory through it (and
        # then does not enter ``secret`` a second time).
        "failed to scan capability path @/a-link: Permission denied (os error 13)",
        "failed to inspect capability file @/secret/mcp.json: Permission denied (os error 13)",
        "failed to read capability file @/skills/env/SKILL.md: Permission denied (os error 13)",
        # Ours: the reference reads a hard link to a denied file (docs/capabilities.md).
        "failed to read capability file @/skills/hl/SKILL.md: Permission denied (os error 13)",
    ]
    # The allowed counterpart: without the sandbox the same root shows the secrets.
    plain = one(client, guarded)
    assert "SECRET-SKILL" in json.dumps(plain)
    assert plain["plugin"]["mcpConfig"] == text(guarded, "secret/mcp.json", "SECRET-MCP")


@pytest.mark.enforcement
def test_a_sandbox_that_hides_or_denies_the_root(client: WsClient, guarded: Path) -> None:
    """A root outside every rule does not exist; a denied root is a directory that cannot be
    read (a warning for the walk and for each manifest looked for), as in the reference; a
    root above a readable rule shows only what lies under the rule."""
    hidden = one(client, guarded, sandbox=sandbox())
    assert hidden["error"] == (
        f"failed to inspect capability root {uri(guarded)}: No such file or directory (os error 2)"
    )
    denied = one(
        client, guarded, sandbox=sandbox(special_entry("root", "read"), path_entry(guarded, "deny"))
    )
    assert (denied["error"], denied["plugin"], denied["skills"]) == (None, None, [])
    assert short(denied["warnings"], guarded) == [
        "failed to scan capability path @: Permission denied (os error 13)",
        *(
            f"failed to inspect capability file @/{manifest}: Permission denied (os error 13)"
            for manifest in (MANIFEST, ".claude-plugin/plugin.json", ".cursor-plugin/plugin.json")
        ),
    ]
    # The allowed counterpart: what lies under a readable rule is found, nothing else.
    narrow = one(client, guarded, sandbox=sandbox(path_entry(guarded / "skills", "read")))
    assert (narrow["error"], narrow["plugin"], narrow["namespaceManifests"]) == (None, None, [])
    assert skill_paths(narrow, guarded) == [
        "skills/cfg/SKILL.md",
        "skills/env/SKILL.md",
        "skills/hl/SKILL.md",
        "skills/ok/SKILL.md",
    ]
    assert narrow["warnings"] == []


def test_the_windows_level_mxc_fails_a_root_only_when_its_sandbox_restricts_reading(
    client: WsClient, guarded: Path
) -> None:
    """``windowsSandboxLevel: "mxc"`` on a root's sandbox, as the reference answers it: a
    sandbox that denies something fails that root (its words, as the root's ``error``); one
    that reads everything is scanned with the level ignored; the other roots are unaffected."""
    deny = sandbox(
        special_entry("root", "read"),
        path_entry(guarded / "secret", "deny"),
        windowsSandboxLevel="mxc",
    )
    read_all = sandbox(special_entry("root", "read"), windowsSandboxLevel="mxc")
    refused, ignored, plain = discover(
        client,
        {"id": "a", "path": uri(guarded), "sandbox": deny},
        {"id": "b", "path": uri(guarded), "sandbox": read_all},
        {"id": "c", "path": uri(guarded)},
    )
    assert refused["error"] == (
        f"failed to inspect capability root {uri(guarded)}: failed to prepare fs sandbox: "
        "failed to prepare MXC sandbox: native MXC is unavailable on this executor"
    )
    assert ignored["error"] is None and ignored["skills"] == plain["skills"] != []


def test_a_sandbox_needing_a_cwd_without_one_fails_the_request(
    client: WsClient, workspace: Path
) -> None:
    """A relative deny glob needs the policy cwd: the whole request is refused (-32602)."""
    rules = sandbox(path_entry(workspace, "read"), glob_entry("*.env"))
    error = client.call(
        DISCOVER,
        {
            "roots": [
                {"id": "ok", "path": uri(workspace)},
                {"id": "bad", "path": uri(workspace), "sandbox": rules},
            ]
        },
    )["error"]
    assert error == {
        "code": -32602,
        "message": "file system sandbox context with dynamic permissions requires cwd",
    }
