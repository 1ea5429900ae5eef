"""``fs/remove`` (protocol.md §5.18): defaults, symlinks, refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fs.helpers import error, uri
from tests.support.client import WsClient

NO_FOLLOW = "recursive no-follow removal is unsupported"
SYMLINK = "path contains a symbolic link"
ENOTDIR = "Not a directory (os error 20)"


@pytest.fixture
def tree(workspace: Path) -> Path:
    """A tree with a non-empty and an empty directory, a file and symlinks."""
    (workspace / "d" / "sub").mkdir(parents=True)
    (workspace / "d" / "sub" / "y").write_bytes(b"y")
    (workspace / "empty").mkdir()
    (workspace / "target").mkdir()
    (workspace / "target" / "keep").write_bytes(b"keep")
    (workspace / "tlink").symlink_to("target")
    (workspace / "dangling").symlink_to("nowhere")
    (workspace / "f").write_bytes(b"f")
    return workspace


def test_remove_tree_by_default(client: WsClient, tree: Path) -> None:
    """``recursive`` defaults to true."""
    assert client.request("fs/remove", {"path": uri(tree / "d")}) == {}
    assert not (tree / "d").exists()


def test_remove_file_and_empty_directory(client: WsClient, tree: Path) -> None:
    """A file, and an empty directory without ``recursive``."""
    client.request("fs/remove", {"path": uri(tree / "f")})
    client.request("fs/remove", {"path": uri(tree / "empty"), "recursive": False})
    assert not (tree / "f").exists()
    assert not (tree / "empty").exists()


def test_remove_missing_is_success_by_default(client: WsClient, tree: Path) -> None:
    """``force`` defaults to true; without it a missing path is -32004."""
    assert client.request("fs/remove", {"path": uri(tree / "missing")}) == {}
    assert client.request("fs/remove", {"path": uri(tree / "missing" / "deeper")}) == {}
    assert error(client, "fs/remove", {"path": uri(tree / "missing"), "force": False}) == (
        -32004,
        "No such file or directory (os error 2)",
    )


def test_remove_symlink_never_touches_target(client: WsClient, tree: Path) -> None:
    """A symlink to a directory is removed itself, even recursively; the target stays."""
    client.request("fs/remove", {"path": uri(tree / "tlink")})
    client.request("fs/remove", {"path": uri(tree / "dangling"), "recursive": False})
    assert not (tree / "tlink").is_symlink()
    assert not (tree / "dangling").is_symlink()
    assert (tree / "target" / "keep").read_bytes() == b"keep"


def test_remove_through_symlinked_parent(client: WsClient, tree: Path) -> None:
    """Parents are followed."""
    client.request("fs/remove", {"path": uri(tree / "tlink" / "keep")})
    assert not (tree / "target" / "keep").exists()


def test_remove_without_following(client: WsClient, tree: Path) -> None:
    """``followSymlinks: false`` works on plain paths when not recursive."""
    client.request(
        "fs/remove", {"path": uri(tree / "f"), "followSymlinks": False, "recursive": False}
    )
    assert not (tree / "f").exists()


@pytest.mark.parametrize(
    ("name", "params", "code", "message"),
    [
        ("d", {"recursive": False}, -32603, "Directory not empty (os error 39)"),
        ("tlink", {"followSymlinks": False}, -32603, NO_FOLLOW),
        ("missing", {"followSymlinks": False}, -32603, NO_FOLLOW),
        ("tlink", {"followSymlinks": False, "recursive": False}, -32600, SYMLINK),
        ("tlink/keep", {"followSymlinks": False, "recursive": False}, -32603, ENOTDIR),
        ("f/x", {}, -32603, "Not a directory (os error 20)"),
        ("f/x", {"force": False}, -32603, "Not a directory (os error 20)"),
    ],
    ids=[
        "non-empty",
        "nofollow-recursive",
        "nofollow-recursive-missing",
        "nofollow-symlink",
        "nofollow-parent-symlink",
        "under-file",
        "under-file-no-force",
    ],
)
def test_remove_errors(
    client: WsClient, tree: Path, name: str, params: dict[str, bool], code: int, message: str
) -> None:
    """remove fails with the reference's code and message, removing nothing."""
    assert error(client, "fs/remove", {"path": uri(tree / name), **params}) == (code, message)
    assert (tree / "d" / "sub" / "y").exists()
    assert (tree / "tlink").is_symlink()


def test_remove_root_is_refused(client: WsClient) -> None:
    """Ours: ``/`` is refused outright (the reference starts deleting the host)."""
    got = error(client, "fs/remove", {"path": "file:///"})
    assert got == (-32600, "fs/remove refuses to remove the filesystem root `/`")
    assert Path("/tmp").is_dir()


def test_remove_deep_tree(client: WsClient, tree: Path) -> None:
    """A tree deeper than PATH_MAX and the recursion limit is removed (no recursion)."""
    (tree / "deep").mkdir()
    fd = os.open(tree / "deep", os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(1100):
        os.mkdir("dd", dir_fd=fd)
        next_fd = os.open("dd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = next_fd
    os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    os.close(fd)
    client.request("fs/remove", {"path": uri(tree / "deep")}, timeout=60)
    assert not (tree / "deep").exists()
