"""Startup tells the truth, in one line: an unsafe state directory, a plugin that does not
load, a layer switch with a value nobody understands, and a host where nothing (or not
everything) can be enforced. Real daemons and real commands, through the console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.sandbox.wire import context, managed, special
from tests.support.client import RpcError, WsClient
from tests.support.daemon import RunningDaemon, executor_command
from tests.support.enforcement import skip_unless

UID = os.getuid()


def executor(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*executor_command(), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def wait_for_log(daemon: RunningDaemon, text: str, timeout: float = 10) -> str:
    """The daemon's log once it contains ``text`` (startup records come a moment late)."""
    deadline = time.monotonic() + timeout
    while text not in (log := daemon.log()):
        if time.monotonic() > deadline:
            pytest.fail(f"the daemon never logged {text!r}:\n{log}")
        time.sleep(0.05)
    return log


def sandboxed_start(client: WsClient) -> None:
    """A ``process/start`` whose sandbox needs a backend (read-only root)."""
    client.request(
        "process/start",
        {
            "processId": "p",
            "argv": ["/bin/true"],
            "cwd": "file:///",
            "env": {},
            "tty": False,
            "sandbox": context(managed(special("root", "read")), cwd="/"),
        },
    )


# --- the state directory ------------------------------------------------------------------------


def _open(path: Path) -> None:
    path.mkdir()
    path.chmod(0o777)


def _foreign(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown to another user needs root")
    path.mkdir(mode=0o700)
    os.chown(path, 65534, -1)  # nobody


def _symlink(path: Path) -> None:
    ours = path.with_name("ours")
    ours.mkdir(mode=0o700)
    path.symlink_to(ours)


def _file(path: Path) -> None:
    path.write_text("")


UNSAFE: dict[str, tuple[Callable[[Path], None], str]] = {
    "world-writable": (_open, "writable by other users (mode 0777)"),
    "foreign-owned": (_foreign, "owned by nobody (uid 65534)"),
    "symlink": (_symlink, "it is a symlink"),
    "file": (_file, "it is not a directory"),
}


@pytest.mark.parametrize("kind", list(UNSAFE))
def test_serve_refuses_an_unsafe_state_dir_in_one_line(tmp_path: Path, kind: str) -> None:
    make, why = UNSAFE[kind]
    state = tmp_path / "state"
    make(state)
    result = executor("serve", "--listen", "ws://127.0.0.1:0", "--state-dir", str(state))
    assert result.returncode == 2
    assert result.stdout == ""  # never listened
    assert result.stderr.startswith(f"executor: unsafe state directory {state}: ")
    assert why in result.stderr
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--listen", "ws://127.0.0.1:0"],
        ["run", "--profile", "read-only", "--", "/bin/true"],
        ["doctor"],
    ],
    ids=["serve", "run", "doctor"],
)
def test_a_squatted_default_state_dir_is_refused_everywhere(
    tmp_path: Path, command: list[str]
) -> None:
    """Another user got to the predictable default first (here under XDG_RUNTIME_DIR):
    the daemon, `run` and `doctor` all refuse it rather than use it."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    squatted = runtime / f"executor-{UID}"
    _open(squatted)
    (squatted / "planted").write_text("from someone else")
    env = {k: v for k, v in os.environ.items() if k != "EXECUTOR_STATE_DIR"}
    env["XDG_RUNTIME_DIR"] = str(runtime)
    result = subprocess.run(
        [*executor_command(), *command],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    assert result.returncode == 2, result
    assert f"executor: unsafe state directory {squatted}: it is writable by other users" in (
        result.stderr
    )
    assert not (squatted / "staging").exists()


def test_a_fresh_state_dir_is_created_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    daemon = RunningDaemon(["--state-dir", str(state)])
    daemon.stop()
    assert state.is_dir()
    assert state.stat().st_mode & 0o777 == 0o700


# --- what can be enforced -----------------------------------------------------------------------


def test_a_daemon_that_can_enforce_nothing_says_so_and_refuses(tmp_path: Path) -> None:
    """Every backend blocked: a warning at startup naming why, and sandboxes refused."""
    daemon = RunningDaemon(env={"EXECUTOR_BLOCK_PLUGINS": "linux,macos,windows"})
    try:
        log = wait_for_log(daemon, "no sandbox backend can enforce anything on this host")
        line = next(line for line in log.splitlines() if "no sandbox backend can" in line)
        assert " WARNING " in line
        assert "blocked plugins: linux, macos, windows" in line
        assert "executor doctor" in line
        with daemon.session() as client, pytest.raises(RpcError) as refused:
            sandboxed_start(client)
        assert refused.value.code == -32602
    finally:
        daemon.stop()


def test_a_missing_layer_is_named_at_startup() -> None:
    """Namespaces off (spelled `false`): what no backend can enforce now, and why."""
    from tests.executor_linux.conftest import linux_sandbox_available

    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    daemon = RunningDaemon(env={"EXECUTOR_LINUX_NAMESPACES": "false"})
    try:
        log = wait_for_log(daemon, "no sandbox backend here can enforce")
    finally:
        daemon.stop()
    line = next(line for line in log.splitlines() if "no sandbox backend here can" in line)
    assert " WARNING " in line
    assert "carve-out (needs a private mount namespace;" in line
    assert "disabled by EXECUTOR_LINUX_NAMESPACES=false" in line


def test_a_capable_host_logs_what_is_enforced() -> None:
    from tests.executor_linux.conftest import linux_sandbox_available

    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    daemon = RunningDaemon()
    try:
        log = wait_for_log(daemon, "sandbox backend linux enforces")
    finally:
        daemon.stop()
    line = next(line for line in log.splitlines() if "sandbox backend linux enforces" in line)
    enforced = set(line.split(" enforces ", 1)[1].strip().split(", "))
    assert {"carve-out", "missing-path-protection", "network-block"} <= enforced
    assert "WARNING executor.sandbox" not in log


def test_an_unknown_layer_switch_is_refused_not_ignored() -> None:
    """`EXECUTOR_LINUX_LANDLOCK=flase` neither keeps Landlock on nor turns it off silently:
    the backend is unavailable, saying why, and sandboxed requests are refused with it."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the Linux backend's switch")
    daemon = RunningDaemon(env={"EXECUTOR_LINUX_LANDLOCK": "flase"})
    try:
        wait_for_log(daemon, "no sandbox backend can enforce anything")
        with daemon.session() as client, pytest.raises(RpcError) as refused:
            sandboxed_start(client)
    finally:
        daemon.stop()
    understood = "EXECUTOR_LINUX_LANDLOCK='flase' is not understood"
    assert understood in refused.value.message
    assert f"ERROR executor.sandbox: sandbox backend linux is unavailable: {understood}" in (
        daemon.log()
    )
    assert "Traceback" not in daemon.log()


# --- a plugin that does not load ------------------------------------------------------------


def _plugin_site(root: Path, name: str, module: str, source: str) -> dict[str, str]:
    """A directory for PYTHONPATH holding ``module`` and a distribution that registers it
    in the executor.sandbox entry-point group as ``name`` (as an installed plugin would)."""
    root.mkdir()
    (root / f"{module}.py").write_text(source)
    info = root / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[executor.sandbox]\n{name} = {module}\n")
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path}


BROKEN = {
    "import-error": (
        "import no_such_module_anywhere\n",
        "ModuleNotFoundError: No module named 'no_such_module_anywhere'",
    ),
    "misspelled-hook": (
        "from executor.sandbox import hookimpl\n\n"
        "@hookimpl\n"
        "def executor_sandbox_backendz(host):\n"
        "    return []\n",
        "unknown hook 'executor_sandbox_backendz'",
    ),
}


@pytest.mark.parametrize(
    ("kind", "command", "status"),
    [
        ("import-error", ["serve", "--listen", "ws://127.0.0.1:0"], 1),
        ("misspelled-hook", ["serve", "--listen", "ws://127.0.0.1:0"], 1),
        ("import-error", ["run", "--profile", "read-only", "--", "/bin/true"], 125),
    ],
    ids=["serve-import-error", "serve-misspelled-hook", "run"],
)
def test_a_broken_plugin_stops_with_one_line_naming_it(
    tmp_path: Path, kind: str, command: list[str], status: int
) -> None:
    source, why = BROKEN[kind]
    env = _plugin_site(tmp_path / "site", "broken", "broken_executor_plugin", source)
    result = executor(*command, env=env)
    assert result.returncode == status, result
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(
        "executor: sandbox plugin 'broken' (broken_executor_plugin) failed to load: "
    )
    assert why in line
    assert "EXECUTOR_BLOCK_PLUGINS=broken" in line


@pytest.mark.parametrize("kind", ["import-error", "misspelled-hook"])
def test_diagnosis_reports_a_broken_plugin_and_everything_else(tmp_path: Path, kind: str) -> None:
    """`backends` and `doctor` exist to find out what is wrong: they name the broken plugin
    (stderr, and a BROKEN row), still report the backends and profiles that work, exit 1."""
    source, why = BROKEN[kind]
    env = _plugin_site(tmp_path / "site", "broken", "broken_executor_plugin", source)
    for command in (["backends"], ["doctor"]):
        result = executor(*command, env=env)
        assert result.returncode == 1, result
        [line] = result.stderr.splitlines()
        assert line.startswith("executor: sandbox plugin 'broken' (broken_executor_plugin)")
        assert why in line
        assert "BROKEN" in result.stdout
    listed = json.loads(executor("backends", "--json", env=env).stdout)
    assert [row["name"] for row in listed["broken"]] == ["broken"]
    assert why in listed["broken"][0]["error"]
    assert "linux" in listed["plugins"]
    assert any(row["name"] == "linux" and row["available"] for row in listed["backends"])
    report = json.loads(executor("doctor", "--json", env=env).stdout)
    assert report["ok"] is False
    assert [row["module"] for row in report["broken_plugins"]] == ["broken_executor_plugin"]
    workspace = {row["name"]: row["status"] for row in report["profiles"]}["workspace"]
    assert workspace == "enforced"
    # Without the broken plugin the same report is clean: the exit status was its doing.
    clean = executor("backends", "--json")
    assert clean.returncode == 0, clean
    assert json.loads(clean.stdout)["broken"] == []


@pytest.mark.parametrize(
    ("args", "blocked"),
    [([], {"EXECUTOR_BLOCK_PLUGINS": "broken"}), (["--block-plugin", "broken"], {})],
    ids=["env", "flag"],
)
def test_a_blocked_broken_plugin_is_not_loaded(
    tmp_path: Path, args: list[str], blocked: dict[str, str]
) -> None:
    source, _ = BROKEN["import-error"]
    env = _plugin_site(tmp_path / "site", "broken", "broken_executor_plugin", source)
    daemon = RunningDaemon(args, env={**env, **blocked})
    try:
        with daemon.connect() as client:
            assert client.run(["/bin/true"]).exit_code == 0
    finally:
        daemon.stop()
    assert "failed to load" not in daemon.log()


# --- a profile directory that is not there ------------------------------------------------------


def test_a_missing_profiles_dir_is_named_not_ignored(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-profiles"
    env = {"EXECUTOR_PROFILES_DIR": f"{tmp_path}{os.pathsep}{missing}"}
    result = executor("profile", "list", env=env)
    assert result.returncode == 0
    assert "read-only" in result.stdout
    assert result.stderr == (
        f"executor: warning: EXECUTOR_PROFILES_DIR names {missing}, which is not a directory:"
        " no profiles are loaded from it\n"
    )
    daemon = RunningDaemon(env=env)
    daemon.stop()
    assert f"WARNING executor.cli: EXECUTOR_PROFILES_DIR names {missing}" in daemon.log()
