"""``fs/getMetadata`` and ``fs/canonicalize`` (protocol.md §5.15, §5.20)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.fs.helpers import error, uri
from tests.support.client import WsClient


@pytest.fixture
def tree(workspace: Path) -> Path:
    """A file, a directory, symlinks to both, a dangling link, a loop and a FIFO."""
    (workspace / "a.txt").write_bytes(b"hello\n")
    (workspace / "dir" / "sub").mkdir(parents=True)
    (workspace / "link").symlink_to("a.txt")
    (workspace / "dir-link").symlink_to("dir")
    (workspace / "dangling").symlink_to("nowhere")
    (workspace / "loop1").symlink_to("loop2")
    (workspace / "loop2").symlink_to("loop1")
    os.mkfifo(workspace / "fifo")
    return workspace


def test_metadata_of_file(client: WsClient, tree: Path) -> None:
    """A regular file: type flags, size, times in milliseconds."""
    result = client.request("fs/getMetadata", {"path": uri(tree / "a.txt")})
    assert list(result) == [
        "isDirectory",
        "isFile",
        "isSymlink",
        "size",
        "createdAtMs",
        "modifiedAtMs",
    ]
    assert (result["isDirectory"], result["isFile"], result["isSymlink"], result["size"]) == (
        False,
        True,
        False,
        6,
    )
    assert result["modifiedAtMs"] == (tree / "a.txt").stat().st_mtime_ns // 1_000_000
    assert 0 <= result["createdAtMs"] <= time.time() * 1000 + 1000


def test_metadata_of_symlink_describes_target(client: WsClient, tree: Path) -> None:
    """Through a symlink: the target's type and size, and ``isSymlink``."""
    result = client.request("fs/getMetadata", {"path": uri(tree / "link")})
    assert (result["isFile"], result["isSymlink"], result["size"]) == (True, True, 6)
    directory = client.request("fs/getMetadata", {"path": uri(tree / "dir-link")})
    assert (directory["isDirectory"], directory["isSymlink"]) == (True, True)


def test_metadata_of_special_file(client: WsClient, tree: Path) -> None:
    """A FIFO is neither a file nor a directory."""
    result = client.request("fs/getMetadata", {"path": uri(tree / "fifo")})
    assert (result["isDirectory"], result["isFile"], result["isSymlink"]) == (False, False, False)


def test_metadata_nofollow_of_plain_paths(client: WsClient, tree: Path) -> None:
    """``followSymlinks: false`` describes paths without symlinks normally."""
    result = client.request("fs/getMetadata", {"path": uri(tree / "dir"), "followSymlinks": False})
    assert (result["isDirectory"], result["isSymlink"]) == (True, False)


@pytest.mark.parametrize(
    ("name", "params", "code", "message"),
    [
        ("missing", {}, -32004, "No such file or directory (os error 2)"),
        ("dangling", {}, -32004, "No such file or directory (os error 2)"),
        ("loop1", {}, -32603, "(os error 40)"),
        ("link", {"followSymlinks": False}, -32600, "path contains a symbolic link"),
        ("dangling", {"followSymlinks": False}, -32600, "path contains a symbolic link"),
        ("dir-link/sub", {"followSymlinks": False}, -32603, "Not a directory (os error 20)"),
        ("a.txt/x", {}, -32603, "Not a directory (os error 20)"),
    ],
    ids=[
        "missing",
        "dangling",
        "loop",
        "nofollow-symlink",
        "nofollow-dangling",
        "nofollow-parent-symlink",
        "parent-is-file",
    ],
)
def test_metadata_errors(
    client: WsClient, tree: Path, name: str, params: dict[str, bool], code: int, message: str
) -> None:
    """getMetadata fails with the reference's code and message."""
    got = error(client, "fs/getMetadata", {"path": uri(tree / name), **params})
    assert got[0] == code
    assert got[1].endswith(message), got


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("dir-link/sub/../sub", "dir/sub"),
        ("link", "a.txt"),
        ("dir/", "dir"),
        ("dir/./sub", "dir/sub"),
    ],
    ids=["symlink-and-dots", "file-symlink", "trailing-slash", "dot"],
)
def test_canonicalize(client: WsClient, tree: Path, name: str, expected: str) -> None:
    """canonicalize resolves symlinks, removes dots and trailing slashes."""
    result = client.request("fs/canonicalize", {"path": uri(tree) + "/" + name})
    assert result == {"path": uri(tree / expected)}


def test_canonicalize_root(client: WsClient) -> None:
    """``/`` stays ``file:///``."""
    assert client.request("fs/canonicalize", {"path": "file:///"}) == {"path": "file:///"}


def test_canonicalize_encodes_output(client: WsClient, tree: Path) -> None:
    """Output URIs percent-encode spaces, non-ASCII and ``#``."""
    (tree / "a b#ü").mkdir()
    result = client.request("fs/canonicalize", {"path": uri(tree / "a b#ü")})
    assert result["path"].endswith("/a%20b%23%C3%BC")


@pytest.mark.parametrize(
    ("name", "code"),
    [("missing", -32004), ("dangling", -32004), ("loop1", -32603), ("a.txt/x", -32603)],
    ids=["missing", "dangling", "loop", "parent-is-file"],
)
def test_canonicalize_errors(client: WsClient, tree: Path, name: str, code: int) -> None:
    """canonicalize needs an existing target."""
    assert error(client, "fs/canonicalize", {"path": uri(tree / name)})[0] == code
