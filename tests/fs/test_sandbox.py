"""Sandboxed filesystem calls (protocol.md §5.11, §7): the daemon enforces the rules itself."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.sandbox.host import state_directory
from tests.fs.helpers import (
    b64,
    error,
    glob_entry,
    path_entry,
    sandbox,
    special_entry,
    unb64,
    uri,
    workspace_sandbox,
)
from tests.support.client import WsClient

EROFS = (-32603, "Read-only file system (os error 30)")
EACCES = (-32600, "Permission denied (os error 13)")
ENOENT = (-32004, "No such file or directory (os error 2)")


@pytest.fixture
def fsws(tmp_path: Path) -> Path:
    """The workspace of the captured example: s.env, p.txt, private/x, and an outside file."""
    root = tmp_path.resolve()
    workspace = root / "fsws"
    (workspace / "private").mkdir(parents=True)
    (workspace / "s.env").write_bytes(b"secret\n")
    (workspace / "p.txt").write_bytes(b"pub\n")
    (workspace / "private" / "x").write_bytes(b"priv\n")
    (root / "outside.txt").write_bytes(b"outside\n")
    return workspace


@pytest.fixture
def captured(fsws: Path) -> dict[str, Any]:
    """The sandbox of the captured §7.12 ``fs/readFile`` request, moved to this workspace."""
    return {
        "permissions": {
            "type": "managed",
            "file_system": {
                "type": "restricted",
                "entries": [
                    {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
                    {
                        "path": {"type": "special", "value": {"kind": "project_roots"}},
                        "access": "write",
                    },
                    {"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "deny"},
                    {"path": {"type": "path", "path": uri(fsws / "private")}, "access": "deny"},
                ],
            },
            "network": "restricted",
        },
        "windowsSandboxLevel": "disabled",
        "cwd": uri(fsws),
        "workspaceRoots": [uri(fsws)],
    }


def test_captured_sandboxed_read_file(
    client: WsClient, fsws: Path, captured: dict[str, Any]
) -> None:
    """The captured v0.169.0 exchange: a deny-glob match is -32600 Permission denied."""
    response = client.call("fs/readFile", {"path": uri(fsws / "s.env"), "sandbox": captured})
    assert response["error"] == {"code": -32600, "message": "Permission denied (os error 13)"}
    allowed = client.request("fs/readFile", {"path": uri(fsws / "p.txt"), "sandbox": captured})
    assert unb64(allowed["dataBase64"]) == b"pub\n"


@pytest.mark.parametrize(
    ("method", "name", "extra", "expected"),
    [
        ("fs/readFile", "private/x", {}, EACCES),
        ("fs/readDirectory", "private", {}, EACCES),
        ("fs/writeFile", "s.env", {"dataBase64": "eA=="}, EROFS),
        ("fs/writeFile", "private/new", {"dataBase64": "eA=="}, EACCES),
        ("fs/writeFile", "../outside.txt", {"dataBase64": "eA=="}, EROFS),
        ("fs/createDirectory", "../newdir", {}, EROFS),
        ("fs/remove", "../outside.txt", {}, EROFS),
        ("fs/remove", "private", {}, EROFS),
        ("fs/remove", "s.env", {}, EROFS),
        ("fs/open", "s.env", {"handleId": "h"}, EACCES),
        ("fs/open", "../outside.txt", {"handleId": "h", "mode": "replace"}, EROFS),
    ],
    ids=[
        "read-denied-dir",
        "list-denied-dir",
        "write-denied-file",
        "write-in-denied-dir",
        "write-outside",
        "mkdir-outside",
        "remove-outside",
        "remove-denied-dir",
        "remove-denied-file",
        "open-denied",
        "replace-outside",
    ],
)
def test_denials_look_like_the_reference(
    client: WsClient,
    fsws: Path,
    captured: dict[str, Any],
    method: str,
    name: str,
    extra: dict[str, Any],
    expected: tuple[int, str],
) -> None:
    """Each denial is the OS error the reference's sandbox produces; nothing changes on disk."""
    path = os.path.normpath(fsws / name)
    assert error(client, method, {"path": uri(path), "sandbox": captured, **extra}) == expected
    assert (fsws.parent / "outside.txt").read_bytes() == b"outside\n"
    assert (fsws / "s.env").read_bytes() == b"secret\n"
    assert sorted(os.listdir(fsws.parent)) == ["fsws", "outside.txt"]
    assert (fsws / "private" / "x").exists()


def test_allowed_operations_inside_the_workspace(
    client: WsClient, fsws: Path, captured: dict[str, Any]
) -> None:
    """Inside the writable root everything works; outside, reading works (``/`` is readable)."""
    box = {"sandbox": captured}
    client.request("fs/writeFile", {"path": uri(fsws / "w.txt"), "dataBase64": b64("w"), **box})
    client.request("fs/createDirectory", {"path": uri(fsws / "d" / "e"), **box})
    copy = {"sourcePath": uri(fsws / "w.txt"), "destinationPath": uri(fsws / "d" / "w2")}
    client.request("fs/copy", {**copy, "recursive": False, **box})
    client.request("fs/remove", {"path": uri(fsws / "d"), **box})
    outside = client.request("fs/readFile", {"path": uri(fsws.parent / "outside.txt"), **box})
    assert unb64(outside["dataBase64"]) == b"outside\n"
    assert sorted(os.listdir(fsws)) == ["p.txt", "private", "s.env", "w.txt"]


def test_denied_objects_are_opaque(client: WsClient, fsws: Path, captured: dict[str, Any]) -> None:
    """A denied path shows that it exists and its type, not its size or times; listings show it."""
    meta = client.request("fs/getMetadata", {"path": uri(fsws / "s.env"), "sandbox": captured})
    assert meta == {
        "isDirectory": False,
        "isFile": True,
        "isSymlink": False,
        "size": 0,
        "createdAtMs": 0,
        "modifiedAtMs": 0,
    }
    listing = client.request("fs/readDirectory", {"path": uri(fsws), "sandbox": captured})
    assert sorted(entry["fileName"] for entry in listing["entries"]) == [
        "p.txt",
        "private",
        "s.env",
    ]


def test_deny_glob_covers_files_created_later(
    client: WsClient, fsws: Path, captured: dict[str, Any]
) -> None:
    """Deny globs apply at access time: to files that appear after the first request too."""
    box = {"sandbox": captured}
    client.request("fs/readFile", {"path": uri(fsws / "p.txt"), **box})
    (fsws / "late.env").write_bytes(b"late secret")
    (fsws / "sub").mkdir()
    (fsws / "sub" / "deeper.env").write_bytes(b"deeper secret")
    assert error(client, "fs/readFile", {"path": uri(fsws / "late.env"), **box}) == EACCES
    assert error(client, "fs/readFile", {"path": uri(fsws / "sub" / "deeper.env"), **box}) == EACCES
    assert (
        error(client, "fs/writeFile", {"path": uri(fsws / "new.env"), "dataBase64": "eA==", **box})
        == EROFS
    )
    assert (
        error(client, "fs/open", {"handleId": "g", "path": uri(fsws / "late.env"), **box}) == EACCES
    )
    copy = {
        "sourcePath": uri(fsws / "late.env"),
        "destinationPath": uri(fsws / "copy.txt"),
        "recursive": False,
    }
    assert error(client, "fs/copy", {**copy, **box}) == EACCES
    assert not (fsws / "new.env").exists()
    assert not (fsws / "copy.txt").exists()


def test_dynamic_permissions_need_cwd(
    client: WsClient, fsws: Path, captured: dict[str, Any]
) -> None:
    """``:project_roots`` or a relative glob without any cwd is -32602."""
    del captured["cwd"]
    got = error(client, "fs/readFile", {"path": uri(fsws / "p.txt"), "sandbox": captured})
    assert got == (-32602, "file system sandbox context with dynamic permissions requires cwd")


def test_policy_context_spelling(client: WsClient, fsws: Path, captured: dict[str, Any]) -> None:
    """``policyContext`` carries cwd and workspace roots as well."""
    captured["policyContext"] = {
        "cwd": captured.pop("cwd"),
        "workspaceRoots": captured.pop("workspaceRoots"),
    }
    client.request(
        "fs/writeFile", {"path": uri(fsws / "pc.txt"), "dataBase64": "eA==", "sandbox": captured}
    )
    assert (fsws / "pc.txt").read_bytes() == b"x"


@pytest.mark.parametrize(
    ("context", "code"),
    [
        ({"permissions": {"type": "managed"}, "windowsSandboxLevel": "disabled"}, -32602),
        ({"permissions": {"type": "bogus"}, "windowsSandboxLevel": "disabled"}, -32602),
        ({"permissions": {"type": "disabled"}}, -32602),
    ],
    ids=["managed-without-fields", "unknown-type", "no-windows-level"],
)
def test_bad_sandbox_is_invalid_params(
    client: WsClient, fsws: Path, context: dict[str, Any], code: int
) -> None:
    """A sandbox that does not parse is -32602 and nothing is done."""
    params = {"path": uri(fsws / "x"), "dataBase64": "eA==", "sandbox": context}
    assert error(client, "fs/writeFile", params)[0] == code
    assert not (fsws / "x").exists()


MXC_REFUSAL = (
    -32600,
    "failed to prepare fs sandbox: failed to prepare MXC sandbox: "
    "native MXC is unavailable on this executor",
)


def test_the_windows_level_mxc_refuses_only_what_the_permissions_restrict(
    client: WsClient, fsws: Path
) -> None:
    """``windowsSandboxLevel: "mxc"`` on a filesystem call, as the reference (v0.169, v0.171)
    answers it: refused (``-32600``, its words) when the permissions restrict the operation
    — a change unless they grant write everywhere, a read when they deny anything — and
    otherwise run with the level ignored. Nothing refused changes anything."""

    def mxc(*entries: dict[str, Any]) -> dict[str, Any]:
        return sandbox(*entries, cwd=fsws, roots=(fsws,), windowsSandboxLevel="mxc")

    read_all = mxc(special_entry("root", "read"))
    write_here = mxc(special_entry("root", "read"), special_entry("project_roots", "write"))
    write_all = mxc(special_entry("root", "write"))
    deny_one = mxc(special_entry("root", "read"), path_entry(fsws / "private", "deny"))
    target = fsws / "m.txt"
    write = {"path": uri(target), "dataBase64": b64("m")}
    read = {"path": uri(fsws / "p.txt")}
    # Reads under full read access run; every change is refused, even inside a writable root.
    assert unb64(client.request("fs/readFile", {**read, "sandbox": read_all})["dataBase64"])
    assert error(client, "fs/writeFile", {**write, "sandbox": read_all}) == MXC_REFUSAL
    assert error(client, "fs/writeFile", {**write, "sandbox": write_here}) == MXC_REFUSAL
    mkdir = {"path": uri(fsws / "d"), "recursive": True, "sandbox": write_here}
    assert error(client, "fs/createDirectory", mkdir) == MXC_REFUSAL
    assert not target.exists() and not (fsws / "d").exists()
    # A denied path anywhere: reads are refused too.
    assert error(client, "fs/readFile", {**read, "sandbox": deny_one}) == MXC_REFUSAL
    assert error(client, "fs/getMetadata", {**read, "sandbox": deny_one}) == MXC_REFUSAL
    # Write everywhere: nothing to prepare, the write happens.
    client.request("fs/writeFile", {**write, "sandbox": write_all})
    assert target.read_bytes() == b"m"


@pytest.mark.parametrize(
    "permissions",
    [
        {"type": "disabled"},
        {"type": "external", "network": "restricted"},
        {"type": "managed", "file_system": {"type": "unrestricted"}, "network": "restricted"},
    ],
    ids=["disabled", "external", "unrestricted"],
)
def test_profiles_without_filesystem_rules(
    client: WsClient, fsws: Path, permissions: dict[str, Any]
) -> None:
    """Profiles that do not restrict the filesystem leave fs calls unrestricted."""
    context = {"permissions": permissions, "windowsSandboxLevel": "disabled"}
    target = fsws.parent / "free.txt"
    client.request("fs/writeFile", {"path": uri(target), "dataBase64": "eA==", "sandbox": context})
    assert target.read_bytes() == b"x"


def test_symlinks_out_of_the_writable_root(
    client: WsClient, fsws: Path, captured: dict[str, Any]
) -> None:
    """Links inside the workspace pointing out: readable where ``/`` is, never writable."""
    outside = fsws.parent / "outside.txt"
    (fsws / "abs").symlink_to(outside)
    (fsws / "rel").symlink_to("../outside.txt")
    (fsws / "dirlink").symlink_to("..")
    box = {"sandbox": captured}
    assert (
        unb64(client.request("fs/readFile", {"path": uri(fsws / "abs"), **box})["dataBase64"])
        == b"outside\n"
    )
    for name in ("abs", "rel", "dirlink/outside.txt", "dirlink/created"):
        assert (
            error(client, "fs/writeFile", {"path": uri(fsws / name), "dataBase64": "eA==", **box})
            == EROFS
        )
    assert (
        error(client, "fs/createDirectory", {"path": uri(fsws / "dirlink" / "made"), **box})
        == EROFS
    )
    assert (
        error(
            client,
            "fs/open",
            {"handleId": "o", "path": uri(fsws / "rel"), "mode": "replace", **box},
        )
        == EROFS
    )
    copy = {
        "sourcePath": uri(fsws / "p.txt"),
        "destinationPath": uri(fsws / "rel"),
        "recursive": False,
    }
    assert error(client, "fs/copy", {**copy, **box}) == EROFS
    assert (
        error(client, "fs/remove", {"path": uri(fsws / "dirlink" / "outside.txt"), **box}) == EROFS
    )
    client.request("fs/remove", {"path": uri(fsws / "abs"), **box})  # the link itself is inside
    assert outside.read_bytes() == b"outside\n"
    assert not (fsws.parent / "created").exists()
    assert not (fsws.parent / "made").exists()


def test_protected_names_stay_read_only(
    client: WsClient, fsws: Path, captured: dict[str, Any]
) -> None:
    """``.git`` (existing or not) and friends cannot be created, written or removed."""
    box = {"sandbox": captured}
    assert error(client, "fs/createDirectory", {"path": uri(fsws / ".codex"), **box}) == EROFS
    (fsws / ".git").mkdir()
    (fsws / ".git" / "config").write_bytes(b"[core]\n")
    assert (
        error(
            client,
            "fs/writeFile",
            {"path": uri(fsws / ".git" / "config"), "dataBase64": "eA==", **box},
        )
        == EROFS
    )
    assert (
        error(
            client,
            "fs/writeFile",
            {"path": uri(fsws / ".git" / "hooks"), "dataBase64": "eA==", **box},
        )
        == EROFS
    )
    assert error(client, "fs/remove", {"path": uri(fsws / ".git"), **box}) == EROFS
    assert error(client, "fs/remove", {"path": uri(fsws / ".git" / "config"), **box}) == EROFS
    copy = {
        "sourcePath": uri(fsws / "p.txt"),
        "destinationPath": uri(fsws / ".git" / "p"),
        "recursive": False,
    }
    assert error(client, "fs/copy", {**copy, **box}) == EROFS
    assert (
        unb64(
            client.request("fs/readFile", {"path": uri(fsws / ".git" / "config"), **box})[
                "dataBase64"
            ]
        )
        == b"[core]\n"
    )
    assert not (fsws / ".codex").exists()


def test_removing_a_tree_with_a_carve_out_deletes_nothing(
    client: WsClient, fsws: Path, captured: dict[str, Any]
) -> None:
    """A tree holding a read-only or denied path is refused before anything is removed."""
    assert error(client, "fs/remove", {"path": uri(fsws), "sandbox": captured}) == EROFS
    (fsws / "nested" / ".git").mkdir(parents=True)
    captured["permissions"]["file_system"]["entries"].append(
        path_entry(fsws / "nested" / ".git", "read")
    )
    (fsws / "nested" / "file").write_bytes(b"f")
    assert error(client, "fs/remove", {"path": uri(fsws / "nested"), "sandbox": captured}) == EROFS
    assert (fsws / "nested" / "file").exists()
    assert (fsws / "p.txt").exists()


def test_hard_links(client: WsClient, fsws: Path, captured: dict[str, Any]) -> None:
    """No sandboxed write through a file with other names, no read of a denied one by another."""
    os.link(fsws.parent / "outside.txt", fsws / "hard")
    got = error(
        client,
        "fs/writeFile",
        {"path": uri(fsws / "hard"), "dataBase64": "eA==", "sandbox": captured},
    )
    assert got[0] == -32600
    assert "hard links" in got[1]
    assert (
        error(
            client,
            "fs/open",
            {"handleId": "h", "path": uri(fsws / "hard"), "mode": "replace", "sandbox": captured},
        )[0]
        == -32600
    )
    os.link(fsws / "s.env", fsws / "env-by-another-name")
    assert (
        error(
            client, "fs/readFile", {"path": uri(fsws / "env-by-another-name"), "sandbox": captured}
        )
        == EACCES
    )
    (fsws / "key").write_bytes(b"key")
    os.link(fsws / "key", fsws / "key-by-another-name")
    captured["permissions"]["file_system"]["entries"].append(path_entry(fsws / "key", "deny"))
    assert (
        error(
            client, "fs/readFile", {"path": uri(fsws / "key-by-another-name"), "sandbox": captured}
        )
        == EACCES
    )
    assert (fsws.parent / "outside.txt").read_bytes() == b"outside\n"


def test_copy_between_areas(client: WsClient, fsws: Path, captured: dict[str, Any]) -> None:
    """Copy needs a readable source and a writable destination."""
    box = {"sandbox": captured, "recursive": False}
    client.request(
        "fs/copy",
        {
            "sourcePath": uri(fsws.parent / "outside.txt"),
            "destinationPath": uri(fsws / "in.txt"),
            **box,
        },
    )
    assert (fsws / "in.txt").read_bytes() == b"outside\n"
    out = {"sourcePath": uri(fsws / "p.txt"), "destinationPath": uri(fsws.parent / "out.txt")}
    assert error(client, "fs/copy", {**out, **box}) == EROFS
    leak = {"sourcePath": uri(fsws / "private"), "destinationPath": uri(fsws / "leak")}
    assert error(client, "fs/copy", {**leak, "sandbox": captured, "recursive": True}) == EACCES
    assert not (fsws.parent / "out.txt").exists()


def test_sandboxed_handles(client: WsClient, fsws: Path, captured: dict[str, Any]) -> None:
    """The sandbox given to fs/open governs the handle (sandboxedFileStreaming)."""
    box = {"sandbox": captured}
    client.request("fs/open", {"handleId": "r", "path": uri(fsws.parent / "outside.txt"), **box})
    assert (
        unb64(client.request("fs/readBlock", {"handleId": "r", "offset": 0, "len": 7})["chunk"])
        == b"outside"
    )
    client.request(
        "fs/open", {"handleId": "w", "path": uri(fsws / "stream.bin"), "mode": "replace", **box}
    )
    client.request("fs/writeBlock", {"handleId": "w", "offset": 0, "chunk": b64("streamed")})
    assert (fsws / "stream.bin").read_bytes() == b"streamed"


@pytest.fixture
def minimal(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """``:minimal`` read plus one writable workspace: the rest of the host does not exist."""
    root = tmp_path.resolve()
    (root / "ws").mkdir()
    (root / "ws" / "in.txt").write_bytes(b"in")
    (root / "ws" / "out").symlink_to(root / "outside.txt")
    (root / "outside.txt").write_bytes(b"outside")
    return root, sandbox(special_entry("minimal", "read"), path_entry(root / "ws", "write"))


def test_minimal_sandbox_hides_the_host(
    client: WsClient, minimal: tuple[Path, dict[str, Any]]
) -> None:
    """Paths outside the view are missing; directories leading to the workspace show only it."""
    root, context = minimal
    box = {"sandbox": context}
    assert error(client, "fs/readFile", {"path": uri(root / "outside.txt"), **box}) == ENOENT
    assert error(client, "fs/readFile", {"path": uri(root / "ws" / "out"), **box}) == ENOENT
    assert error(client, "fs/getMetadata", {"path": uri(root / "ws" / "out"), **box}) == ENOENT
    listing = client.request("fs/readDirectory", {"path": uri(root), **box})
    assert listing == {"entries": [{"fileName": "ws", "isDirectory": True, "isFile": False}]}
    assert client.request("fs/getMetadata", {"path": uri(root), **box})["isDirectory"] is True
    assert (
        error(client, "fs/writeFile", {"path": uri(root / "new"), "dataBase64": "eA==", **box})
        == EROFS
    )
    assert not (root / "new").exists()
    shell = client.request("fs/getMetadata", {"path": "file:///bin/sh", **box})
    assert shell["isFile"] is True


def test_empty_sandbox_sees_nothing(client: WsClient, minimal: tuple[Path, dict[str, Any]]) -> None:
    """With no entries at all only an empty ``/`` exists."""
    root, _context = minimal
    box = {"sandbox": sandbox()}
    assert error(client, "fs/readFile", {"path": uri(root / "ws" / "in.txt"), **box}) == ENOENT
    assert client.request("fs/readDirectory", {"path": "file:///", **box}) == {"entries": []}
    assert error(client, "fs/canonicalize", {"path": uri(root), **box}) == ENOENT


def test_read_only_root(client: WsClient, fsws: Path) -> None:
    """``[:root read]``: every write is EROFS, every read works."""
    box = {"sandbox": sandbox(special_entry("root", "read"))}
    assert (
        error(client, "fs/writeFile", {"path": uri(fsws / "p.txt"), "dataBase64": "eA==", **box})
        == EROFS
    )
    assert error(client, "fs/createDirectory", {"path": uri(fsws / "n"), **box}) == EROFS
    assert client.request("fs/createDirectory", {"path": uri(fsws), **box}) == {}  # exists already
    assert (
        unb64(client.request("fs/readFile", {"path": uri(fsws / "s.env"), **box})["dataBase64"])
        == b"secret\n"
    )


def test_writable_root_itself_cannot_be_removed(client: WsClient, fsws: Path) -> None:
    """Removing the writable root needs its (read-only) parent: refused, contents kept."""
    box = {"sandbox": workspace_sandbox(fsws)}
    assert error(client, "fs/remove", {"path": uri(fsws), **box}) == EROFS
    assert (fsws / "p.txt").exists()


@pytest.fixture
def private_dir() -> Iterator[Path]:
    """A directory outside every shared one (``/tmp`` is shared: see the next tests)."""
    made = Path(tempfile.mkdtemp(prefix=".executor-test-", dir=os.path.expanduser("~")))
    try:
        yield made.resolve()
    finally:
        shutil.rmtree(made)


def test_symlinked_workspace_root(client: WsClient, private_dir: Path) -> None:
    """A workspace root named through a symlink stays reachable under its name (``:minimal``)."""
    real = private_dir / "real"
    (real / "ws").mkdir(parents=True)
    (private_dir / "alias").symlink_to(real)
    named = private_dir / "alias" / "ws"
    context = sandbox(
        special_entry("minimal", "read"),
        special_entry("project_roots", "write"),
        cwd=named,
        roots=(named,),
    )
    client.request(
        "fs/writeFile", {"path": uri(named / "f.txt"), "dataBase64": "eA==", "sandbox": context}
    )
    assert (real / "ws" / "f.txt").read_bytes() == b"x"
    assert client.request("fs/canonicalize", {"path": uri(named), "sandbox": context}) == {
        "path": uri(real / "ws")
    }


def test_a_workspace_reached_through_a_symlink_under_tmp_is_refused(
    client: WsClient, tmp_path: Path
) -> None:
    """Below /tmp any sandbox may have planted the link (``mv ws ws.o; ln -s ~/.ssh ws``):
    the call is refused and the link's target is not written."""
    target = tmp_path.resolve() / "target"
    target.mkdir()
    (tmp_path.resolve() / "ws").symlink_to(target)
    named = tmp_path.resolve() / "ws"
    context = sandbox(
        special_entry("minimal", "read"),
        special_entry("project_roots", "write"),
        cwd=named,
        roots=(named,),
    )
    response = client.call(
        "fs/writeFile", {"path": uri(named / "f.txt"), "dataBase64": "eA==", "sandbox": context}
    )
    assert response["error"]["code"] == -32602
    assert "symlink" in response["error"]["message"]
    assert not (target / "f.txt").exists()


def test_pinned_directories_cannot_be_removed_through_fs_calls(
    client: WsClient, tmp_path: Path
) -> None:
    """The workspace and the directories between it and the writable /tmp are pinned:
    fs/remove of either answers EBUSY; a .git cannot be created in the parent; files inside
    the workspace are still written and removed."""
    ws = tmp_path.resolve() / "box" / "ws"
    ws.mkdir(parents=True)
    (ws / "f.txt").write_bytes(b"x")
    context = sandbox(
        special_entry("root", "read"),
        special_entry("slash_tmp", "write"),
        special_entry("project_roots", "write"),
        cwd=ws,
        roots=(ws,),
    )
    busy = (-32603, "Device or resource busy (os error 16)")
    for target in (ws, ws.parent):
        params = {"path": uri(target), "recursive": True, "force": True, "sandbox": context}
        assert error(client, "fs/remove", params) == busy
    assert (ws / "f.txt").exists()
    parent_git = {"path": uri(ws.parent / ".git"), "recursive": True, "sandbox": context}
    assert error(client, "fs/createDirectory", parent_git) == EROFS
    assert not (ws.parent / ".git").exists()
    client.request("fs/remove", {"path": uri(ws / "f.txt"), "sandbox": context})
    assert not (ws / "f.txt").exists()


@pytest.mark.enforcement
def test_executor_state_is_hidden(client: WsClient) -> None:
    """The daemon's own state directory is denied to every sandbox; its parent is not."""
    # The daemon inherits this environment, so it resolves the same directory
    # (EXECUTOR_STATE_DIR, else under XDG_RUNTIME_DIR, else /tmp) and has created it.
    state = Path(state_directory())
    assert state.is_dir()
    box = {"sandbox": sandbox(special_entry("root", "write"), glob_entry("/nothing/**"))}
    assert error(client, "fs/readDirectory", {"path": uri(state), **box}) == EACCES
    listing = client.request("fs/readDirectory", {"path": uri(state.parent), **box})
    assert state.name in {entry["fileName"] for entry in listing["entries"]}


@pytest.mark.parametrize(
    "suffix",
    [
        "/../outside.txt",
        "/%2E%2E/outside.txt",
        "/p.txt/../../outside.txt",
        "/./private/../../outside.txt",
    ],
    ids=["dotdot", "encoded-dotdot", "through-file", "mixed"],
)
def test_dotdot_in_uris_cannot_escape(
    client: WsClient, fsws: Path, captured: dict[str, Any], suffix: str
) -> None:
    """``..`` is removed lexically, then the resulting real path is checked like any other."""
    params = {"path": uri(fsws) + suffix, "dataBase64": "eA==", "sandbox": captured}
    assert error(client, "fs/writeFile", params) == EROFS
    assert (fsws.parent / "outside.txt").read_bytes() == b"outside\n"
