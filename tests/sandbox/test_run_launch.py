"""`executor run` when the command cannot start (exit 125, one line naming what failed), the
denial line (a heuristic that names its evidence), and `backends --profile`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.executor_linux.conftest import linux_sandbox_available
from tests.support.daemon import executor_command
from tests.support.enforcement import skip_unless


def executor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the console script."""
    return subprocess.run(
        [*executor_command(), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )


@pytest.fixture
def ws() -> Iterator[Path]:
    """A workspace outside /tmp."""
    path = Path(tempfile.mkdtemp(prefix="executor-run-", dir="/var/tmp")).resolve()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def launch_failure(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a launch failure prints (and check there is exactly one, exit 125)."""
    assert result.returncode == 125, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_program_not_on_path_is_command_not_found(ws: Path) -> None:
    """As a shell says it; nothing ran."""
    result = executor("run", "--profile", "danger-full-access", "--", "executor-no-such-cmd")
    assert launch_failure(result) == "executor: executor-no-such-cmd: command not found"


@pytest.mark.parametrize("profile", ["danger-full-access", "read-only"])
def test_a_missing_program_path_is_named(ws: Path, profile: str) -> None:
    """A path that does not exist, unsandboxed or not (a launcher's exec failure)."""
    skip_unless(
        profile != "read-only" or linux_sandbox_available(),
        "Landlock, seccomp and namespaces are needed",
    )
    missing = str(ws / "missing" / "prog")
    result = executor("run", "--profile", profile, "--", missing)
    assert launch_failure(result) == f"executor: {missing}: No such file or directory"


@pytest.mark.parametrize("option", ["--cwd", "--workspace"])
def test_a_missing_directory_names_its_option(ws: Path, option: str) -> None:
    """`--cwd` and `--workspace` that do not exist, or are files, say which option."""
    missing = str(ws / "missing")
    result = executor("run", "--profile", "danger-full-access", option, missing, "--", "true")
    assert launch_failure(result) == f"executor: {option} {missing}: No such file or directory"
    (ws / "file").write_text("")
    result = executor(
        "run", "--profile", "danger-full-access", option, str(ws / "file"), "--", "true"
    )
    assert launch_failure(result) == f"executor: {option} {ws / 'file'}: Not a directory"


@pytest.mark.enforcement
def test_a_program_the_profile_cannot_read_is_named_with_the_profile(
    ws: Path, tmp_path: Path
) -> None:
    """A profile without :root or :minimal cannot execute /bin/true: the line names the
    program, the failure, and the profile to look at; one granting :minimal runs it."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    (tmp_path / "noroot.toml").write_text('[filesystem]\n":workspace_roots" = "write"\n')
    (tmp_path / "minimal.toml").write_text(
        '[filesystem]\n":minimal" = "read"\n":workspace_roots" = "write"\n'
    )
    env = {"EXECUTOR_PROFILES_DIR": str(tmp_path)}
    true = shutil.which("true")
    assert true is not None
    script = f"{true} && echo ran > {ws}/ran"
    denied = executor(
        "run", "--profile", "noroot", "--workspace", str(ws), "--", "/bin/sh", "-c", script, env=env
    )
    assert launch_failure(denied) == (
        "executor: /bin/sh: cannot execute: Permission denied (it exists outside the sandbox: "
        "profile noroot may not allow it; see `executor profile explain noroot`)"
    )
    assert not (ws / "ran").exists()
    allowed = executor(
        "run",
        "--profile",
        "minimal",
        "--workspace",
        str(ws),
        "--",
        "/bin/sh",
        "-c",
        script,
        env=env,
    )
    assert allowed.returncode == 0, allowed.stderr
    assert (ws / "ran").read_text() == "ran\n"


@pytest.mark.enforcement
def test_the_denial_line_is_a_heuristic_and_names_its_evidence(ws: Path) -> None:
    """A command that printed "Permission denied" and then failed for its own reason is
    blamed "probably", with the exit code and the words as it printed them; a failure
    without such words is not blamed at all."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    script = "echo 'cat: x: PERMISSION denied'; exit 7"
    result = executor(
        "run", "--profile", "workspace", "--workspace", str(ws), "--", "sh", "-c", script
    )
    assert result.returncode == 7
    assert result.stderr.splitlines() == [
        "executor: the sandbox probably denied something "
        '(heuristic: exit 7 and "PERMISSION denied" in the output)'
    ]
    quiet = executor(
        "run", "--profile", "workspace", "--workspace", str(ws), "--", "sh", "-c", "exit 7"
    )
    assert quiet.returncode == 7 and quiet.stderr == ""


def test_backends_profile_refused_exits_1_and_says_why() -> None:
    """Without namespaces `workspace` cannot be enforced: no backend is marked, the reason
    is printed (and in JSON), exit 1; `read-only` still gets the Linux backend."""
    env = {"EXECUTOR_LINUX_NAMESPACES": "off"}
    refused = executor("backends", "--profile", "workspace", env=env)
    assert refused.returncode == 1
    assert not any(line.startswith("* ") for line in refused.stdout.splitlines())
    last = refused.stdout.splitlines()[-1]
    assert last.startswith("profile workspace: REFUSED — ") and "carve-out" in last
    document = json.loads(executor("backends", "--profile", "workspace", "--json", env=env).stdout)
    assert document["profile"] == "workspace" and document["selected"] is None
    assert "carve-out" in document["reason"]
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    chosen = executor("backends", "--profile", "read-only", env=env)
    assert chosen.returncode == 0
    assert [line.split()[1] for line in chosen.stdout.splitlines() if line[:2] == "* "] == ["linux"]
    assert chosen.stdout.splitlines()[-1] == "*: selected for profile read-only"


def test_backends_profile_without_sandbox_marks_none() -> None:
    """A disabled profile uses no backend, and that is not a refusal."""
    result = executor("backends", "--profile", "danger-full-access")
    assert result.returncode == 0
    assert not any(line.startswith("* ") for line in result.stdout.splitlines())
    assert result.stdout.splitlines()[-1] == (
        "profile danger-full-access: no sandbox (type disabled): no backend is used"
    )
