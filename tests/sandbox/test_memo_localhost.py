"""The real host's check before a memoized rule set is reused (``LocalHost.answers_again``).

It reads several answers off one ``lstat`` per path instead of asking each method, so it must
agree with asking each method: on every kind of path (symlinks anywhere on the way, dangling,
looping, files under files, ``.git`` files, shared directories, paths that are not normal),
on the host as it was and after each change. And through the memo, a change between two
launches of the same request gets what a fresh materialization gets.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from executor.errors import SandboxUnavailable
from executor.protocol.intent import parse_sandbox
from executor.sandbox.host import LocalHost
from executor.sandbox.materialize import materialize
from executor.sandbox.memo import MaterializeMemo
from executor.sandbox.rules import PathKind, RuleSet
from tests.sandbox.wire import context, managed, special

METHODS = ("kind", "realpath", "is_symlink", "is_shared_directory", "gitdir_pointer")


def _tree(root: Path) -> None:
    """Every kind of path the questions may meet."""
    (root / "d" / "sub").mkdir(parents=True)
    (root / "d" / "file").write_text("x")
    (root / "shared").mkdir()
    (root / "shared").chmod(0o1777)
    (root / "open").mkdir()
    (root / "open").chmod(0o777)
    (root / "sticky").mkdir()
    (root / "sticky").chmod(0o1755)
    (root / "ws" / "modules" / "x.git").mkdir(parents=True)
    (root / "ws" / ".git").write_text("gitdir: modules/x.git\n")
    (root / "plain-git").mkdir()
    (root / "plain-git" / ".git").mkdir()
    (root / "link-dir").symlink_to(root / "d")
    (root / "link-file").symlink_to(root / "d" / "file")
    (root / "rel-link").symlink_to("d/sub")
    (root / "dangling").symlink_to(root / "nowhere")
    (root / "loop").symlink_to(root / "loop")
    (root / "git-link").symlink_to(root / "ws" / ".git")
    os.mkfifo(root / "fifo")


def _paths(root: Path) -> list[str]:
    base = str(root)
    names = [
        "",
        "d",
        "d/sub",
        "d/file",
        "d/file/below",
        "d/missing",
        "d/missing/deeper",
        "shared",
        "open",
        "sticky",
        "ws",
        "ws/.git",
        "ws/modules/x.git",
        "plain-git/.git",
        "link-dir",
        "link-dir/sub",
        "link-dir/file",
        "link-file",
        "rel-link",
        "dangling",
        "dangling/below",
        "loop",
        "loop/below",
        "git-link",
        "fifo",
    ]
    return [
        base,
        "/",
        f"{base}/d/./sub",
        f"{base}/d//sub",
        f"{base}/d/sub/",
        f"{base}/d/sub/..",
        f"{base}/d\0nul",
        "relative/path",
        *(f"{base}/{name}" for name in names if name),
    ]


def _questions(host: LocalHost, paths: list[str]) -> tuple[tuple[str, tuple[Any, ...], Any], ...]:
    asked = []
    for path in paths:
        for name in METHODS:
            try:
                answer = getattr(host, name)(path)
            except ValueError:  # a NUL byte: materialization never asks that
                continue
            asked.append((name, (path,), answer))
    return tuple(asked)


def _asking_each(host: LocalHost, questions: Any) -> bool:
    return all(getattr(host, name)(*args) == answer for name, args, answer in questions)


def test_the_answers_of_an_unchanged_host_hold_and_wrong_ones_do_not(tmp_path: Path) -> None:
    _tree(tmp_path)
    host = LocalHost()
    questions = _questions(host, _paths(tmp_path))
    assert len(questions) > 100
    assert host.answers_again(questions)
    for i, (name, args, answer) in enumerate(questions):
        wrong: Any = {
            "kind": "no such kind",
            "realpath": f"{answer}/elsewhere",
            "is_symlink": not answer,
            "is_shared_directory": not answer,
            "gitdir_pointer": "/some/other.git",
        }[name]
        changed = (*questions[:i], (name, args, wrong), *questions[i + 1 :])
        assert not host.answers_again(changed), (name, args, answer)


def _swap_dir_for_symlink(root: Path) -> None:
    (root / "d").rename(root / "d-moved")
    (root / "d").symlink_to(root / "d-moved")


def _retarget_symlink(root: Path) -> None:
    (root / "link-dir").unlink()
    (root / "link-dir").symlink_to(root / "ws")


def _symlink_to_dir(root: Path) -> None:
    (root / "link-dir").unlink()
    (root / "link-dir").mkdir()


def _dangling_resolves(root: Path) -> None:
    (root / "nowhere").mkdir()


def _missing_created(root: Path) -> None:
    (root / "d" / "missing").mkdir()


def _missing_created_as_symlink(root: Path) -> None:
    (root / "d" / "missing").symlink_to(root / "ws")


def _gitdir_retargeted(root: Path) -> None:
    (root / "ws" / ".git").write_text("gitdir: /elsewhere\n")


def _git_dir_becomes_file(root: Path) -> None:
    (root / "plain-git" / ".git").rmdir()
    (root / "plain-git" / ".git").write_text("gitdir: ../d\n")


def _shared_no_longer(root: Path) -> None:
    (root / "shared").chmod(0o755)
    (root / "d").chmod(0o777)


def _file_becomes_dir(root: Path) -> None:
    (root / "d" / "file").unlink()
    (root / "d" / "file").mkdir()


def _fifo_becomes_file(root: Path) -> None:
    (root / "fifo").unlink()
    (root / "fifo").write_text("")


def _parent_removed(root: Path) -> None:
    (root / "d" / "sub").rmdir()
    (root / "d" / "file").unlink()
    (root / "d").rmdir()


def _loop_broken(root: Path) -> None:
    (root / "loop").unlink()
    (root / "loop").symlink_to(root / "d")


@pytest.mark.parametrize(
    "change",
    [
        _swap_dir_for_symlink,
        _retarget_symlink,
        _symlink_to_dir,
        _dangling_resolves,
        _missing_created,
        _missing_created_as_symlink,
        _gitdir_retargeted,
        _git_dir_becomes_file,
        _shared_no_longer,
        _file_becomes_dir,
        _fifo_becomes_file,
        _parent_removed,
        _loop_broken,
    ],
)
def test_after_a_change_each_answer_holds_exactly_when_asking_says_so(
    tmp_path: Path, change: Callable[[Path], None]
) -> None:
    """Question by question (each alone, so that one changed answer cannot hide another)."""
    _tree(tmp_path)
    host = LocalHost()
    questions = _questions(host, _paths(tmp_path))
    change(tmp_path)
    changed = 0
    for question in questions:
        expected = _asking_each(host, [question])
        changed += not expected
        assert host.answers_again([question]) is expected, question
    assert changed, "the change must change some answer"
    assert not host.answers_again(questions)


class _Overriding(LocalHost):
    def kind(self, path: str) -> PathKind:
        return PathKind.MISSING


def test_an_overridden_method_is_asked(tmp_path: Path) -> None:
    """What a subclass or an instance answers, not what an lstat says."""
    questions = (("kind", (str(tmp_path),), PathKind.DIRECTORY),)
    host = LocalHost()
    assert host.answers_again(questions)
    assert not _Overriding().answers_again(questions)
    host.kind = lambda path: PathKind.MISSING  # type: ignore[method-assign]
    assert not host.answers_again(questions)


# --- through the memo: launches of one request on the real host -----------------------------


def _sandbox(ws: Path) -> dict[str, Any]:
    return context(
        managed(
            special("root", "read"),
            special("project_roots", "write"),
            special("slash_tmp", "write"),
            *(special("project_roots", "read", name, skip=True) for name in (".git", ".codex")),
        ),
        cwd=str(ws),
        roots=(str(ws),),
    )


def _launch(memo: MaterializeMemo | None, host: LocalHost, ws: Path) -> RuleSet | str | None:
    """The rules of one launch, or the refusal's message."""
    intent = parse_sandbox(_sandbox(ws))
    env = {"PATH": "/usr/bin:/bin"}
    try:
        if memo is None:
            return materialize(intent, host, process_cwd=str(ws), child_env=env)
        return memo.materialize(intent, host, process_cwd=str(ws), child_env=env)
    except SandboxUnavailable as exc:
        return exc.message


def _gitdir_named(ws: Path) -> None:
    (ws / "modules" / "x.git").mkdir(parents=True)
    (ws / ".git").write_text("gitdir: modules/x.git\n")


def _codex_symlinked(ws: Path) -> None:
    (ws / "elsewhere").mkdir()
    (ws / ".codex").symlink_to(ws / "elsewhere")


def _workspace_swapped(ws: Path) -> None:
    ws.rename(ws.with_name("moved"))
    ws.with_name("outside").mkdir()
    ws.symlink_to(ws.with_name("outside"))


def _parent_swapped(ws: Path) -> None:
    parent = ws.parent
    parent.rename(parent.with_name("parent-moved"))
    parent.with_name("parent-other").mkdir()
    (parent.with_name("parent-other") / ws.name).mkdir()
    parent.symlink_to(parent.with_name("parent-other"))


def _protected_created(ws: Path) -> None:
    (ws / ".codex").mkdir()


@pytest.mark.parametrize(
    "change",
    [_gitdir_named, _codex_symlinked, _workspace_swapped, _parent_swapped, _protected_created],
)
def test_a_change_between_two_launches_is_seen_by_the_second(
    tmp_path: Path, change: Callable[[Path], None]
) -> None:
    ws = tmp_path / "parent" / "ws"
    ws.mkdir(parents=True)
    host = LocalHost(hidden_paths=(str(tmp_path / "state"),))
    memo = MaterializeMemo()
    first = _launch(memo, host, ws)
    assert isinstance(first, RuleSet) and _launch(memo, host, ws) is first  # reused meanwhile
    change(ws)
    expected = _launch(None, host, ws)
    assert expected != first, "the change must matter to materialization"
    assert _launch(memo, host, ws) == expected
    assert _launch(memo, host, ws) == expected
