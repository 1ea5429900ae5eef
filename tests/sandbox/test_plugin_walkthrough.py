"""docs/sandbox.md, "Writing a backend plugin": the example plugin, built and installed exactly
as the page shows it, is discovered, selected for what it enforces and nothing else, and
really takes the network away.

The files are the page's fenced blocks whose first line is a ``# <path>`` comment; they are
written out verbatim and installed with pip into a directory of their own (as the Makefile
installs ``tests/thirdparty_backend``), which only these tests put on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.executor_linux.conftest import linux_sandbox_available
from tests.support.daemon import executor_command
from tests.support.enforcement import skip_unless

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "sandbox.md"
SECTION = "## Writing a backend plugin"
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)
NAMED = re.compile(r"# ([\w./-]+\.(?:toml|py))\n")
PROFILE = "offline"


def walkthrough_files() -> dict[str, str]:
    """Path -> text of every file the walk-through shows."""
    text = DOC.read_text()
    section = text[text.index(SECTION) :]
    end = section.find("\n## ", len(SECTION))
    section = section if end < 0 else section[:end]
    files: dict[str, str] = {}
    for block in FENCE.findall(section):
        named = NAMED.match(block)
        if named is not None:
            files[named.group(1)] = block
    return files


@dataclass(frozen=True)
class Installed:
    """The plugin installed into ``target``; the walk-through's profile in ``profiles``."""

    target: Path
    profiles: Path

    def env(self) -> dict[str, str]:
        """Our environment with the plugin importable and the profile known; nothing else
        plugin-related (the tests' own fixture plugin is left out)."""
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("EXECUTOR_BLOCK_PLUGINS", "EXECUTOR_TEST_BACKEND")
        }
        return env | {"PYTHONPATH": str(self.target), "EXECUTOR_PROFILES_DIR": str(self.profiles)}

    def executor(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run the console script with the plugin installed."""
        return subprocess.run(
            [*executor_command(), *args],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=60,
            check=False,
        )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Write the page's files and pip-install the plugin (once for this module)."""
    base = tmp_path_factory.mktemp("walkthrough")
    source, profiles, target = base / "executor-netns-backend", base / "profiles", base / "target"
    profiles.mkdir()
    for name, text in walkthrough_files().items():
        # The project's files go into the project; a profile goes where profiles are read.
        path = source / name if "/" in name or name == "pyproject.toml" else profiles / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target"]
    result = subprocess.run(
        [*pip, str(target), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    offline = "No matching distribution found for setuptools" in result.stderr
    skip_unless(not offline, "pip could not fetch setuptools to build the plugin (offline?)")
    assert result.returncode == 0, result.stderr
    return Installed(target, profiles)


def test_the_page_shows_every_file_of_the_plugin() -> None:
    """The project, the hook module, the child setup and a profile to try it with."""
    assert sorted(walkthrough_files()) == [
        "netns_backend/__init__.py",
        "netns_backend/child.py",
        "offline.toml",
        "pyproject.toml",
    ]


def marked(stdout: str) -> list[str]:
    """Names of the backends ``executor backends`` marks as selected."""
    return [line.split()[1] for line in stdout.splitlines() if re.match(r"\* \S+ ", line)]


def test_the_plugin_is_discovered_and_selected_for_its_profile(installed: Installed) -> None:
    """`backends --profile offline` lists the plugin and marks its backend, text and JSON;
    without root it is listed as unavailable, with the reason, and the Linux backend is used."""
    result = installed.executor("backends", "--profile", PROFILE)
    assert result.returncode == 0, result.stderr
    assert "netns" in result.stdout.splitlines()[0].split(": ")[1].split(", ")
    document = json.loads(installed.executor("backends", "--profile", PROFILE, "--json").stdout)
    assert "netns" in document["plugins"] and document["profile"] == PROFILE
    row = next(row for row in document["backends"] if row["name"] == "netns")
    assert row["module"] == "netns_backend"
    if os.getuid() != 0:
        assert not row["available"] and row["reason"] == "needs root (CAP_SYS_ADMIN)"
        assert "netns" not in marked(result.stdout)
        return
    assert row["available"] and row["features"] == ["network-block"]
    assert marked(result.stdout) == ["netns"] and document["selected"] == "netns"
    assert f"*: selected for profile {PROFILE}" in result.stdout.splitlines()


def test_other_profiles_stay_with_the_linux_backend(installed: Installed) -> None:
    """Its selector passes on what it cannot enforce in full: read-only needs
    write-restriction, so the built-in selector picks the Linux backend."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    result = installed.executor("backends", "--profile", "read-only")
    assert result.returncode == 0, result.stderr
    assert marked(result.stdout) == ["linux"]


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP listener of our own on loopback."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(10)
    yield server
    server.close()


@pytest.mark.enforcement
def test_run_names_the_plugin_and_the_command_has_no_network(
    installed: Installed, listener: socket.socket, tmp_path: Path
) -> None:
    """`run -v` names the backend that planned the launch; under the plugin the command runs
    (it writes a file, it sees the plan's variable) but cannot reach our listener, which the
    same command reaches with the network on."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    port = listener.getsockname()[1]
    probe = (
        "import os, socket, sys\n"
        f"open({str(tmp_path / 'ran')!r}, 'w').write(os.environ.get('NETNS_BACKEND', '-'))\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n"
        "except OSError as exc:\n"
        "    sys.exit(f'no connection: {exc.strerror}')\n"
        "print('connected')\n"
    )
    offline = installed.executor(
        "run", "-v", "--profile", PROFILE, "--", sys.executable, "-c", probe
    )
    backend = "netns" if os.getuid() == 0 else "linux"
    assert f"executor: profile {PROFILE}: backend {backend}, " in offline.stderr
    assert offline.returncode == 1 and "connected" not in offline.stdout
    assert "no connection" in offline.stderr
    assert (tmp_path / "ran").read_text() == ("1" if backend == "netns" else "-")
    # Sharing the host's loopback: the listener is a host service (loopback isolation,
    # which would refuse it, is tested in tests/test_sandbox_network.py).
    online = installed.executor(
        "run",
        "--profile",
        PROFILE,
        "--network",
        "on",
        "--shared-loopback",
        "--",
        sys.executable,
        "-c",
        probe,
    )
    assert online.returncode == 0 and online.stdout == "connected\n", online.stderr
