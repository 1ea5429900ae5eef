"""Sandboxed ``fs/*`` never exposes the content of a denied inode under another name.

A hard link in the workspace to a file inside a denied directory (or matching a deny glob,
however deep) is refused by every method that reads content; ordinary files and hard links
to allowed files are served. When the denied trees are too big to search within the bound,
a multiply-linked file is refused with a message that says why (fail closed).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.fs.inodes import SCAN_ENTRIES_ENV
from tests.fs.helpers import error, glob_entry, path_entry, unb64, uri, workspace_sandbox
from tests.support.client import WsClient
from tests.support.daemon import RunningDaemon

EACCES = (-32600, "Permission denied (os error 13)")


@pytest.fixture
def area(tmp_path: Path) -> Path:
    """``ws`` (the workspace) and ``vault`` (to be denied) side by side, on one device."""
    root = tmp_path.resolve()
    (root / "ws").mkdir()
    (root / "vault" / "deep").mkdir(parents=True)
    (root / "vault" / "deep" / "key").write_bytes(b"vault secret\n")
    (root / "ws" / "plain.txt").write_bytes(b"plain\n")
    (root / "ws" / "shared.txt").write_bytes(b"shared\n")
    os.link(root / "ws" / "shared.txt", root / "ws" / "shared-too.txt")
    return root


def _denying_vault(root: Path, *more: dict[str, Any]) -> dict[str, Any]:
    return workspace_sandbox(root / "ws", path_entry(root / "vault", "deny"), *more)


def _read(client: WsClient, path: Path, box: dict[str, Any]) -> bytes:
    return unb64(client.request("fs/readFile", {"path": uri(path), "sandbox": box})["dataBase64"])


def _assert_not_exposed(client: WsClient, link: Path, box: dict[str, Any]) -> None:
    """readFile, copy (file and tree) and a read handle of ``link`` are all refused."""
    ws = link.parent
    assert error(client, "fs/readFile", {"path": uri(link), "sandbox": box}) == EACCES
    copy = {"sourcePath": uri(link), "destinationPath": uri(ws / "copied"), "recursive": False}
    assert error(client, "fs/copy", {**copy, "sandbox": box}) == EACCES
    assert not (ws / "copied").exists()
    opened = {"handleId": "h", "path": uri(link), "mode": "read", "sandbox": box}
    assert error(client, "fs/open", opened) == EACCES
    assert error(client, "fs/readBlock", {"handleId": "h", "offset": 0, "len": 16})[0] == -32004
    (ws / "tree").mkdir(exist_ok=True)
    os.link(link, ws / "tree" / "inner")
    tree = {"sourcePath": uri(ws / "tree"), "destinationPath": uri(ws / "tree-copy")}
    assert error(client, "fs/copy", {**tree, "recursive": True, "sandbox": box}) == EACCES
    assert not (ws / "tree-copy" / "inner").exists()


def _assert_served(client: WsClient, ws: Path, box: dict[str, Any]) -> None:
    """An ordinary file and a hard link to an allowed file are read, copied and streamed."""
    assert _read(client, ws / "plain.txt", box) == b"plain\n"
    assert _read(client, ws / "shared-too.txt", box) == b"shared\n"
    client.request(
        "fs/copy",
        {
            "sourcePath": uri(ws / "shared-too.txt"),
            "destinationPath": uri(ws / "shared-copy.txt"),
            "recursive": False,
            "sandbox": box,
        },
    )
    assert (ws / "shared-copy.txt").read_bytes() == b"shared\n"
    opened = {"handleId": "ok", "path": uri(ws / "shared.txt"), "mode": "read", "sandbox": box}
    client.request("fs/open", opened)
    block = client.request("fs/readBlock", {"handleId": "ok", "offset": 0, "len": 64})
    assert unb64(block["chunk"]) == b"shared\n"
    client.request("fs/close", {"handleId": "ok"})


def test_hard_link_into_a_denied_directory(client: WsClient, area: Path) -> None:
    """The vault's file under a workspace name is denied like the vault itself."""
    os.link(area / "vault" / "deep" / "key", area / "ws" / "key-link")
    box = _denying_vault(area)
    assert error(client, "fs/readFile", {"path": uri(area / "vault/deep/key"), "sandbox": box}) == (
        EACCES
    )
    _assert_not_exposed(client, area / "ws" / "key-link", box)
    _assert_served(client, area / "ws", box)


def test_hard_link_into_a_glob_denied_directory(client: WsClient, area: Path) -> None:
    """A directory denied by a glob match hides its files' other names too."""
    (area / "ws" / "conf" / "secrets").mkdir(parents=True)
    (area / "ws" / "conf" / "secrets" / "token").write_bytes(b"token\n")
    os.link(area / "ws" / "conf" / "secrets" / "token", area / "ws" / "token-link")
    box = workspace_sandbox(area / "ws", glob_entry("**/secrets"))
    _assert_not_exposed(client, area / "ws" / "token-link", box)
    _assert_served(client, area / "ws", box)


def test_hard_link_to_a_glob_match_deeper_than_the_scan(client: WsClient, area: Path) -> None:
    """A glob match below ``glob_scan_max_depth`` is found by identity all the same."""
    deep = area / "ws" / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "id.pem").write_bytes(b"pem\n")
    os.link(deep / "id.pem", area / "ws" / "pem-link")
    box = workspace_sandbox(area / "ws", glob_entry("**/*.pem"))
    box["permissions"]["file_system"]["glob_scan_max_depth"] = 1
    assert error(client, "fs/readFile", {"path": uri(deep / "id.pem"), "sandbox": box}) == EACCES
    _assert_not_exposed(client, area / "ws" / "pem-link", box)
    _assert_served(client, area / "ws", box)


def test_a_search_that_cannot_finish_fails_closed(
    daemon_factory: type[RunningDaemon], area: Path
) -> None:
    """Past the scan bound a multiply-linked file is refused, saying which and why; a file
    with one link costs no search and is served."""
    for index in range(8):
        (area / "vault" / f"filler-{index}").write_bytes(b"x")
    daemon = daemon_factory(env={SCAN_ENTRIES_ENV: "4"})
    box = _denying_vault(area)
    with daemon.session() as client:
        shared = area / "ws" / "shared-too.txt"
        code, message = error(client, "fs/readFile", {"path": uri(shared), "sandbox": box})
        assert code == -32600
        assert f"`{shared}` has 2 hard links" in message
        assert "more than 4 entries" in message
        assert "refusing to read it" in message
        assert _read(client, area / "ws" / "plain.txt", box) == b"plain\n"


@pytest.fixture
def other_device(area: Path) -> Iterator[Path]:
    """A workspace on a filesystem other than the denied vault's (``/dev/shm``)."""
    if not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == os.stat(area).st_dev:
        pytest.skip("no second filesystem (/dev/shm) here")
    path = Path(tempfile.mkdtemp(prefix="executor-inodes-", dir="/dev/shm")).resolve()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_denied_trees_on_other_devices_are_not_searched(
    daemon_factory: type[RunningDaemon], area: Path, other_device: Path
) -> None:
    """A linked file is only looked for in denied trees on its own device."""
    for index in range(8):
        (area / "vault" / f"filler-{index}").write_bytes(b"x")
    (other_device / "a").write_bytes(b"linked\n")
    os.link(other_device / "a", other_device / "b")
    daemon = daemon_factory(env={SCAN_ENTRIES_ENV: "4"})
    box = workspace_sandbox(other_device, path_entry(area / "vault", "deny"))
    with daemon.session() as client:
        assert _read(client, other_device / "b", box) == b"linked\n"
