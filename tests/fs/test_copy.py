"""``fs/copy`` (protocol.md §5.19): files, symlinks, trees, merges, refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fs.helpers import error, uri
from tests.support.client import WsClient

NEEDS_RECURSIVE = "fs/copy requires recursive: true when sourcePath is a directory"
INTO_ITSELF = "fs/copy cannot copy a directory to itself or one of its descendants"
UNSUPPORTED = "fs/copy only supports regular files, directories, and symlinks"


@pytest.fixture
def tree(workspace: Path) -> Path:
    """src/{a (0600), alink, dirlink, dangling, fifo, sub/b}, dst/{sub/b, extra}, and f."""
    src, dst = workspace / "src", workspace / "dst"
    (src / "sub").mkdir(parents=True)
    (dst / "sub").mkdir(parents=True)
    (workspace / "tgt").mkdir()
    (src / "a").write_bytes(b"a")
    (src / "a").chmod(0o600)
    (src / "sub" / "b").write_bytes(b"new b")
    (src / "alink").symlink_to("a")
    (src / "dirlink").symlink_to("../tgt")
    (src / "dangling").symlink_to("nowhere")
    os.mkfifo(src / "fifo")
    (dst / "sub" / "b").write_bytes(b"old b")
    (dst / "extra").write_bytes(b"extra")
    (workspace / "f").write_bytes(b"file")
    return workspace


def copy(client: WsClient, source: Path, destination: Path, recursive: bool) -> object:
    """One fs/copy call."""
    params = {
        "sourcePath": uri(source),
        "destinationPath": uri(destination),
        "recursive": recursive,
    }
    return client.request("fs/copy", params)


def test_copy_file(client: WsClient, tree: Path) -> None:
    """A file is copied with its permission bits."""
    assert copy(client, tree / "src" / "a", tree / "a2", False) == {}
    assert (tree / "a2").read_bytes() == b"a"
    assert (tree / "a2").stat().st_mode & 0o777 == 0o600


def test_copy_file_over_existing_file(client: WsClient, tree: Path) -> None:
    """An existing file is overwritten."""
    copy(client, tree / "f", tree / "dst" / "extra", False)
    assert (tree / "dst" / "extra").read_bytes() == b"file"


def test_copy_file_onto_itself_keeps_it(client: WsClient, tree: Path) -> None:
    """Ours: a file copied onto itself (or a link to it) is kept (the reference empties it)."""
    (tree / "flink").symlink_to("f")
    copy(client, tree / "f", tree / "f", False)
    copy(client, tree / "f", tree / "flink", False)
    assert (tree / "f").read_bytes() == b"file"


def test_copy_symlink_as_symlink(client: WsClient, tree: Path) -> None:
    """A symlink source (even to a directory, even dangling) becomes the same symlink."""
    copy(client, tree / "src" / "alink", tree / "alink2", False)
    copy(client, tree / "src" / "dirlink", tree / "dl2", False)
    copy(client, tree / "src" / "dangling", tree / "dang2", False)
    assert [os.readlink(tree / name) for name in ("alink2", "dl2", "dang2")] == [
        "a",
        "../tgt",
        "nowhere",
    ]


def test_copy_tree_merges(client: WsClient, tree: Path) -> None:
    """Onto an existing directory: same names overwritten, extra files kept, FIFOs skipped."""
    assert copy(client, tree / "src", tree / "dst", True) == {}
    dst = tree / "dst"
    assert sorted(os.listdir(dst)) == ["a", "alink", "dangling", "dirlink", "extra", "sub"]
    assert (dst / "sub" / "b").read_bytes() == b"new b"
    assert (dst / "extra").read_bytes() == b"extra"
    assert os.readlink(dst / "alink") == "a"
    assert (dst / "a").stat().st_mode & 0o777 == 0o600


def test_copy_tree_creates_missing_parents(client: WsClient, tree: Path) -> None:
    """A directory copy creates missing destination parents (a file copy does not)."""
    copy(client, tree / "src" / "sub", tree / "new" / "deeper", True)
    assert (tree / "new" / "deeper" / "b").read_bytes() == b"new b"


def test_copy_tree_sibling_with_common_prefix(client: WsClient, tree: Path) -> None:
    """``src2`` is not inside ``src``: the descendant check compares path components."""
    copy(client, tree / "src" / "sub", tree / "src" / "sub2", True)
    assert (tree / "src" / "sub2" / "b").exists()


@pytest.mark.parametrize(
    ("source", "destination", "recursive", "code", "message"),
    [
        ("src", "src2", False, -32600, NEEDS_RECURSIVE),
        ("src", "src", True, -32600, INTO_ITSELF),
        ("src", "src/sub/x", True, -32600, INTO_ITSELF),
        ("src", "srclink/inside", True, -32600, INTO_ITSELF),
        ("f", "dst", False, -32603, "Is a directory (os error 21)"),
        ("f", "nodir/f", False, -32004, "No such file or directory (os error 2)"),
        ("missing", "m2", False, -32004, "No such file or directory (os error 2)"),
        ("src", "f", True, -32603, "File exists (os error 17)"),
        ("src/alink", "f", False, -32603, "File exists (os error 17)"),
        ("src/fifo", "fifo2", False, -32600, UNSUPPORTED),
    ],
    ids=[
        "dir-needs-recursive",
        "into-itself",
        "into-descendant",
        "into-descendant-via-link",
        "file-onto-dir",
        "missing-parent",
        "missing-source",
        "dir-onto-file",
        "symlink-onto-file",
        "fifo",
    ],
)
def test_copy_errors(
    client: WsClient,
    tree: Path,
    source: str,
    destination: str,
    recursive: bool,
    code: int,
    message: str,
) -> None:
    """copy fails with the reference's code and message."""
    (tree / "srclink").symlink_to("src")
    params = {
        "sourcePath": uri(tree / source),
        "destinationPath": uri(tree / destination),
        "recursive": recursive,
    }
    assert error(client, "fs/copy", params) == (code, message)
    assert not (tree / "src" / "sub" / "x").exists()


def test_copy_needs_recursive_field(client: WsClient, tree: Path) -> None:
    """``recursive`` is required (-32602)."""
    params = {"sourcePath": uri(tree / "f"), "destinationPath": uri(tree / "g")}
    assert error(client, "fs/copy", params) == (-32602, "missing field `recursive`")


def test_copy_large_file(client: WsClient, tree: Path) -> None:
    """A file larger than any buffer is copied exactly."""
    data = os.urandom(5 * 1024 * 1024 + 3)
    (tree / "big").write_bytes(data)
    copy(client, tree / "big", tree / "big2", False)
    assert (tree / "big2").read_bytes() == data
