"""Without a PID namespace, a sandboxed command shares process IDs with the host: the kernel
lets a same-uid caller lower another process's rlimits (``prlimit``), renice it, move it to
other CPUs — no capability needed. The filter allows those calls on the caller alone.

The victim is the test's own ``sleep``; nothing else is targeted.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import textwrap
from collections.abc import Iterator

import pytest

from tests.executor_linux.conftest import executor_run, linux_sandbox_available
from tests.executor_linux.probe_text import ATTEMPT
from tests.support.enforcement import skip_unless

pytestmark = pytest.mark.enforcement

PROBE = (
    textwrap.dedent(
        """
    import ctypes, errno, json, os, resource, sys
    victim = int(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    """
    )
    + ATTEMPT
    + textwrap.dedent(
        """

    def setpriority(which, who, value):
        if libc.setpriority(which, who, value) != 0:
            raise OSError(ctypes.get_errno(), "setpriority")

    attempt("prlimit_victim", lambda: resource.prlimit(victim, resource.RLIMIT_NOFILE, (16, 16)))
    attempt("prlimit_read_victim", lambda: resource.prlimit(victim, resource.RLIMIT_NOFILE))
    attempt("prlimit_self", lambda: resource.prlimit(0, resource.RLIMIT_CORE, (0, 0)))
    attempt("renice_victim", lambda: setpriority(0, victim, 19))
    attempt("renice_user", lambda: setpriority(2, 0, 19))
    attempt("renice_self", lambda: setpriority(0, 0, 5))
    attempt("affinity_victim", lambda: os.sched_setaffinity(victim, {0}))
    attempt("affinity_self", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
    print(json.dumps(out))
    """
    )
)


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "60"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def test_host_processes_limits_priority_and_cpus_are_out_of_reach(
    victim: subprocess.Popen[bytes],
) -> None:
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    before = resource.prlimit(victim.pid, resource.RLIMIT_NOFILE)
    result = executor_run(
        "read-only",
        None,
        ["python3", "-I", "-c", PROBE, str(victim.pid)],
        "--no-tty",
        "-v",
        env={**os.environ, "EXECUTOR_LINUX_NAMESPACES": "off"},
    )
    assert result.returncode == 0, result.stderr
    assert "own-pid-only" in result.stderr  # the report names the mode
    report = json.loads(result.stdout)
    for escape in ("prlimit_victim", "renice_victim", "renice_user", "affinity_victim"):
        assert report[escape] == "EPERM", (escape, report)
    for allowed in ("prlimit_read_victim", "prlimit_self", "renice_self", "affinity_self"):
        assert report[allowed] == "ok", (allowed, report)
    assert resource.prlimit(victim.pid, resource.RLIMIT_NOFILE) == before
    assert os.getpriority(os.PRIO_PROCESS, victim.pid) == 0
