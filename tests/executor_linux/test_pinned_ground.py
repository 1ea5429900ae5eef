"""The ground under protected metadata stays put (issue 11, class 4).

The workspace lives in the test's own directory under ``/tmp``, which the ``workspace``
profile may write: exactly the case where the workspace is an ordinary entry of a writable
parent. Nothing a sandboxed command does may move, replace or shadow the workspace root, a
directory between it and the writable root, or a protected name at any of those levels; a
later command never runs with rules derived from something an earlier one planted. Every
target is the test's own directory, so a failing sandbox changes nothing else.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.executor_linux.conftest import executor_run, linux_sandbox_available
from tests.support.enforcement import skip_unless

pytestmark = pytest.mark.enforcement


@pytest.fixture(autouse=True)
def sandboxed() -> None:
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """``<tmp>/box/ws``: a git workspace two levels below the writable ``/tmp``."""
    root = tmp_path.resolve() / "box"
    workspace = root / "ws"
    workspace.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    (workspace / "tracked.txt").write_text("tracked\n")
    return workspace


def run(
    workspace: Path, script: str, profile: str = "workspace"
) -> subprocess.CompletedProcess[str]:
    return executor_run(profile, workspace, ["/bin/sh", "-c", script], "--no-tty", cwd=workspace)


def test_the_workspace_cannot_be_renamed_or_replaced(ws: Path) -> None:
    """``mv ws ws.o; ln -s elsewhere ws`` and ``cp -a`` swaps fail; writing inside works."""
    result = run(
        ws,
        f"mv {ws} {ws}.o; echo mv=$?; mv {ws.parent} {ws.parent}.o; echo mvparent=$?; "
        f"rmdir {ws} 2>/dev/null; echo rmdir=$?; echo inside > {ws}/new.txt; echo write=$?",
    )
    out = result.stdout
    assert "mv=1" in out and "mvparent=1" in out and "rmdir=1" in out, out + result.stderr
    assert "Device or resource busy" in result.stderr
    assert "write=0" in out
    assert ws.is_dir() and not ws.is_symlink() and (ws / ".git").is_dir()
    assert not Path(f"{ws}.o").exists() and not Path(f"{ws.parent}.o").exists()
    assert (ws / "new.txt").read_text() == "inside\n"


def test_a_git_dir_cannot_be_planted_in_the_workspace_parent(ws: Path) -> None:
    """``git init ..`` (core.fsmonitor would run on the host's next ``git status``) fails;
    git inside the workspace still works."""
    plain = ws.parent / "plain"
    plain.mkdir()
    result = run(
        plain,
        "git init -q .. ; echo init=$?; mkdir ../.git; echo mkdir=$?; "
        "git -C . status >/dev/null 2>&1; echo status=$?",
    )
    assert "init=0" not in result.stdout and "mkdir=1" in result.stdout, result.stdout
    assert not (ws.parent / ".git").exists(), "no placeholder or planted .git is left behind"
    in_repo = run(ws, "git status --porcelain; echo status=$?")
    assert "status=0" in in_repo.stdout and "tracked.txt" in in_repo.stdout


def test_a_symlinked_git_dir_cannot_be_swapped(ws: Path) -> None:
    """``.git`` as a symlink: the link cannot be removed or replaced, its target not written."""
    real = ws.parent / "realgit"
    (ws / ".git").rename(real)
    (ws / ".git").symlink_to(real)
    result = run(
        ws,
        "rm .git; echo rm=$?; mv .git .git-old; echo mv=$?; "
        "echo '[core]' >> .git/config; echo cfg=$?; git status >/dev/null; echo status=$?",
    )
    out = result.stdout
    assert "rm=1" in out and "mv=1" in out and "cfg=0" not in out, out
    assert "status=0" in out
    assert (ws / ".git").is_symlink() and os.readlink(ws / ".git") == str(real)
    assert "[core]\n[core]" not in (real / "config").read_text()


def test_a_symlink_planted_as_a_workspace_is_refused(ws: Path) -> None:
    """An earlier command leaves ``ws2 -> target``; a later command for ``ws2`` is refused
    before anything runs, and the target is untouched."""
    target = ws.parent / "target"
    target.mkdir()
    planted = run(ws, f"ln -s {target} {ws.parent}/ws2; echo ln=$?")
    assert "ln=0" in planted.stdout, planted.stderr  # /tmp is writable: that is allowed
    later = run(ws.parent / "ws2", "echo pwned > owned.txt")
    assert later.returncode != 0
    assert "symlink" in later.stderr and str(ws.parent / "ws2") in later.stderr
    assert not (target / "owned.txt").exists()


def test_profile_protected_names_stay_read_only_and_uncreatable(ws: Path) -> None:
    """The shipped workspace profile also protects files host tools run later."""
    (ws / ".vscode").mkdir()
    (ws / ".vscode" / "tasks.json").write_text("{}\n")
    result = run(
        ws,
        "echo '{\"x\":1}' > .vscode/tasks.json; echo tasks=$?; "
        "echo '{}' > .mcp.json; echo mcp=$?; echo 'evil' > .envrc; echo envrc=$?; "
        "echo 'echo hi' >> ../.bashrc; echo parent_rc=$?; echo ok > plain.txt; echo plain=$?",
    )
    out = result.stdout
    for name in ("tasks", "mcp", "envrc", "parent_rc"):
        assert f"{name}=0" not in out, (name, out)
    assert "plain=0" in out
    assert (ws / ".vscode" / "tasks.json").read_text() == "{}\n"
    for missing in (ws / ".mcp.json", ws / ".envrc", ws.parent / ".bashrc"):
        assert not missing.exists(), missing
    assert (ws / "plain.txt").read_text() == "ok\n"
