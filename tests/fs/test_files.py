"""``fs/readFile`` and ``fs/writeFile`` (protocol.md §5.12, §5.13): defaults and error table."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest

from tests.fs.helpers import b64, error, unb64, uri
from tests.support.client import WsClient


@pytest.fixture
def tree(workspace: Path) -> Path:
    """file.txt, a directory, symlinks to both, a dangling link, a loop and a FIFO."""
    (workspace / "file.txt").write_bytes(b"hello\n")
    (workspace / "dir").mkdir()
    (workspace / "file-link").symlink_to("file.txt")
    (workspace / "dir-link").symlink_to("dir")
    (workspace / "dangling").symlink_to("nowhere")
    (workspace / "loop1").symlink_to("loop2")
    (workspace / "loop2").symlink_to("loop1")
    os.mkfifo(workspace / "fifo")
    return workspace


def test_read_file_returns_whole_file(client: WsClient, tree: Path) -> None:
    """readFile answers the whole content as base64."""
    result = client.request("fs/readFile", {"path": uri(tree / "file.txt")})
    assert result == {"dataBase64": b64("hello\n")}


def test_read_file_follows_symlinks_by_default(client: WsClient, tree: Path) -> None:
    """A symlink to a file reads the target."""
    result = client.request("fs/readFile", {"path": uri(tree / "file-link")})
    assert unb64(result["dataBase64"]) == b"hello\n"


def test_read_empty_file(client: WsClient, tree: Path) -> None:
    """An empty file is an empty string."""
    (tree / "empty").write_bytes(b"")
    assert client.request("fs/readFile", {"path": uri(tree / "empty")}) == {"dataBase64": ""}


def test_read_binary_file_of_several_chunks(client: WsClient, tree: Path) -> None:
    """Content larger than the encoder's chunk round-trips exactly."""
    data = os.urandom(7 * 1024 * 1024 + 5)
    (tree / "big.bin").write_bytes(data)
    result = client.request("fs/readFile", {"path": uri(tree / "big.bin")}, timeout=60)
    assert unb64(result["dataBase64"]) == data


@pytest.mark.parametrize(
    ("name", "params", "code", "message"),
    [
        ("missing", {}, -32004, "No such file or directory (os error 2)"),
        ("dir", {}, -32600, "path `{root}/dir` is not a file"),
        ("dir-link", {}, -32600, "path `{root}/dir-link` is not a file"),
        ("fifo", {}, -32600, "path `{root}/fifo` is not a file"),
        ("dangling", {}, -32004, "No such file or directory (os error 2)"),
        ("loop1", {}, -32603, "(os error 40)"),
        ("file.txt/x", {}, -32603, "Not a directory (os error 20)"),
        ("file-link", {"followSymlinks": False}, -32603, "(os error 40)"),
        ("dir-link/x", {"followSymlinks": False}, -32603, "Not a directory (os error 20)"),
        ("fifo", {"followSymlinks": False}, -32600, "path is not a regular file"),
        ("dir", {"followSymlinks": False}, -32600, "path is not a regular file"),
    ],
    ids=[
        "missing",
        "directory",
        "symlink-to-directory",
        "fifo",
        "dangling",
        "loop",
        "parent-is-file",
        "nofollow-final-symlink",
        "nofollow-parent-symlink",
        "nofollow-fifo",
        "nofollow-directory",
    ],
)
def test_read_file_errors(
    client: WsClient, tree: Path, name: str, params: dict[str, bool], code: int, message: str
) -> None:
    """readFile fails with the reference's code and message for each bad target."""
    got = error(client, "fs/readFile", {"path": uri(tree / name), **params})
    assert got[0] == code
    assert got[1].endswith(message.format(root=tree)), got


@pytest.mark.parametrize(
    ("path", "code", "message"),
    [
        ("file://otherhost/tmp/x", -32600, "'file://otherhost/tmp/x' is invalid on 'linux'"),
        ("file:///C:/Windows/x", -32600, "'file:///C:/Windows/x' is invalid on 'linux'"),
        ("/tmp/x", -32602, "invalid URI: relative URL without a base"),
        ("http://host/x", -32602, "unsupported path URI scheme `http`"),
        ("file:///tmp/a%00b", -32602, None),
        ("file:///tmp/x?q=1", -32602, "query parameters are not allowed in path URIs"),
    ],
    ids=["foreign-host", "windows-drive", "native-path", "other-scheme", "nul", "query"],
)
def test_read_file_bad_uris(client: WsClient, path: str, code: int, message: str | None) -> None:
    """Bad path URIs are refused with the documented codes; the connection keeps working."""
    got = error(client, "fs/readFile", {"path": path})
    assert got[0] == code
    if message is not None:
        assert got[1] == message
    assert client.request("environment/status") == {"status": "ready"}


def test_read_file_needs_path(client: WsClient) -> None:
    """A missing field is -32602."""
    assert error(client, "fs/readFile", {})[0] == -32602


def test_write_file_creates_and_truncates(client: WsClient, tree: Path) -> None:
    """writeFile creates a file, and replaces the whole content of an existing one."""
    target = tree / "new.txt"
    assert (
        client.request("fs/writeFile", {"path": uri(target), "dataBase64": b64("long content")})
        == {}
    )
    client.request("fs/writeFile", {"path": uri(target), "dataBase64": b64("short")})
    assert target.read_bytes() == b"short"


def test_write_file_through_symlinks(client: WsClient, tree: Path) -> None:
    """By default a final symlink is followed, a dangling one creates its target."""
    client.request("fs/writeFile", {"path": uri(tree / "file-link"), "dataBase64": b64("via link")})
    assert (tree / "file.txt").read_bytes() == b"via link"
    assert (tree / "file-link").is_symlink()
    client.request("fs/writeFile", {"path": uri(tree / "dangling"), "dataBase64": b64("made")})
    assert (tree / "nowhere").read_bytes() == b"made"


def test_write_empty_data(client: WsClient, tree: Path) -> None:
    """Empty data truncates to zero bytes."""
    client.request("fs/writeFile", {"path": uri(tree / "file.txt"), "dataBase64": ""})
    assert (tree / "file.txt").read_bytes() == b""


@pytest.mark.parametrize(
    ("name", "params", "code", "message"),
    [
        ("missing-dir/x", {}, -32004, "No such file or directory (os error 2)"),
        ("dir", {}, -32603, "Is a directory (os error 21)"),
        ("file.txt/x", {}, -32603, "Not a directory (os error 20)"),
        ("file-link", {"followSymlinks": False}, -32603, "(os error 40)"),
        ("dangling", {"followSymlinks": False}, -32603, "(os error 40)"),
        ("dir-link/new", {"followSymlinks": False}, -32603, "Not a directory (os error 20)"),
        ("fifo", {}, -32600, "path `{root}/fifo` is not a file"),
    ],
    ids=[
        "missing-parent",
        "directory",
        "parent-is-file",
        "nofollow-symlink",
        "nofollow-dangling",
        "nofollow-parent-symlink",
        "fifo",
    ],
)
def test_write_file_errors(
    client: WsClient, tree: Path, name: str, params: dict[str, bool], code: int, message: str
) -> None:
    """writeFile fails with the reference's code and message, and writes nothing."""
    got = error(
        client, "fs/writeFile", {"path": uri(tree / name), "dataBase64": b64("x"), **params}
    )
    assert got[0] == code
    assert got[1].endswith(message.format(root=tree)), got
    assert (tree / "file.txt").read_bytes() == b"hello\n"
    assert not (tree / "nowhere").exists()


@pytest.mark.parametrize(
    ("data", "detail"),
    [
        ("!!", "Invalid symbol 33, offset 0."),
        ("eA=", "Invalid padding"),
        ("eA", "Invalid padding"),
        ("e A==", "Invalid symbol 32, offset 1."),
        ("eA==eA==", "Invalid symbol 61, offset 2."),
        ("eB==", "Invalid last symbol 66, offset 1."),
    ],
    ids=["symbol", "short-padding", "no-padding", "space", "padding-inside", "non-canonical"],
)
def test_write_file_invalid_base64(client: WsClient, tree: Path, data: str, detail: str) -> None:
    """Invalid base64 is -32600 (not -32602) with the reference's wording; nothing is written."""
    got = error(client, "fs/writeFile", {"path": uri(tree / "b64.txt"), "dataBase64": data})
    assert got == (-32600, f"fs/writeFile requires valid base64 dataBase64: {detail}")
    assert not (tree / "b64.txt").exists()


def _compact_write(client: WsClient, params: dict[str, object]) -> dict[str, Any]:
    """``fs/writeFile`` sent compact, as the real client sends it (no spaces after colons:
    the form carve.py takes a large field from without a JSON parse)."""
    request_id = client.next_id()
    message = {"jsonrpc": "2.0", "id": request_id, "method": "fs/writeFile", "params": params}
    client.send_raw(json.dumps(message, separators=(",", ":")))
    return client.response(request_id)


def test_large_writes_arrive_exactly_and_fail_as_small_ones_do(
    client: WsClient, tree: Path
) -> None:
    """Several MiB of base64 (taken as it is, without a JSON parse) write exactly their bytes;
    invalid base64 that large gets the small one's answer; the same key nested elsewhere in
    the message never takes the field's place."""
    data = os.urandom(3 << 20)
    text = b64(data)
    written = _compact_write(client, {"path": uri(tree / "big"), "dataBase64": text})
    assert written == {"id": ANY, "result": {}}
    assert (tree / "big").read_bytes() == data
    spaced = text[:1000] + " " + text[1001:]
    refused = _compact_write(client, {"path": uri(tree / "bad"), "dataBase64": spaced})
    assert refused["error"] == {
        "code": -32600,
        "message": "fs/writeFile requires valid base64 dataBase64: Invalid symbol 32, offset 1000.",
    }
    assert not (tree / "bad").exists()
    decoy: dict[str, object] = {
        "x": {"dataBase64": text},
        "path": uri(tree / "small"),
        "dataBase64": b64("hi"),
    }
    assert "result" in _compact_write(client, decoy)
    assert (tree / "small").read_bytes() == b"hi"


def test_write_file_keeps_mode_of_existing_file(client: WsClient, tree: Path) -> None:
    """Truncating in place keeps the file's inode and permission bits."""
    target = tree / "file.txt"
    target.chmod(0o640)
    inode = target.stat().st_ino
    client.request("fs/writeFile", {"path": uri(target), "dataBase64": b64("new")})
    assert (target.stat().st_ino, target.stat().st_mode & 0o777) == (inode, 0o640)
