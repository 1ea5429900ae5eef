"""The systemd user unit in docs/operating.md, installed as the page says (a home whose
``~/.local/bin/executor`` links to this environment's console script), passes
``systemd-analyze --user verify`` without a warning about it. Skipped where systemd's tools
are absent: this checks a document, it enforces nothing."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.daemon import executor_command

OPERATING = Path(__file__).resolve().parents[1] / "docs" / "operating.md"


def documented_unit() -> str:
    """The ini block of docs/operating.md's "Running it as a service" section."""
    text = OPERATING.read_text()
    section = text.split("## Running it as a service\n", 1)[1].split("\n## ", 1)[0]
    [unit] = re.findall(r"```ini\n(.*?)```", section, flags=re.DOTALL)
    return str(unit)


def test_the_unit_says_what_the_page_promises() -> None:
    """One command line from the config file, reload by SIGHUP, paths through %h only."""
    unit = documented_unit()
    assert (
        "ExecStart=%h/.local/bin/executor serve --config %h/.config/executor/serve.toml\n"
    ) in unit
    assert "ExecReload=/bin/kill -HUP $MAINPID\n" in unit
    assert "WantedBy=default.target" in unit
    assert "~" not in unit


def test_the_documented_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    [executor] = executor_command()[:1]
    if not Path(executor).is_file():
        pytest.skip("no console script to link to (the package is not installed)")
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "executor").symlink_to(executor)
    units = home / ".config" / "systemd" / "user"
    units.mkdir(parents=True)
    unit = units / "executor.service"
    unit.write_text(documented_unit())
    runtime = tmp_path / "runtime"  # a user manager of its own, whoever runs the tests
    runtime.mkdir(mode=0o700)
    env = {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}
    result = subprocess.run(
        [analyze, "--user", "verify", str(unit)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    if "Failed to initialize manager" in result.stderr:
        pytest.skip(f"systemd-analyze cannot run a user manager here: {result.stderr.strip()}")
    # verify only warns about unknown keys or bad values (exit status 0): none may name ours.
    ours = [line for line in result.stderr.splitlines() if "executor.service" in line]
    assert result.returncode == 0, result.stderr
    assert ours == []

    # The check has teeth: without the link the unit fails, naming the missing program.
    (home / ".local" / "bin" / "executor").unlink()
    missing = subprocess.run(
        [analyze, "--user", "verify", str(unit)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert missing.returncode != 0
    assert f"{home}/.local/bin/executor is not executable" in missing.stderr
