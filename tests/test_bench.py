"""`bench/` stays runnable with one command: every case runs and yields every metric.

The numbers are not judged here (speed is for the benchmark, not for tests); what is checked
is that no case has rotted: each declared metric comes back, positive, from a real run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.harness import our_command
from bench.run import discover

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run_bench(*args: str, tmp_path: Path) -> tuple[dict[str, dict[str, list[float]]], str]:
    out = tmp_path / "samples.json"
    result = subprocess.run(
        [sys.executable, "bench/run.py", "--trials", "1", "--json", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert " failed:" not in result.stderr, result.stderr
    samples: dict[str, dict[str, list[float]]] = json.loads(out.read_text())
    return samples, result.stdout


def test_every_case_yields_every_metric(tmp_path: Path) -> None:
    samples, table = run_bench(tmp_path=tmp_path)
    for case in discover([]):
        for metric in case.metrics:
            if metric.name.endswith(".wrapper"):
                continue  # the reference's node wrapper: only the reference has one
            values = samples.get(metric.name, {}).get("ours")
            assert values, f"{case.name} produced no {metric.name}"
            assert all(value > 0 for value in values), (metric.name, values)
            assert metric.name in table


def test_a_reference_is_measured_side_by_side(tmp_path: Path) -> None:
    """Our own daemon stands in for the reference, to exercise the comparison path."""
    samples, table = run_bench(
        "--only", "rpc.status", "--reference", our_command(), tmp_path=tmp_path
    )
    assert samples["rpc.status"]["ours"] and samples["rpc.status"]["reference"]
    row = next(line for line in table.splitlines() if line.startswith("rpc.status"))
    ratio = float(row.split()[4])  # ours/ref of two equal daemons
    assert 0.2 < ratio < 5
