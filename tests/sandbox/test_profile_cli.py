"""Profiles as policy authors meet them on the command line: shadowing, broken files, paths,
refusals, and the ``--json`` documents scripts read (keys: docs/profiles.md)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from shutil import rmtree
from typing import Any

import pytest

from tests.executor_linux.conftest import linux_sandbox_available
from tests.sandbox.test_cli import executor
from tests.support.enforcement import skip_unless

SHIPPED = ["danger-full-access", "read-only", "workspace", "workspace-network", "workspace-proxy"]
PROFILE_KEYS = {
    "name",
    "description",
    "source",
    "path",
    "shipped",
    "replaces_shipped",
    "type",
    "network",
    "network_mode",
}


@pytest.fixture
def ws() -> Iterator[Path]:
    """A workspace outside /tmp."""
    path = Path(tempfile.mkdtemp(prefix="executor-cli-", dir="/var/tmp")).resolve()
    yield path
    rmtree(path, ignore_errors=True)


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """An empty ``EXECUTOR_PROFILES_DIR``."""
    path = tmp_path / "profiles"
    path.mkdir()
    return path


def as_json(*args: str, env: dict[str, str] | None = None) -> tuple[int, Any]:
    """Run a command with ``--json``; its exit status and its parsed stdout."""
    result = executor(*args, "--json", env=env)
    return result.returncode, json.loads(result.stdout)


def test_a_stray_file_cannot_turn_read_only_into_no_sandbox(ws: Path, library: Path) -> None:
    """A read-only.toml in EXECUTOR_PROFILES_DIR that disables the sandbox is refused, naming
    both files; nothing runs. `replaces_shipped = true` makes it the profile, shown as such."""
    stray = library / "read-only.toml"
    stray.write_text('description = "mine"\ntype = "disabled"\n')
    env = {"EXECUTOR_PROFILES_DIR": str(library)}
    result = executor("run", "--profile", "read-only", "--", "touch", str(ws / "x"), env=env)
    assert result.returncode == 2
    assert str(stray) in result.stderr and "sandbox_profiles/read-only.toml" in result.stderr
    assert "replaces_shipped = true" in result.stderr
    assert not (ws / "x").exists()
    listed = executor("profile", "list", env=env)
    assert listed.returncode == 1
    # Only danger-full-access is left: the shipped workspace profiles extend read-only.
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["danger-full-access"]
    assert f"executor: profile read-only not loaded: {stray}: has the name of" in listed.stderr

    stray.write_text(
        'description = "mine"\nreplaces_shipped = true\n[filesystem]\n":root" = "read"'
    )
    status, found = as_json("profile", "list", env=env)
    assert status == 0 and found["errors"] == []
    rows = {row["name"]: row for row in found["profiles"]}
    assert rows["read-only"]["source"] == str(stray) and rows["read-only"]["replaces_shipped"]
    assert rows["workspace"]["source"] == "shipped" and rows["workspace"]["shipped"]


def test_a_broken_file_is_named_and_the_rest_listed(ws: Path, library: Path) -> None:
    """`profile list` and `doctor` report the broken file and key on stderr, list every other
    profile, and exit 1; their JSON carries the same."""
    (library / "broken.toml").write_text('[network]\nenabled = "yes"\n')
    (library / "fine.toml").write_text('description = "fine"\nextends = "read-only"\n')
    env = {"EXECUTOR_PROFILES_DIR": str(library)}
    listed = executor("profile", "list", env=env)
    assert listed.returncode == 1
    names = [line.split()[0] for line in listed.stdout.splitlines()]
    assert names == sorted([*SHIPPED, "fine"])
    assert f"{library / 'broken.toml'}: network.enabled: must be true or false" in listed.stderr

    status, found = as_json("profile", "list", env=env)
    assert status == 1
    assert [row["name"] for row in found["profiles"]] == names
    assert all(set(row) == PROFILE_KEYS for row in found["profiles"])
    assert found["errors"] == [
        {
            "name": "broken",
            "path": str(library / "broken.toml"),
            "problems": [
                {
                    "file": str(library / "broken.toml"),
                    "key": "network.enabled",
                    "message": "must be true or false",
                }
            ],
        }
    ]

    doctor = executor("doctor", "--workspace", str(ws), env=env)
    assert doctor.returncode == 1
    assert "profile broken: INVALID" in doctor.stdout and "profile fine: " in doctor.stdout
    assert "network.enabled: must be true or false" in doctor.stderr
    status, report = as_json("doctor", "--workspace", str(ws), env=env)
    assert status == 1 and report["ok"] is False
    assert set(report) == {
        "ok",
        "host",
        "launcher",
        "backends",
        "broken_plugins",
        "default_limits",
        "workspace",
        "profiles",
    }
    rows = {row["name"]: row for row in report["profiles"]}
    assert sorted(rows) == sorted([*SHIPPED, "broken", "fine"])
    assert all(
        set(row) == {"name", "source", "status", "backend", "layers", "reason", "problems"}
        for row in rows.values()
    )
    assert rows["broken"]["status"] == "invalid"
    assert rows["broken"]["problems"][0]["key"] == "network.enabled"
    assert rows["danger-full-access"]["status"] == "unsandboxed"
    assert report["broken_plugins"] == []
    assert rows["fine"]["source"] == str(library / "fine.toml")
    assert report["default_limits"]["processes"] == 2048


def test_explain_takes_a_path_and_exits_1_when_this_host_refuses(ws: Path, tmp_path: Path) -> None:
    """A .toml path works like a name (its extends resolve against the library); a profile
    this host cannot enforce is explained, with the reason, and exits 1."""
    site = tmp_path / "site.toml"
    site.write_text('extends = "workspace"\n[filesystem]\n"~/.ssh" = "deny"\n')
    off = {"EXECUTOR_LINUX_NAMESPACES": "off"}
    result = executor("profile", "explain", str(site), "--workspace", str(ws), env=off)
    assert result.returncode == 1
    assert result.stdout.splitlines()[0] == f"profile site ({site})"
    refused = result.stdout.splitlines()[-1]
    assert refused.startswith("enforcement: REFUSED") and "cannot enforce" in refused
    status, report = as_json("profile", "explain", str(site), "--workspace", str(ws), env=off)
    assert status == 1
    assert report["enforcement"]["enforceable"] is False and report["enforcement"]["reason"]

    broken = tmp_path / "broken.toml"
    broken.write_text("colour = 1\n")
    result = executor("profile", "explain", str(broken))
    assert result.returncode == 2 and f"{broken}: colour: unknown key" in result.stderr

    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    status, report = as_json("profile", "explain", str(site), "--workspace", str(ws))
    assert status == 0
    assert report["enforcement"]["enforceable"] is True
    assert report["enforcement"]["backend"] == "linux"


def test_explain_json_keys(ws: Path) -> None:
    """The explain document: the profile, the rules, the masking limits, the enforcement."""
    _, report = as_json("profile", "explain", "workspace", "--workspace", str(ws))
    assert set(report) == {
        "profile",
        "sandbox",
        "policy_cwd",
        "network",
        "network_policy",
        "limits",
        "limits_summary",
        "filesystem",
        "notes",
        "masking_limits",
        "needs",
        "enforcement",
    }
    assert set(report["profile"]) == PROFILE_KEYS and report["sandbox"] is True
    assert report["policy_cwd"] == str(ws) and report["network"] == "restricted"
    assert report["network_policy"] == {
        "mode": "none",
        "allow": [],
        "deny": [],
        "local_ports": [],
        "local_binding": True,
    }
    assert set(report["limits"]) == {"processes", "memory", "open_files", "file_size", "cpu_time"}
    assert report["limits"]["cpu_time"] is None
    fs = report["filesystem"]
    assert set(fs) == {"restricted", "rules", "deny_globs", "pinned"}
    rows = {rule["path"]: rule for rule in fs["rules"]}
    assert rows[str(ws)] == {"path": str(ws), "access": "write", "origin": "entry", "exists": True}
    assert rows[f"{ws}/.codex"]["exists"] is False
    assert fs["pinned"] == [] and report["masking_limits"] == []  # /var/tmp is read-only
    assert set(report["enforcement"]) == {
        "enforceable",
        "backend",
        "sandbox_type",
        "layers",
        "reason",
    }
    status, report = as_json("profile", "explain", "danger-full-access")
    assert status == 0
    assert report["sandbox"] is False and report["enforcement"]["sandbox_type"] == "none"


def test_backends_json() -> None:
    """Each backend with the same keys; `selected` names the one marked selected."""
    status, found = as_json("backends")
    assert status == 0
    assert set(found) == {
        "plugins",
        "blocked",
        "profile",
        "selected",
        "reason",
        "backends",
        "broken",
    }
    assert found["profile"] is None and found["reason"] is None and found["broken"] == []
    assert "linux" in found["plugins"]
    keys = {"name", "module", "selected", "available", "reason", "features", "missing", "details"}
    assert all(set(row) == keys for row in found["backends"])
    selected = [row["name"] for row in found["backends"] if row["selected"]]
    assert selected == ([found["selected"]] if found["selected"] else [])
    _, blocked = as_json("backends", env={"EXECUTOR_BLOCK_PLUGINS": "macos"})
    assert blocked["blocked"] == ["macos"] and "macos" not in blocked["plugins"]


@pytest.mark.enforcement
def test_run_takes_a_profile_file_and_enforces_it(ws: Path, tmp_path: Path) -> None:
    """`run --profile PATH`, as `backends` and `explain` take it: a policy author tries a
    file before installing it. Its rules hold (the workspace is read-only here, so a write
    fails) and what they allow works; a path that is not there is named (exit 2)."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    (ws / "notes").write_text("readable\n")
    draft = tmp_path / "drafts" / "look-only.toml"
    draft.parent.mkdir()
    draft.write_text('extends = "read-only"\ndescription = "look, do not touch"\n')
    write = executor(
        "run", "--profile", str(draft), "--workspace", str(ws), "--",
        "sh", "-c", "cat notes; echo x > written",
    )  # fmt: skip
    assert write.returncode != 0, write
    assert write.stdout == "readable\n"
    assert not (ws / "written").exists()
    relative = executor(
        "run", "--profile", "drafts/look-only.toml", "--", "/bin/echo", "ran", cwd=tmp_path
    )
    assert (relative.returncode, relative.stdout) == (0, "ran\n"), relative
    missing = executor("run", "--profile", "drafts/none.toml", "--", "/bin/true", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr == "executor: profile file drafts/none.toml does not exist\n"
