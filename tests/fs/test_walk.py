"""``fs/walk`` (protocol.md §5.17): order, depth, limits, symlinks, errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.fs.helpers import error, path_entry, sandbox, special_entry, uri
from tests.support.client import WsClient

ZERO = "filesystem walk limits must be greater than zero"
MAXIMA = "filesystem walk limits exceed maximums: depth=64, directories=10000, entries=50000"


def options(
    depth: int = 10, directories: int = 1000, entries: int = 1000, follow: bool = False
) -> dict[str, Any]:
    """WalkOptions (all four fields are required)."""
    return {
        "maxDepth": depth,
        "maxDirectories": directories,
        "maxEntries": entries,
        "followDirectorySymlinks": follow,
    }


def walk(
    client: WsClient, root: Path, **kwargs: Any
) -> tuple[list[tuple[str, str]], list[Any], bool]:
    """(relative path, kind initial) pairs, errors and the truncated flag."""
    extra = kwargs.pop("extra", {})
    result = client.request("fs/walk", {"path": uri(root), "options": options(**kwargs), **extra})
    prefix = uri(root) + "/"
    listed = [(entry["path"].removeprefix(prefix), entry["kind"][0]) for entry in result["entries"]]
    return listed, result["errors"], result["truncated"]


@pytest.fixture
def deep(workspace: Path) -> Path:
    """The tree of the captured transcript: deep/{a/b/c/d/leaf.txt, top.txt}."""
    root = workspace / "deep"
    (root / "a" / "b" / "c" / "d").mkdir(parents=True)
    (root / "a" / "b" / "c" / "d" / "leaf.txt").write_bytes(b"")
    (root / "top.txt").write_bytes(b"")
    return root


@pytest.fixture
def mixed(workspace: Path) -> Path:
    """Sorting and every kind of child: files, dirs, symlinks of all sorts, a FIFO."""
    root = workspace / "root"
    for directory in ("a/aa", "b/bb", "c"):
        (root / directory).mkdir(parents=True)
    for name in ("z.txt", "B.txt", "_x", "a/a1", "a/aa/aa1", "b/b1", "b/bb/bb1", "c/c1"):
        (root / name).write_bytes(b"")
    (workspace / "other" / "o1").mkdir(parents=True)
    (root / "dlink").symlink_to("../other")
    (root / "flink").symlink_to("z.txt")
    (root / "dangling").symlink_to("nowhere")
    (root / "uplink").symlink_to("..")
    (root / "alink").symlink_to("a")
    os.mkfifo(root / "fifo")
    return root


def test_walk_matches_captured_transcript(client: WsClient, deep: Path) -> None:
    """Breadth-first, names sorted, the root not listed (the captured v0.169.0 answer)."""
    listed, errors, truncated = walk(client, deep)
    assert listed == [
        ("a", "d"),
        ("top.txt", "f"),
        ("a/b", "d"),
        ("a/b/c", "d"),
        ("a/b/c/d", "d"),
        ("a/b/c/d/leaf.txt", "f"),
    ]
    assert (errors, truncated) == ([], False)


def test_walk_skips_symlinks_and_special_files(client: WsClient, mixed: Path) -> None:
    """Without following: no symlinks at all, no FIFOs; byte order of names."""
    listed, _errors, truncated = walk(client, mixed)
    assert listed == [
        ("B.txt", "f"),
        ("_x", "f"),
        ("a", "d"),
        ("b", "d"),
        ("c", "d"),
        ("z.txt", "f"),
        ("a/a1", "f"),
        ("a/aa", "d"),
        ("b/b1", "f"),
        ("b/bb", "d"),
        ("c/c1", "f"),
        ("a/aa/aa1", "f"),
        ("b/bb/bb1", "f"),
    ]
    assert not truncated


def test_walk_follows_directory_symlinks_once(client: WsClient, mixed: Path) -> None:
    """Directory symlinks are listed as directories and entered unless their target was seen."""
    listed, _errors, _truncated = walk(client, mixed, follow=True)
    assert listed == [
        ("B.txt", "f"),
        ("_x", "f"),
        ("a", "d"),
        ("alink", "d"),
        ("b", "d"),
        ("c", "d"),
        ("dlink", "d"),
        ("uplink", "d"),
        ("z.txt", "f"),
        ("a/a1", "f"),
        ("a/aa", "d"),
        ("b/b1", "f"),
        ("b/bb", "d"),
        ("c/c1", "f"),
        ("dlink/o1", "d"),
        ("uplink/other", "d"),
        ("uplink/root", "d"),
        ("a/aa/aa1", "f"),
        ("b/bb/bb1", "f"),
    ]


def test_walk_link_before_its_target(client: WsClient, workspace: Path) -> None:
    """A link sorted before its target is entered; the real directory is then only listed."""
    root = workspace / "root"
    (root / "b" / "bb").mkdir(parents=True)
    (root / "b" / "f").write_bytes(b"")
    (root / "0link").symlink_to("b")
    listed, _errors, _truncated = walk(client, root, follow=True)
    assert listed == [("0link", "d"), ("b", "d"), ("0link/bb", "d"), ("0link/f", "f")]


@pytest.mark.parametrize(
    ("limits", "count", "truncated"),
    [
        ({"depth": 0}, 6, False),
        ({"depth": 1}, 11, False),
        ({"directories": 1}, 6, True),
        ({"directories": 2}, 8, True),
        ({"entries": 3}, 3, True),
        ({"entries": 9}, 5, True),
    ],
    ids=[
        "depth-0",
        "depth-1",
        "one-directory",
        "two-directories",
        "three-entries",
        "nine-looked-at",
    ],
)
def test_walk_limits(
    client: WsClient, mixed: Path, limits: dict[str, int], count: int, truncated: bool
) -> None:
    """Depth counts from the root's children; the root is a directory read; every name
    looked at (listed or not) counts as an entry, but for symlinks that resolve to nothing."""
    listed, _errors, was_truncated = walk(client, mixed, **limits)
    assert (len(listed), was_truncated) == (count, truncated)


def test_walk_does_not_count_names_that_resolve_to_nothing(
    client: WsClient, workspace: Path
) -> None:
    """A dangling or looping symlink is skipped without being counted against
    ``maxEntries``, and one left after the last counted name does not make the walk
    truncated (observed on the reference, v0.171); a symlink to a file is counted, though
    never listed."""
    root = workspace / "w"
    root.mkdir()
    (root / "a-dangling").symlink_to("nowhere")
    (root / "b-loop").symlink_to("b-loop")
    for name in ("f", "g"):
        (root / name).write_bytes(b"")
    (root / "zz-dangling").symlink_to("gone")
    assert walk(client, root, entries=1) == ([("f", "f")], [], True)
    assert walk(client, root, entries=2) == ([("f", "f"), ("g", "f")], [], False)
    (root / "c-flink").symlink_to("f")
    assert walk(client, root, entries=2) == ([("f", "f")], [], True)


def test_walk_counts_a_symlink_by_what_the_sandbox_shows_of_its_target(
    client: WsClient, workspace: Path
) -> None:
    """Whether a symlink counts is decided in the sandbox's view, never the host's: one whose
    target lies outside every rule is dangling there (not counted, so its host target's
    existence cannot be read off the listing); without the sandbox the same link counts."""
    root = workspace / "w2"
    root.mkdir()
    (workspace / "secret").mkdir()
    (root / "a-out").symlink_to(workspace / "secret")
    for name in ("f", "g"):
        (root / name).write_bytes(b"")
    view = {"sandbox": sandbox(path_entry(root, "read"))}
    assert walk(client, root, entries=1, extra=view) == ([("f", "f")], [], True)
    assert walk(client, root, entries=1) == ([], [], True)


def test_walk_limits_exactly_reached_are_not_truncation(client: WsClient, workspace: Path) -> None:
    """Reading everything with the limits just large enough is not truncated."""
    (workspace / "b" / "bb").mkdir(parents=True)
    (workspace / "b" / "b1").write_bytes(b"")
    (workspace / "b" / "bb" / "bb1").write_bytes(b"")
    assert walk(client, workspace / "b", directories=2, entries=3)[2] is False
    assert walk(client, workspace / "b", directories=1)[2] is True


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"directories": 0}, ZERO),
        ({"entries": 0}, ZERO),
        ({"depth": 65, "directories": 0}, ZERO),
        ({"depth": 65}, MAXIMA),
        ({"directories": 10001}, MAXIMA),
        ({"entries": 50001}, MAXIMA),
    ],
    ids=["zero-directories", "zero-entries", "zero-first", "depth", "directories", "entries"],
)
def test_walk_limit_validation(
    client: WsClient, workspace: Path, limits: dict[str, Any], message: str
) -> None:
    """Limits are checked before the path, zero before the maxima."""
    params = {"path": uri(workspace / "missing"), "options": options(**limits)}
    got = error(client, "fs/walk", params)
    assert got == (-32600, message)


def test_walk_maximum_limits_are_accepted(client: WsClient, deep: Path) -> None:
    """64 / 10,000 / 50,000 are allowed."""
    assert walk(client, deep, depth=64, directories=10_000, entries=50_000)[2] is False


def test_walk_needs_all_options(client: WsClient, deep: Path) -> None:
    """Every option is required (-32602)."""
    params = {"path": uri(deep), "options": {"maxDepth": 1, "maxDirectories": 1, "maxEntries": 1}}
    assert error(client, "fs/walk", params) == (
        -32602,
        "missing field `followDirectorySymlinks` at `options`",
    )


def test_walk_odd_roots(client: WsClient, workspace: Path, deep: Path) -> None:
    """A file or (unfollowed) symlink root is empty; a followed one is walked under its own name."""
    (workspace / "deep-link").symlink_to("deep")
    assert walk(client, deep / "top.txt") == ([], [], False)
    assert walk(client, workspace / "deep-link") == ([], [], False)
    listed, _errors, _truncated = walk(client, workspace / "deep-link", follow=True)
    assert listed[:2] == [("a", "d"), ("top.txt", "f")]


@pytest.mark.parametrize(
    ("name", "code"),
    [("missing", -32004), ("deep/top.txt/x", -32603)],
    ids=["missing", "under-file"],
)
def test_walk_root_errors(
    client: WsClient, workspace: Path, deep: Path, name: str, code: int
) -> None:
    """Only the root's failure fails the request."""
    assert (
        error(client, "fs/walk", {"path": uri(workspace / name), "options": options()})[0] == code
    )


def test_walk_reports_unreadable_directories(client: WsClient, workspace: Path) -> None:
    """A denied subdirectory is listed and becomes an ``errors`` entry (reference wording)."""
    (workspace / "walk" / "b").mkdir(parents=True)
    (workspace / "walk" / "a.txt").write_bytes(b"")
    (workspace / "walk" / "b" / "secret").write_bytes(b"")
    context = sandbox(special_entry("root", "read"), path_entry(workspace / "walk" / "b", "deny"))
    listed, errors, truncated = walk(client, workspace / "walk", extra={"sandbox": context})
    assert listed == [("a.txt", "f"), ("b", "d")]
    assert errors == [
        {"path": uri(workspace / "walk" / "b"), "message": "Permission denied (os error 13)"}
    ]
    assert not truncated
