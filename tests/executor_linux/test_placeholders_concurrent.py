"""Placeholders under concurrent launches from several processes.

Every executor process of the user shares the placeholder registry (``lock_directory()``).
Two worker processes (``placeholder_launches.py``) launch sandboxed commands under the
``workspace`` profile at once, in one workspace whose protected names (``.git``,
``.codex``) do not exist, so every launch needs placeholders that the other process is
creating, using and removing at the same moment: each worker removes what it no longer
uses after every launch, so removals race the other's launches all the time. Every launch
must start (a placeholder removed under it fails it: ``mounts: ENOENT``) and find the names
protected (one removed while its command runs lifts the mount: the name could be created).

With the registry broken (another process's hold ignored, or no holds taken at all), 5 to
22 of 40 launches failed in each of 16 runs, 8 per launcher; intact, none in 11 runs.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.executor_linux.conftest import linux_sandbox_available
from tests.support.enforcement import skip_unless

pytestmark = pytest.mark.enforcement

WORKER = Path(__file__).with_name("placeholder_launches.py")
WORKERS = 2
LAUNCHES = 20  # per worker


def _ready(worker: subprocess.Popen[str], deadline: float) -> None:
    assert worker.stdout is not None
    readable, _, _ = select.select([worker.stdout], [], [], max(0.0, deadline - time.monotonic()))
    line = worker.stdout.readline() if readable else ""
    assert line == "ready\n", f"the worker did not get ready: {line!r}"


def test_launches_from_two_processes_share_placeholders_safely(tmp_path: Path) -> None:
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    argv = [sys.executable, str(WORKER), str(workspace), str(LAUNCHES)]
    workers = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(WORKERS)
    ]
    try:
        deadline = time.monotonic() + 30
        for worker in workers:
            _ready(worker, deadline)
        for worker in workers:  # both set up (imports, probes): go at once
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        outputs = [worker.communicate(timeout=60)[0] for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    assert [worker.returncode for worker in workers] == [0] * WORKERS, outputs
    failures = [line for output in outputs for line in json.loads(output.splitlines()[-1])]
    assert not failures, f"{len(failures)} of {WORKERS * LAUNCHES} launches: {failures}"
    assert list(workspace.iterdir()) == [], "the last user removed every placeholder"
