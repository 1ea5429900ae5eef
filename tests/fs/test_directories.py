"""``fs/createDirectory`` and ``fs/readDirectory`` (protocol.md §5.14, §5.16)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fs.helpers import error, uri
from tests.support.client import WsClient

EEXIST = "File exists (os error 17)"


@pytest.fixture
def tree(workspace: Path) -> Path:
    """A file, a directory, symlinks to both, a dangling link and a FIFO."""
    (workspace / "f.txt").write_bytes(b"x")
    (workspace / "d").mkdir()
    (workspace / "flink").symlink_to("f.txt")
    (workspace / "dlink").symlink_to("d")
    (workspace / "dangling").symlink_to("nowhere")
    os.mkfifo(workspace / "fifo")
    return workspace


def test_create_directory_is_recursive_by_default(client: WsClient, tree: Path) -> None:
    """Missing parents are created; repeating it is success."""
    target = tree / "a" / "b" / "c"
    assert client.request("fs/createDirectory", {"path": uri(target)}) == {}
    assert target.is_dir()
    assert client.request("fs/createDirectory", {"path": uri(target), "recursive": None}) == {}


def test_create_directory_non_recursive(client: WsClient, tree: Path) -> None:
    """``recursive: false`` creates one directory."""
    client.request("fs/createDirectory", {"path": uri(tree / "one"), "recursive": False})
    assert (tree / "one").is_dir()


def test_create_directory_through_symlinks(client: WsClient, tree: Path) -> None:
    """Symlinked parents are followed; a symlink to a directory counts as existing."""
    client.request("fs/createDirectory", {"path": uri(tree / "dlink" / "n4" / "n5")})
    assert (tree / "d" / "n4" / "n5").is_dir()
    assert client.request("fs/createDirectory", {"path": uri(tree / "dlink")}) == {}


@pytest.mark.parametrize(
    ("name", "params", "code", "message"),
    [
        ("f.txt", {}, -32603, "File exists (os error 17)"),
        ("f.txt", {"recursive": False}, -32603, "File exists (os error 17)"),
        ("d", {"recursive": False}, -32603, "File exists (os error 17)"),
        ("flink", {}, -32603, "File exists (os error 17)"),
        ("dangling", {}, -32603, "File exists (os error 17)"),
        ("dangling/x/y", {}, -32603, "File exists (os error 17)"),
        ("f.txt/a/b", {}, -32603, "Not a directory (os error 20)"),
        ("missing/x", {"recursive": False}, -32004, "No such file or directory (os error 2)"),
        ("dlink", {"followSymlinks": False}, -32603, "Not a directory (os error 20)"),
        ("f.txt", {"followSymlinks": False}, -32603, "Not a directory (os error 20)"),
        ("dlink", {"followSymlinks": False, "recursive": False}, -32603, EEXIST),
        ("dlink/new", {"followSymlinks": False}, -32603, "Not a directory (os error 20)"),
    ],
    ids=[
        "file",
        "file-non-recursive",
        "dir-non-recursive",
        "file-symlink",
        "dangling",
        "under-dangling",
        "under-file",
        "missing-parent-non-recursive",
        "nofollow-dir-symlink",
        "nofollow-file",
        "nofollow-non-recursive",
        "nofollow-parent-symlink",
    ],
)
def test_create_directory_errors(
    client: WsClient, tree: Path, name: str, params: dict[str, bool], code: int, message: str
) -> None:
    """createDirectory fails with the reference's code and message."""
    got = error(client, "fs/createDirectory", {"path": uri(tree / name), **params})
    assert got == (code, message)


def test_create_root_directory(client: WsClient) -> None:
    """``/`` exists: fine recursively, ``EEXIST`` otherwise."""
    assert client.request("fs/createDirectory", {"path": "file:///"}) == {}
    assert (
        error(client, "fs/createDirectory", {"path": "file:///", "recursive": False})[0] == -32603
    )


def test_read_directory_lists_children_by_target_type(client: WsClient, tree: Path) -> None:
    """Symlinks are described by their target; dangling ones are left out; FIFOs are neither."""
    result = client.request("fs/readDirectory", {"path": uri(tree)})
    entries = {
        entry["fileName"]: (entry["isDirectory"], entry["isFile"]) for entry in result["entries"]
    }
    assert entries == {
        "f.txt": (False, True),
        "d": (True, False),
        "flink": (False, True),
        "dlink": (True, False),
        "fifo": (False, False),
    }
    assert list(result["entries"][0]) == ["fileName", "isDirectory", "isFile"]


def test_read_directory_through_symlink(client: WsClient, tree: Path) -> None:
    """A symlink to a directory lists the target."""
    (tree / "d" / "inner").write_bytes(b"")
    result = client.request("fs/readDirectory", {"path": uri(tree / "dlink")})
    assert result == {"entries": [{"fileName": "inner", "isDirectory": False, "isFile": True}]}


def test_read_directory_non_utf8_name(client: WsClient, tree: Path) -> None:
    """A name that is not UTF-8 is shown with U+FFFD."""
    os.close(
        os.open(os.path.join(os.fsencode(tree / "d"), b"bad\xffname"), os.O_CREAT | os.O_WRONLY)
    )
    result = client.request("fs/readDirectory", {"path": uri(tree / "d")})
    assert result["entries"][0]["fileName"] == "bad\ufffdname"


@pytest.mark.parametrize(
    ("name", "code", "message"),
    [
        ("f.txt", -32603, "Not a directory (os error 20)"),
        ("fifo", -32603, "Not a directory (os error 20)"),
        ("missing", -32004, "No such file or directory (os error 2)"),
        ("dangling", -32004, "No such file or directory (os error 2)"),
    ],
    ids=["file", "fifo", "missing", "dangling"],
)
def test_read_directory_errors(
    client: WsClient, tree: Path, name: str, code: int, message: str
) -> None:
    """readDirectory needs a directory."""
    assert error(client, "fs/readDirectory", {"path": uri(tree / name)}) == (code, message)
