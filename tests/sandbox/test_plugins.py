"""Backends come from one entry-point group; a third-party one is found, selected, blocked."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from executor.sandbox.api import HostInfo
from executor.sandbox.manager import SandboxManager, blocked_from_env, get_plugin_manager
from executor.sandbox.rules import RuleSet
from tests.support.daemon import RunningDaemon, executor_command

ROOT = Path(__file__).resolve().parents[2]
TEST_PLUGINS = ROOT / "build" / "test-plugins"
# Some tests launch real sandboxed commands; on CI (`make test` installs the fixture) a
# missing fixture must fail them, not skip them: the `enforcement` mark does that.
pytestmark = [
    pytest.mark.enforcement,
    pytest.mark.skipif(
        not (TEST_PLUGINS / "executor_test_backend").is_dir(),
        reason="run `make test` (it installs the third-party backend fixture)",
    ),
]


def names() -> list[str]:
    """Names of the plugins the manager loaded."""
    return [
        name
        for name, plugin in get_plugin_manager(blocked_from_env()).list_name_plugin()
        if plugin is not None
    ]


def test_first_party_backends_register_through_the_entry_point_group() -> None:
    """linux, macos and windows are loaded the way any third-party plugin is."""
    assert {"linux", "macos", "windows"} <= set(names())


def test_the_third_party_backend_is_discovered() -> None:
    """The fixture package installed with pip is found through its entry point."""
    assert "testbackend" in names()


def test_third_party_backend_is_selected_when_active(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its tryfirst selection hook wins over the built-in selector."""
    monkeypatch.setenv("EXECUTOR_TEST_BACKEND", "select")
    manager = SandboxManager(get_plugin_manager(), HostInfo.current())
    backend = manager.select(RuleSet(filesystem_restricted=True))
    assert backend.name == "test-wrapper"


def test_blocked_plugins_are_not_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """EXECUTOR_BLOCK_PLUGINS keeps a plugin out entirely."""
    monkeypatch.setenv("EXECUTOR_BLOCK_PLUGINS", "testbackend, macos")
    loaded = names()
    assert "testbackend" not in loaded and "macos" not in loaded and "linux" in loaded


def run_in_daemon(env: dict[str, str], argv: list[str]) -> tuple[str, str]:
    """Run one read-only-sandboxed command through a fresh daemon; (sandboxType, stdout)."""
    daemon = RunningDaemon(env=env)
    try:
        with daemon.connect() as client:
            process = client.start(
                argv, sandbox="read-only", cwd="/tmp", env={"PATH": "/usr/bin:/bin"}
            )
            return process.sandbox_type, process.collect().stdout.decode()
    finally:
        daemon.stop()


def test_selected_third_party_backend_plans_real_launches() -> None:
    """Over the wire: the wrapper planned the launch (marker) and it is still sandboxed."""
    kind, out = run_in_daemon(
        {"EXECUTOR_TEST_BACKEND": "select"},
        ["/bin/sh", "-c", "echo $EXECUTOR_TEST_BACKEND_PLANNED; touch /tmp/x-$$ || echo denied"],
    )
    assert kind == "linuxSeccomp"
    assert out.split() == ["1", "denied"]


def test_blocked_third_party_backend_is_not_used() -> None:
    """Blocked by name, the wrapper never plans anything; the Linux backend does."""
    env = {"EXECUTOR_TEST_BACKEND": "select", "EXECUTOR_BLOCK_PLUGINS": "testbackend"}
    kind, out = run_in_daemon(env, ["/bin/sh", "-c", "echo marker=$EXECUTOR_TEST_BACKEND_PLANNED"])
    assert kind == "linuxSeccomp"
    assert out.strip() == "marker="


def test_executor_backends_lists_every_plugin() -> None:
    """`executor backends` shows discovered plugins and marks the selected backend."""
    env = {**os.environ, "EXECUTOR_TEST_BACKEND": "select"}
    result = subprocess.run(
        [*executor_command(), "backends"], capture_output=True, text=True, env=env, check=True
    )
    assert "testbackend" in result.stdout.splitlines()[0]
    assert any(line.startswith("* test-wrapper") for line in result.stdout.splitlines())
    assert json.dumps(result.returncode) == "0"
