"""Launch plans reused between launches (``executor/sandbox/memo.py``, the backend's
filesystem plans) confine the next launch exactly as a fresh plan would.

Real launches through the daemon's confinement (``SandboxConfinement``) and the launcher;
the host changes between two launches of the same request.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from pathlib import Path

import pytest
from executor_linux.backend import LinuxBackend, _FilesystemPlans, filesystem_plan

from executor.process.confinement import SandboxConfinement
from executor.protocol.intent import Access, parse_sandbox
from executor.sandbox import Command, HostInfo, PathKind, PathRule, RuleSet
from executor.sandbox.host import LocalHost
from executor.sandbox.manager import SandboxManager, get_plugin_manager
from executor.spawn.spawner import Spawner
from tests.executor_linux.conftest import linux_sandbox_available
from tests.sandbox.wire import context, managed, special
from tests.support.enforcement import skip_unless

pytestmark = pytest.mark.enforcement


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    ws = tmp_path / "workspace"
    (ws / "modules" / "x.git").mkdir(parents=True)
    return ws


def _run(confinement: SandboxConfinement, ws: Path, script: str) -> tuple[int, bytes]:
    """One sandboxed ``sh -c script`` in ``ws`` (read everywhere, write the workspace)."""
    sandbox = context(
        managed(special("root", "read"), special("project_roots", "write")),
        cwd=str(ws),
        roots=(str(ws),),
    )
    intent = parse_sandbox(sandbox)
    command = Command(
        executable="/bin/sh",
        argv=("sh", "-c", script),
        env={"PATH": "/usr/bin:/bin"},
        cwd=str(ws),
        tty=False,
    )

    async def launch() -> tuple[int, bytes]:
        confined = await confinement.enforce(intent, command, label="reuse")
        read_end, write_end = os.pipe()
        spawner = Spawner()
        try:
            launched = spawner.launch(confined.request, (0, write_end, write_end))
            os.close(write_end)
            write_end = -1
            await asyncio.wait_for(launched.started, 30)  # a failed start raises here
            status = await asyncio.wait_for(launched.exited, 30)
            output = await asyncio.wait_for(asyncio.to_thread(_read_to_end, read_end), 30)
            return os.waitstatus_to_exitcode(status), output
        finally:
            if write_end >= 0:
                os.close(write_end)
            os.close(read_end)
            spawner.close()
            if confined.release is not None:
                confined.release()

    return asyncio.run(launch())


def _read_to_end(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


WRITE_BOTH = "echo a > modules/x.git/HEAD && echo git-ok; echo b > notes && echo notes-ok; exit 0"


def test_a_git_dir_named_between_two_launches_is_read_only_in_the_second(
    workspace: Path, tmp_path: Path
) -> None:
    """Launch 1: ``modules/x.git`` is an ordinary writable directory. Then a ``.git`` file
    names it as the workspace's git dir. Launch 2 of the same request (its rules reused if
    the host had not changed) cannot write it, and still writes the workspace."""
    manager = SandboxManager(get_plugin_manager(), HostInfo.current(state_dir=str(tmp_path)))
    confinement = SandboxConfinement(manager, LocalHost(hidden_paths=(str(tmp_path / "s"),)))
    code, output = _run(confinement, workspace, WRITE_BOTH)
    assert (code, output) == (0, b"git-ok\nnotes-ok\n")
    if (workspace / ".git").is_dir():
        (workspace / ".git").rmdir()  # launch 1's placeholder, lingering for the next launch
    (workspace / ".git").write_text("gitdir: modules/x.git\n")
    (workspace / "modules" / "x.git" / "HEAD").write_text("kept\n")
    code, output = _run(confinement, workspace, WRITE_BOTH)
    assert b"git-ok" not in output and b"notes-ok" in output, output
    assert (workspace / "modules" / "x.git" / "HEAD").read_text() == "kept\n"


def test_a_workspace_swapped_for_a_symlink_between_two_launches_is_not_granted(
    workspace: Path, tmp_path: Path
) -> None:
    """Launch 1 writes the workspace. Then the workspace directory is renamed away and a
    symlink to a directory outside it takes its place: launch 2 of the same request must
    not write through the symlink into that directory (refused, or confined as a fresh plan
    confines it), and the renamed directory is not written either."""
    manager = SandboxManager(get_plugin_manager(), HostInfo.current(state_dir=str(tmp_path)))
    confinement = SandboxConfinement(manager, LocalHost(hidden_paths=(str(tmp_path / "s"),)))
    code, output = _run(confinement, workspace, "echo b > notes && echo notes-ok")
    assert (code, output) == (0, b"notes-ok\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    workspace.rename(tmp_path / "moved")
    workspace.symlink_to(outside)
    fresh = SandboxConfinement(manager, LocalHost(hidden_paths=(str(tmp_path / "s"),)))
    outcomes = []
    for planner in (confinement, fresh):
        try:
            outcomes.append(_run(planner, workspace, "echo c > notes2 && echo wrote; exit 0"))
        except Exception as exc:  # refused by the plan or at launch: the same for both
            outcomes.append((-1, type(exc).__name__.encode()))
    assert outcomes[0] == outcomes[1], outcomes
    assert not (tmp_path / "moved" / "notes2").exists()


def test_filesystem_plans_are_reused_for_an_equal_rule_set_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The backend's mounts and Landlock ruleset of a rule set serve an equal one (the next
    launch of the same sandbox), never another; and never when planning read the host
    (without namespaces, Landlock lists ``/`` to leave ``/dev`` out)."""
    plans = _FilesystemPlans()
    rules = RuleSet(
        filesystem_restricted=True,
        rules=(
            PathRule("/", Access.READ, kind=PathKind.DIRECTORY),
            PathRule(str(tmp_path), Access.WRITE, kind=PathKind.DIRECTORY),
        ),
    )
    first = plans.get(rules, 7, True)
    assert plans.get(rules, 7, True) is first
    assert plans.get(replace(rules), 7, True) is first
    other = replace(rules, rules=rules.rules[:1])
    assert plans.get(other, 7, True) == filesystem_plan(other, 7, True) != first
    for abi, namespaces in ((3, True), (7, False)):
        assert plans.get(rules, abi, namespaces) == filesystem_plan(rules, abi, namespaces)
        assert plans.get(rules, abi, namespaces) != first
    entries = ["bin", "dev", "usr"]
    real_listdir = os.listdir
    monkeypatch.setattr(
        os, "listdir", lambda path=".": list(entries) if path == "/" else real_listdir(path)
    )
    _mounts, before = plans.get(rules, 7, False)
    entries.append("opt")
    _mounts, after = plans.get(rules, 7, False)
    assert before is not None and after is not None
    assert "/opt" in dict(after.grants) and "/opt" not in dict(before.grants)


def test_the_staging_directory_is_made_again_when_it_went_away(tmp_path: Path) -> None:
    """Looked at on every launch: removed (a /tmp cleaner), it is made again; replaced by a
    file, the launch fails as it always did."""
    backend = LinuxBackend(state_dir=str(tmp_path / "state"))
    staging = tmp_path / "state" / "staging"
    assert backend._state_dir() == str(tmp_path / "state") and staging.is_dir()
    staging.rmdir()
    backend._state_dir()
    assert staging.is_dir() and staging.stat().st_mode & 0o777 == 0o700
    staging.rmdir()
    staging.write_text("")
    with pytest.raises(FileExistsError):
        backend._state_dir()
