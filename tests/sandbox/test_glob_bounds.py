"""Deny-glob scans are bounded, and a bound that is hit refuses the launch.

Each existing match of a deny glob becomes a deny rule. Scanning for them stops at a cap on
matches, on entries examined, on time and on depth; stopping used to enforce the matches
found so far and leave the rest readable (10,005 `*.env` files: 5 readable). Now a cap that
is hit refuses, naming the glob, the cap and what to do; a scan that stays within every cap
denies every match.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.errors import SandboxUnavailable
from executor.protocol.intent import Access, parse_sandbox
from executor.sandbox.globscan import (
    GLOB_SCAN_ENTRIES_ENV,
    GLOB_SCAN_MATCHES_ENV,
    GLOB_SCAN_SECONDS_ENV,
    MAX_GLOB_MATCHES,
    MAX_SCAN_DEPTH,
    GlobBounds,
    ScanLimits,
    Truncation,
)
from executor.sandbox.host import LocalHost
from executor.sandbox.materialize import materialize
from executor.sandbox.rules import RuleOrigin, RuleSet, glob_to_regex
from tests.executor_linux.conftest import linux_sandbox_available
from tests.sandbox.fakehost import FakeHost
from tests.sandbox.wire import context, glob, managed, special
from tests.support.daemon import executor_command
from tests.support.enforcement import skip_unless


def env_files(count: int) -> list[str]:
    """``count`` files matching ``*.env`` spread over ten directories of /ws."""
    return [f"/ws/d{i % 10}/f{i}.env" for i in range(count)]


def rules(
    host: FakeHost, pattern: str, bounds: GlobBounds, depth: int | None = None, *more: str
) -> RuleSet:
    """Materialize `:root read`, the workspace writable, and deny globs."""
    globs = [glob(each) for each in (pattern, *more)]
    sandbox = context(
        managed(special("root", "read"), special("project_roots", "write"), *globs, depth=depth),
        cwd="/ws",
        roots=("/ws",),
    )
    result = materialize(
        parse_sandbox(sandbox), host, process_cwd="/ws", child_env={}, glob_bounds=bounds
    )
    assert result is not None
    return result


def denied_by_glob(result: RuleSet) -> set[str]:
    return {rule.path for rule in result.rules if rule.origin is RuleOrigin.DENY_GLOB}


def test_the_default_caps() -> None:
    """The caps in force unless the environment says otherwise (docs/sandbox.md)."""
    assert (MAX_GLOB_MATCHES, MAX_SCAN_DEPTH) == (10_000, 32)
    assert (GlobBounds().max_entries, GlobBounds().seconds) == (250_000, 2.0)


def test_one_match_over_the_cap_refuses_and_says_what_to_do() -> None:
    host = FakeHost(files=env_files(6))
    with pytest.raises(SandboxUnavailable) as refused:
        rules(host, "**/*.env", GlobBounds(max_matches=5))
    message = refused.value.reason
    assert "deny glob /ws/**/*.env matches more than 5 paths" in message
    assert GLOB_SCAN_MATCHES_ENV in message and "narrower directory" in message


def test_matches_at_the_cap_are_all_denied() -> None:
    files = env_files(5)
    result = rules(
        FakeHost(files=[*files, "/ws/d0/keep.txt"]), "**/*.env", GlobBounds(max_matches=5)
    )
    assert denied_by_glob(result) == set(files)
    assert result.access_of("/ws/d0/keep.txt") is Access.WRITE


def test_the_entry_cap_is_shared_by_the_globs_of_one_launch() -> None:
    """10 directories and 10 files under /ws: each glob's scan examines 20 entries."""
    host = FakeHost(files=env_files(10))
    assert len(denied_by_glob(rules(host, "**/*.env", GlobBounds(max_entries=20)))) == 10
    both = rules(host, "**/*.env", GlobBounds(max_entries=40), None, "**/*.key")
    assert len(denied_by_glob(both)) == 10
    with pytest.raises(SandboxUnavailable) as refused:
        rules(host, "**/*.env", GlobBounds(max_entries=39), None, "**/*.key")
    assert (
        "for deny glob /ws/**/*.key reached the cap of 39 directory entries" in refused.value.reason
    )
    assert GLOB_SCAN_ENTRIES_ENV in refused.value.reason


def test_a_scan_past_its_deadline_refuses() -> None:
    host = FakeHost(files=env_files(3))
    with pytest.raises(SandboxUnavailable, match=f"did not finish within.*{GLOB_SCAN_SECONDS_ENV}"):
        rules(host, "**/*.env", GlobBounds(seconds=-1.0))


DEEP = "/ws/" + "/".join(f"l{i}" for i in range(MAX_SCAN_DEPTH)) + "/deep.env"


def test_a_tree_deeper_than_the_scan_refuses_a_glob_of_any_depth() -> None:
    """`**` without `glob_scan_max_depth` asks for every level; the 33rd is not scanned."""
    with pytest.raises(SandboxUnavailable) as refused:
        rules(FakeHost(files=[DEEP]), "**/*.env", GlobBounds())
    assert f"deeper than {MAX_SCAN_DEPTH} levels" in refused.value.reason
    assert "glob_scan_max_depth" in refused.value.reason
    # One level less, and the deepest match is found and denied.
    shallower = DEEP.replace("/l0/", "/", 1)
    assert denied_by_glob(rules(FakeHost(files=[shallower]), "**/*.env", GlobBounds())) == {
        shallower
    }


@pytest.mark.parametrize("depth", [3, MAX_SCAN_DEPTH])
def test_a_depth_the_profile_chose_is_not_a_cap(depth: int) -> None:
    """`glob_scan_max_depth` set: deeper matches are the profile's choice (documented)."""
    host = FakeHost(files=[DEEP, "/ws/top.env"])
    assert denied_by_glob(rules(host, "**/*.env", GlobBounds(), depth=depth)) == {"/ws/top.env"}


def test_a_glob_without_double_star_scans_only_its_own_depth() -> None:
    """`*.env` can only match one level down: a deep tree is neither scanned nor refused."""
    host = FakeHost(files=[DEEP, "/ws/top.env", *env_files(30)])
    result = rules(host, "*.env", GlobBounds(max_entries=12))  # /ws: 10 dirs, 1 file, l0
    assert denied_by_glob(result) == {"/ws/top.env"}
    result = rules(host, "*/*.env", GlobBounds())
    assert denied_by_glob(result) == set(env_files(30))


# --- the real host ------------------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """a.env, sub/b.env, sub/deeper/c.env, keep.txt, and a matching directory x.env/."""
    (tmp_path / "sub" / "deeper").mkdir(parents=True)
    (tmp_path / "x.env").mkdir()
    for name in ("a.env", "sub/b.env", "sub/deeper/c.env", "keep.txt", "x.env/inner.env"):
        (tmp_path / name).write_text("secret\n")
    return tmp_path


def scan(base: Path, **limits: Any) -> tuple[set[str], Truncation | None]:
    regex = glob_to_regex(f"{base}/**/*.env")
    result = LocalHost().glob_matches(str(base), regex, ScanLimits(**limits))
    return {os.path.relpath(path, base) for path in result.matches}, result.truncated


def test_local_host_reports_each_bound(tree: Path) -> None:
    everything = {"a.env", "x.env", "sub/b.env", "sub/deeper/c.env"}
    assert scan(tree, max_depth=3) == (everything, None)  # x.env/ is not entered
    assert scan(tree, max_depth=2)[1] is Truncation.DEPTH
    assert scan(tree, max_depth=3, max_matches=3)[1] is Truncation.MATCHES
    assert scan(tree, max_depth=3, max_matches=4) == (everything, None)
    # a.env keep.txt sub x.env, sub/b.env sub/deeper, sub/deeper/c.env: 7 entries examined
    assert scan(tree, max_depth=3, max_entries=7) == (everything, None)
    assert scan(tree, max_depth=3, max_entries=6)[1] is Truncation.ENTRIES
    assert scan(tree, max_depth=3, deadline=time.monotonic() - 1)[1] is Truncation.TIME


def test_bounds_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GLOB_SCAN_MATCHES_ENV, "20")
    monkeypatch.setenv(GLOB_SCAN_ENTRIES_ENV, "0")  # not positive: the default
    monkeypatch.setenv(GLOB_SCAN_SECONDS_ENV, "inf")  # not finite: the default
    assert GlobBounds.from_env() == GlobBounds(max_matches=20)


# --- through `executor run` ---------------------------------------------------------------


@pytest.fixture
def globby(tmp_path: Path) -> Iterator[tuple[Path, dict[str, str]]]:
    """A workspace outside /tmp, and a profile library with `globby`: workspace, `*.env` denied."""
    library = tmp_path / "profiles"
    library.mkdir()
    (library / "globby.toml").write_text(
        'extends = "workspace"\n[filesystem.":workspace_roots"]\n"**/*.env" = "deny"\n'
    )
    ws = Path(os.path.realpath("/var/tmp")) / f"executor-globs-{os.getpid()}-{tmp_path.name}"
    ws.mkdir()
    try:
        yield ws, {"EXECUTOR_PROFILES_DIR": str(library), GLOB_SCAN_MATCHES_ENV: "20"}
    finally:
        subprocess.run(["rm", "-rf", str(ws)], check=False)


#: How many of the secrets the command can read, then a file no glob matches.
COUNT_READABLE = "cat */*.env 2>/dev/null | grep -c secret; cat keep.txt"


def run(ws: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = ["run", "--profile", "globby", "--workspace", str(ws), "--", "sh", "-c"]
    return subprocess.run(
        [*executor_command(), *command, COUNT_READABLE],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )


@pytest.mark.enforcement
def test_run_refuses_over_the_cap_and_denies_every_match_at_it(
    globby: tuple[Path, dict[str, str]],
) -> None:
    """With the cap at 20: 20 `*.env` files are all unreadable inside; 21 refuse the launch."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    ws, env = globby
    (ws / "keep.txt").write_text("kept\n")
    for i in range(20):
        (ws / f"d{i % 4}").mkdir(exist_ok=True)
        (ws / f"d{i % 4}" / f"f{i}.env").write_text("secret\n")
    result = run(ws, env)
    assert (result.returncode, result.stdout) == (0, "0\nkept\n"), result.stderr
    (ws / "d0" / "one-more.env").write_text("secret\n")
    result = run(ws, env)
    assert result.returncode != 0
    assert result.stdout == ""  # nothing ran
    assert "deny glob" in result.stderr and "matches more than 20 paths" in result.stderr
