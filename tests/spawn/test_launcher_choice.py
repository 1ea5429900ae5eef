"""Which launcher runs plain commands, and the daemon working the same with either.

The native launcher is the default where it was built; ``EXECUTOR_NATIVE_LAUNCHER=off`` makes
the daemon fork a Python supervisor per command instead. The whole process suite runs on the
default; here the fallback gets the essentials through a real daemon.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.spawn import spawner as spawner_module
from executor.spawn.spawner import native_launcher, native_slots, native_spec_version
from tests.support.client import WsClient, output_of
from tests.support.daemon import RunningDaemon, executor_command
from tests.support.processes import gone, pid_from_first_output


@pytest.fixture(scope="module")
def fallback() -> Iterator[RunningDaemon]:
    daemon = RunningDaemon(env={"EXECUTOR_NATIVE_LAUNCHER": "off"})
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture
def client(fallback: RunningDaemon) -> Iterator[WsClient]:
    session = fallback.session()
    try:
        yield session
    finally:
        session.close()


def test_the_fallback_is_announced_in_the_log(fallback: RunningDaemon) -> None:
    assert "the native launcher is not built or is turned off" in fallback.log()


def test_the_fallback_runs_commands_with_output_and_exit_code(client: WsClient) -> None:
    _, events = client.run("p", ["/bin/sh", "-c", "echo out; echo err >&2; exit 5"])
    assert output_of(events, "stdout") == b"out\n"
    assert output_of(events, "stderr") == b"err\n"
    assert [e["method"] for e in events][-2:] == ["process/exited", "process/closed"]
    assert events[-2]["params"]["exitCode"] == 5


def test_the_fallback_terminates_a_tree_with_a_setsid_escapee(client: WsClient) -> None:
    script = "setsid sh -c 'echo $$; exec sleep 1012' & wait"
    client.request(
        "process/start",
        {
            "processId": "tree",
            "argv": ["/bin/sh", "-c", script],
            "cwd": "file:///tmp",
            "env": {"PATH": "/usr/bin:/bin"},
            "tty": False,
        },
    )
    escapee = pid_from_first_output(client, "tree")
    assert client.request("process/terminate", {"processId": "tree"}) == {"running": True}
    assert gone(escapee)
    assert client.process_events("tree")[-1]["method"] == "process/closed"


@pytest.mark.parametrize("setting", ["", "off"])
def test_doctor_names_the_launcher_in_use(setting: str) -> None:
    result = subprocess.run(
        [*executor_command(), "doctor"],
        capture_output=True,
        text=True,
        env={"EXECUTOR_NATIVE_LAUNCHER": setting, "PATH": "/usr/bin:/bin"},
        check=False,
    )
    line = next(line for line in result.stdout.splitlines() if line.startswith("launcher:"))
    if setting == "" and native_launcher() is not None:
        assert line == (
            f"launcher: native ({native_launcher()}; keeps up to {native_slots()} idle "
            "supervisors of plain commands for reuse)"
        )
        assert native_slots() > 0
    else:
        assert line.startswith("launcher: python")


def test_a_launcher_that_cannot_run_here_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A binary from another machine (here: not even an executable format) must not fail
    every plain command: the Python launcher takes over."""
    broken = tmp_path / "executor-launcher"
    broken.write_bytes(b"\x7fELF not really\n")
    broken.chmod(0o755)
    monkeypatch.setattr(spawner_module, "_NATIVE", broken)
    assert spawner_module.native_launcher() is None
    fallback = spawner_module.Spawner()
    try:
        assert fallback.supervisor == "python"
    finally:
        fallback.close()


@pytest.mark.parametrize("setting", ["", "python"])
def test_doctor_names_the_launcher_that_applies_the_sandbox(setting: str) -> None:
    """`doctor` (text and --json) says which launcher applies the sandbox layers, as the
    daemon would choose it: the native one where it is built, unless told otherwise."""
    env = {"EXECUTOR_SANDBOX_LAUNCH": setting, "PATH": "/usr/bin:/bin"}
    text = subprocess.run(
        [*executor_command(), "doctor"], capture_output=True, text=True, env=env, check=False
    ).stdout
    report = json.loads(
        subprocess.run(
            [*executor_command(), "doctor", "--json"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        ).stdout
    )
    line = next(line for line in text.splitlines() if line.startswith("sandbox layers"))
    native = setting == "" and native_spec_version() > 0
    if native:
        assert (
            line
            == f"sandbox layers applied by: native launcher (sandbox spec {native_spec_version()})"
        )
        assert report["launcher"]["sandbox"] == "native"
        assert report["launcher"]["sandbox_spec"] == native_spec_version()
        assert report["launcher"]["kept_supervisors"] == native_slots()
    else:
        assert line.startswith("sandbox layers applied by: python launcher")
        assert report["launcher"]["sandbox"] == "python"
        assert report["launcher"]["sandbox_spec"] is None
    if sys.platform.startswith("linux") and native_launcher() is not None and setting == "":
        assert native  # built here: the default path is the native one


def test_the_python_sandbox_launcher_is_named_in_the_log(shared_daemon: RunningDaemon) -> None:
    """Asked for, the slower launcher of sandboxed commands gets a line; the default none."""
    daemon = RunningDaemon(env={"EXECUTOR_SANDBOX_LAUNCH": "python"})
    try:
        daemon.session().close()
    finally:
        daemon.stop()
    line = "sandboxed commands start through the Python launcher"
    assert f"INFO executor.daemon: {line} (EXECUTOR_SANDBOX_LAUNCH=python)" in daemon.log()
    if native_spec_version():
        assert line not in shared_daemon.log()
