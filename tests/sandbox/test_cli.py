"""The policy-author and operator commands, run as a user would run them."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from itertools import takewhile
from pathlib import Path

import pytest

from tests.executor_linux.conftest import linux_sandbox_available
from tests.support.daemon import executor_command
from tests.support.enforcement import skip_unless


def executor(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the console script."""
    return subprocess.run(
        [*executor_command(), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=60,
        check=False,
    )


@pytest.fixture
def ws() -> Iterator[Path]:
    """A workspace outside /tmp."""
    path = Path(tempfile.mkdtemp(prefix="executor-cli-", dir="/var/tmp")).resolve()
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def test_every_command_has_help() -> None:
    """`--help` works for the CLI and each command."""
    for args in (
        [],
        ["serve"],
        ["run"],
        ["profile"],
        ["profile", "list"],
        ["profile", "check"],
        ["profile", "explain"],
        ["profile", "schema"],
        ["backends"],
        ["doctor"],
    ):
        result = executor(*args, "--help")
        assert result.returncode == 0, args
        assert "usage: executor" in result.stdout
    for args in (["profile", "list"], ["profile", "check"], ["profile", "explain"], ["doctor"]):
        assert "Exit status:" in executor(*args, "--help").stdout, args


def test_profile_list_shows_names_sources_and_descriptions() -> None:
    """Every shipped profile, one per line, with its source and description."""
    result = executor("profile", "list", env={"EXECUTOR_PROFILES_DIR": ""})
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["danger-full-access", "shipped"],
        ["read-only", "shipped"],
        ["workspace", "shipped"],
        ["workspace-network", "shipped"],
        ["workspace-proxy", "shipped"],
    ]
    assert "no network" in lines[1]


def test_profile_check_accepts_good_and_names_bad_files(tmp_path: Path) -> None:
    """`check` says ok, or exits 2 with the file and the key at fault."""
    good = tmp_path / "site.toml"
    good.write_text('extends = "workspace"\n[filesystem]\n"~/.ssh" = "deny"\n')
    result = executor("profile", "check", str(good))
    assert result.returncode == 0 and "ok" in result.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('[filesystem]\n"/srv/**" = "write"\n')
    result = executor("profile", "check", str(bad))
    assert result.returncode == 2
    assert f'{bad}: filesystem."/srv/**": globs only support deny access' in result.stderr
    assert result.stdout == ""


def test_profile_check_lists_every_problem(tmp_path: Path) -> None:
    """Each problem on its own line with the file and the key, the compiler's and the
    schema's; a disabled profile's ignored tables are still checked by the schema."""
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'colour = "red"\ntype = "disabled"\n[filesystem]\n":root" = "all"\n'
        '[network]\nenabled = "yes"\n[limits]\nmemory = "lots"\n'
    )
    result = executor("profile", "check", str(bad))
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert [line.split(": ")[1] for line in lines[:-1]] == [
        "colour",
        "limits.memory",
        "limits",
        'filesystem.":root"',
        "network.enabled",
    ]
    assert all(line.startswith(f"{bad}: ") for line in lines)
    assert lines[-1] == f"{bad}: 5 problem(s)"


@pytest.mark.enforcement
def test_profile_explain_prints_rules_and_enforcement(ws: Path) -> None:
    """`explain` lists each path with its access and why, and who enforces it here."""
    result = executor("profile", "explain", "workspace", "--workspace", str(ws))
    assert result.returncode == 0
    out = result.stdout
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line[:3] == "  /"}
    assert rows[str(ws)] == ["write", "entry"]
    assert rows[f"{ws}/.codex"] == ["read", "protected-name", "(does", "not", "exist", "yet)"]
    assert "network: restricted" in out
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    assert "enforcement: linux backend, sandboxType linuxSeccomp" in out.splitlines()
    assert "REFUSED" not in out


def test_profile_explain_says_what_path_rules_cannot_see(ws: Path, tmp_path: Path) -> None:
    """With deny rules or globs, one note names hard links and deep glob matches; without
    them (the shipped `workspace`), no such note."""
    library = tmp_path / "profiles"
    library.mkdir()
    (library / "site.toml").write_text(
        'extends = "workspace"\nglob_scan_max_depth = 3\n[filesystem]\n"~/.ssh" = "deny"\n'
        '[filesystem.":workspace_roots"]\n"**/*.env" = "deny"\n'
    )
    (library / "plain-deny.toml").write_text(
        'extends = "workspace"\n[filesystem]\n"~/.ssh" = "deny"\n'
    )
    env = {"EXECUTOR_PROFILES_DIR": str(library)}

    def limits(profile: str) -> list[str]:
        """The bullets under explain's "what deny rules cannot hide" heading."""
        out = executor("profile", "explain", profile, "--workspace", str(ws), env=env).stdout
        lines = out.splitlines()
        start = [n for n, line in enumerate(lines) if line.startswith("what deny rules")]
        if not start:
            return []
        assert 'docs/sandbox.md, "What path rules cannot see"' in lines[start[0]]
        bullets = takewhile(lambda line: line.startswith("  - "), lines[start[0] + 1 :])
        return [line.removeprefix("  - ") for line in bullets]

    site = limits("site")
    assert [line.split(":")[0] for line in site] == [
        "hard links",
        "globs are expanded at launch",
        "glob scan depth",
        "glob scan caps",
        "the daemon's sandboxed fs/* calls also check files by identity and refuse such files; "
        "commands (process/start, executor run) have only the path rules.",
    ]
    assert "before the command started" in site[0]
    assert "deeper than 3 directory levels" in site[2] and "32 levels" not in site[3]
    plain = limits("plain-deny")
    assert plain[0].startswith("hard links") and not any("glob" in line for line in plain)
    assert limits("workspace") == []


def test_run_passes_the_exit_code_through(ws: Path) -> None:
    """`run` exits with the command's own code; output goes to our stdout."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    result = executor(
        "run",
        "--profile",
        "workspace",
        "--workspace",
        str(ws),
        "--",
        "sh",
        "-c",
        "echo hi > f; cat f; exit 3",
    )
    assert result.returncode == 3
    assert result.stdout == "hi\n"
    assert (ws / "f").read_text() == "hi\n"


def test_run_reports_a_denial_in_one_line(ws: Path) -> None:
    """When the sandbox denied something, one stderr line says so."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    result = executor(
        "run", "--profile", "read-only", "--workspace", str(ws), "--", "touch", str(ws / "x")
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "executor: the sandbox probably denied something "
        '(heuristic: exit 1 and "Read-only file system" in the output)'
    )
    assert not (ws / "x").exists()


def test_run_verbose_shows_the_layers(ws: Path) -> None:
    """`--verbose` prints what is enforced before running."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    result = executor("run", "-v", "--profile", "read-only", "--", "true")
    assert result.returncode == 0
    assert "executor: profile read-only: backend linux, sandbox linuxSeccomp: " in result.stderr
    assert "landlock(abi" in result.stderr and "seccomp(network-off)" in result.stderr


def test_run_network_override(ws: Path) -> None:
    """`--network on` lifts the network block of a profile."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    probe = "import socket; socket.socket().close(); print('socket ok')"
    assert (
        executor(
            "run", "--profile", "read-only", "--network", "on", "--", "python3", "-c", probe
        ).stdout
        == "socket ok\n"
    )
    assert executor("run", "--profile", "read-only", "--", "python3", "-c", probe).returncode == 1


def test_run_refuses_what_cannot_be_enforced(ws: Path) -> None:
    """Without namespaces a workspace cannot be enforced: refused (125), nothing ran."""
    result = executor(
        "run",
        "--profile",
        "workspace",
        "--workspace",
        str(ws),
        "--",
        "touch",
        str(ws / "ran"),
        env={"EXECUTOR_LINUX_NAMESPACES": "off"},
    )
    assert result.returncode == 125
    assert "sandbox intent cannot be enforced on this executor" in result.stderr
    assert not (ws / "ran").exists()


def test_doctor_passes_here_and_fails_when_a_profile_is_unenforceable(ws: Path) -> None:
    """`doctor` exits 0 when every shipped profile is enforced, 1 otherwise."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    healthy = executor("doctor", "--workspace", str(ws))
    assert healthy.returncode == 0, healthy.stdout
    assert "linux.landlock_abi:" in healthy.stdout
    degraded = executor("doctor", "--workspace", str(ws), env={"EXECUTOR_LINUX_NAMESPACES": "off"})
    assert degraded.returncode == 1
    assert "profile workspace: NOT ENFORCEABLE" in degraded.stdout
    assert "profile read-only: enforced by linux" in degraded.stdout


def test_unknown_profile_is_a_clear_error() -> None:
    """A misspelled profile name lists the known ones."""
    result = executor("run", "--profile", "workspce", "--", "true")
    assert result.returncode == 2
    assert "unknown profile 'workspce'" in result.stderr and "workspace" in result.stderr


def test_profile_explain_lists_pinned_paths(tmp_path: Path) -> None:
    """A workspace inside writable /tmp: it and the directories up to /tmp are pinned."""
    ws = tmp_path.resolve() / "box" / "ws"
    ws.mkdir(parents=True)
    out = executor("profile", "explain", "workspace", "--workspace", str(ws)).stdout
    pinned = [line.split(": ", 1)[1] for line in out.splitlines() if "pinned (" in line]
    assert str(ws) in pinned and str(ws.parent) in pinned
    assert "/tmp" not in pinned  # its parent, /, is read-only: it cannot be moved anyway
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines() if line[:3] == "  /"}
    assert rows[f"{ws.parent}/.git"] == "read"  # protected names at every pinned level
