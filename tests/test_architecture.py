"""The architecture's promises that import-linter cannot see (docs/architecture.md).

import-linter (``make lint``) checks which of our modules import which; these check what
importing the plugin API costs a backend, and that no module grows past one screenful of
jobs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 500


def _loaded_after(statement: str) -> set[str]:
    probe = f"import sys, json; {statement}; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(json.loads(result.stdout))


def test_the_plugin_api_loads_nothing_of_the_daemon() -> None:
    """``import executor.sandbox`` loads only the sandbox, protocol and error modules, and
    none of the daemon's machinery (asyncio, subprocess, pickle)."""
    loaded = _loaded_after("import executor.sandbox")
    ours = {name for name in loaded if name == "executor" or name.startswith("executor.")}
    allowed = ("executor.sandbox", "executor.protocol", "executor.errors")
    assert {name for name in ours if not name.startswith(allowed)} == {"executor"}
    assert "executor.sandbox" in ours  # the probe really imported it
    assert not loaded & {"asyncio", "subprocess", "pickle"}


def test_the_protocol_loads_only_itself_and_errors() -> None:
    """The wire vocabulary stands alone: a client or a fuzzer can import it by itself."""
    loaded = _loaded_after("import executor.protocol.messages, executor.protocol.fs_messages")
    ours = {name for name in loaded if name.startswith("executor.")}
    assert all(name.startswith(("executor.protocol", "executor.errors")) for name in ours)
    assert not loaded & {"asyncio", "subprocess", "pickle"}


def test_no_module_is_over_500_lines() -> None:
    """A module past 500 lines has more than one job; split it by job."""
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for package in ("executor", "plugins")
        for path in (ROOT / package).rglob("*.py")
    }
    assert len(sizes) > 50  # the walk found the packages
    assert {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES} == {}
