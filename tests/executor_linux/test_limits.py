"""Resource limits enforced for real: a fork bomb, a memory hog, descriptors, file size, CPU.

Each case runs ``limits_probe.py`` in the sandbox under a profile with tight ``[limits]``
(through ``executor run``) or a daemon started with ``--limit`` (over the wire), asserts the
limit stopped the forbidden thing AND its allowed counterpart worked, and is bounded three
times over: by the limit it tests, by the probe's own watchdogs, and by a timeout here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.executor_linux.conftest import (
    LAUNCH_ENV,
    UNPRIVILEGED_UID,
    as_user,
    linux_sandbox_available,
)
from tests.support.client import output_of
from tests.support.daemon import RunningDaemon, executor_command
from tests.support.enforcement import skip_unless

pytestmark = pytest.mark.enforcement

PROBE = Path(__file__).with_name("limits_probe.py")
LIMIT = 64
#: Writes only the (test-private) workspace: no placeholder in a /tmp other daemons share.
TIGHT = f"""description = "Tight limits for tests."
extends = "read-only"

[filesystem.":workspace_roots"]
"." = "write"

[limits]
processes = {LIMIT}
memory = "128MiB"
open_files = {LIMIT}
file_size = "1MiB"
cpu_time = 1
"""


def launcher_tasks(*, user_namespace: bool = False) -> int:
    """The sandbox's own processes the process limit counts: PID 1 and the probe, and the
    launcher's outer child unless the native launcher's PID 1 joined the cgroups in its place
    (``sandbox.c``: not in a user namespace, where the outer child still joins them)."""
    native = os.environ.get(LAUNCH_ENV) == "native"
    return 2 if native and not user_namespace else 3


def cgroups_usable() -> bool:
    """The daemon can create pids and memory cgroups here."""
    from executor_linux.cgroups import cgroup_support

    return {"pids", "memory"} <= set(cgroup_support().hierarchies)


@pytest.fixture(scope="module")
def sandbox(sandbox_launch: str) -> None:
    """Real enforcement: on CI a missing layer fails instead of skipping."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")


@pytest.fixture(scope="module")
def cgroups(sandbox: None) -> None:
    """The cgroup mechanism is available (root, or a delegated cgroup)."""
    skip_unless(cgroups_usable(), "pids and memory cgroups the daemon can create are needed")


@dataclass
class Stage:
    """A world-readable directory (the probe must be readable from the sandbox even when
    the checkout is private): the probe, a profile directory, a workspace, a state dir."""

    root: Path
    owner: int

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def probe(self) -> str:
        return str(self.root / "limits_probe.py")

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "EXECUTOR_STATE_DIR": str(self.root / "state"),
            "EXECUTOR_PROFILES_DIR": str(self.root / "profiles"),
            **extra,
        }


def make_stage(owner: int | None = None) -> Stage:
    """The stage, owned by ``owner`` where the daemon runs as that user."""
    root = Path(tempfile.mkdtemp(prefix="executor-limits-", dir="/var/tmp")).resolve()
    os.chmod(root, 0o755)
    shutil.copy(PROBE, root / "limits_probe.py")
    (root / "profiles").mkdir()
    (root / "profiles" / "tight.toml").write_text(TIGHT)
    (root / "workspace").mkdir()
    (root / "state").mkdir(mode=0o700)
    for path in (root / "limits_probe.py", root / "profiles", root / "profiles" / "tight.toml"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    if owner is not None:
        for path in (root / "workspace", root / "state"):
            os.chown(path, owner, owner)
    return Stage(root, os.getuid() if owner is None else owner)


@pytest.fixture
def stage(sandbox: None) -> Iterator[Stage]:
    built = make_stage()
    yield built
    shutil.rmtree(built.root, ignore_errors=True)


@dataclass
class Ran:
    """One finished ``executor run``: its pid (which names its cgroups), status, output."""

    pid: int
    returncode: int
    stdout: str
    stderr: str

    def report(self) -> dict[str, Any]:
        """The probe's JSON line."""
        lines = [line for line in self.stdout.splitlines() if line.startswith("{")]
        assert lines, f"the probe printed no report: {self.stdout!r} {self.stderr!r}"
        found: dict[str, Any] = json.loads(lines[-1])
        return found


def run(
    stage: Stage, *probe_args: str, user: int | None = None, verbose: bool = False, **env: str
) -> Ran:
    """``executor run --profile tight`` of the probe, bounded by a timeout."""
    argv = [
        *(as_user(user) if user is not None else []),
        *executor_command(),
        "run",
        *(["-v"] if verbose else []),
        "--profile",
        "tight",
        "--workspace",
        str(stage.workspace),
        "--",
        "python3",
        stage.probe,
        *probe_args,
    ]
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=stage.env(**env),
        cwd=stage.workspace,
    )
    try:
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return Ran(process.pid, process.returncode, stdout, stderr)


def assert_bomb_capped(report: dict[str, Any], *, user_namespace: bool = False) -> None:
    """The bomb was refused fork at the limit, after getting close to it."""
    assert report["refused"], report
    tasks = launcher_tasks(user_namespace=user_namespace)
    assert LIMIT - tasks - 8 <= report["processes"] <= LIMIT - tasks, report


def leftover_cgroups(pid: int) -> list[Path]:
    """Command cgroups of the daemon (or ``executor run``) ``pid`` that still exist."""
    from executor_linux.cgroups import cgroup_support

    bases = {Path(h.base) for h in cgroup_support().hierarchies.values()}
    return [path for base in bases for path in base.glob(f"{pid}-*")]


def leftover_beyond_a_spare(pid: int) -> list[Path]:
    """``leftover_cgroups`` of a daemon, but for the one spare set a daemon keeps made ahead
    for the next launch (``cgroups.py``): at most one per hierarchy, and empty."""
    left = leftover_cgroups(pid)
    if len({path.parent for path in left}) != len(left):
        return left  # more than one in a hierarchy: a command's is among them
    return [path for path in left if (path / "cgroup.procs").read_text().strip()]


# --- executor run, with cgroups ---------------------------------------------------------------


def test_fork_bomb_is_capped_at_the_process_limit(cgroups: None, stage: Stage) -> None:
    """A real fork bomb gets the limit's worth of processes, no more, and fork says EAGAIN."""
    ran = run(stage, "forkbomb")
    assert ran.returncode == 0, ran.stderr
    assert_bomb_capped(ran.report())
    assert leftover_cgroups(ran.pid) == []


def test_memory_hog_is_killed_while_a_small_allocation_works(cgroups: None, stage: Stage) -> None:
    """32 MiB work; touching 512 MiB under a 128 MiB cap ends in the cgroup's OOM kill."""
    ran = run(stage, "memory", "512")
    assert "32 ok" in ran.stdout, ran.stderr
    assert ran.returncode == 137, (ran.returncode, ran.stdout, ran.stderr)
    held = [int(line.split()[0]) for line in ran.stdout.splitlines() if line.endswith(" held")]
    assert max(held, default=0) < 128, ran.stdout
    assert '"allocated"' not in ran.stdout


def test_descriptors_and_file_size_are_capped_in_the_commands_cgroups(
    cgroups: None, stage: Stage
) -> None:
    """EMFILE at the descriptor limit, EFBIG at the file size limit, smaller amounts work;
    the command ran in cgroups of its own, which are gone once it ended."""
    ran = run(stage, "files")
    assert ran.returncode == 0, ran.stderr
    report = ran.report()
    assert report["error"] == "EMFILE" and 20 <= report["open"] < LIMIT, report
    assert report["small"] == "ok" and report["small_size"] == str(512 << 10), report
    assert report["big"] == "EFBIG" and report["big_size"] == str(1 << 20), report
    own = [line for line in report["cgroups"] if f"/executor/{ran.pid}-" in line]
    assert {line.split(":")[1] for line in own} >= {"pids", "memory"}, report["cgroups"]
    assert leftover_cgroups(ran.pid) == []


def test_cpu_time_ends_a_spinning_command(cgroups: None, stage: Stage) -> None:
    """0.2 s of CPU work; spinning past 1 s of CPU ends in SIGXCPU (or SIGKILL)."""
    started = time.monotonic()
    ran = run(stage, "cpu")
    assert "warm ok" in ran.stdout, ran.stderr
    assert ran.returncode in (128 + 24, 128 + 9), ran.returncode  # SIGXCPU, SIGKILL
    assert time.monotonic() - started < 30


# --- the rlimit fallback ----------------------------------------------------------------------


def test_without_cgroups_rlimits_take_over_and_say_so(sandbox: None, stage: Stage) -> None:
    """EXECUTOR_LINUX_CGROUPS=off: memory falls back to RLIMIT_DATA (the hog gets
    MemoryError, 32 MiB still work); the report names each mechanism, and as root it says
    that processes are not capped (the kernel exempts uid 0 from RLIMIT_NPROC)."""
    ran = run(stage, "memory", "512", verbose=True, EXECUTOR_LINUX_CGROUPS="off")
    assert "32 ok" in ran.stdout, ran.stderr
    assert ran.returncode == 1 and "MemoryError" in ran.stderr, (ran.returncode, ran.stderr)
    assert "rlimit: memory=128MiB, open_files=64" in ran.stderr, ran.stderr
    if os.getuid() == 0:
        assert "not enforced (root): processes=64" in ran.stderr, ran.stderr
    assert leftover_cgroups(ran.pid) == []


def test_unprivileged_fork_bomb_counts_only_its_own_sandbox(sandbox: None) -> None:
    """A daemon of an ordinary user (no cgroup it may create) caps processes with
    RLIMIT_NPROC set inside the sandbox's user namespace: the bomb stops at the limit, and
    the same user's processes outside the sandbox (more than the limit) do not count."""
    skip_unless(shutil.which("setpriv") is not None, "util-linux setpriv is needed")
    skip_unless(os.getuid() == 0, "switching to an unprivileged user needs root")
    stage = make_stage(owner=UNPRIVILEGED_UID)
    outside = [subprocess.Popen(["sleep", "60"], user=UNPRIVILEGED_UID) for _ in range(LIMIT + 16)]
    try:
        ran = run(stage, "forkbomb", user=UNPRIVILEGED_UID, verbose=True)
        assert ran.returncode == 0, ran.stderr
        assert "rlimit: processes=64" in ran.stderr, ran.stderr
        assert_bomb_capped(ran.report(), user_namespace=True)
    finally:
        for process in outside:
            process.kill()
            process.wait()
        shutil.rmtree(stage.root, ignore_errors=True)


# --- the daemon, over the wire ----------------------------------------------------------------


@pytest.fixture(scope="module")
def daemon(cgroups: None, sandbox_launch: str) -> Iterator[tuple[RunningDaemon, Stage]]:
    """A daemon whose operator lowered the limits of every sandboxed command (one per
    launcher: without naming ``sandbox_launch`` pytest would keep the first one's daemon)."""
    built = make_stage()
    running = RunningDaemon(
        ["--limit", f"processes={LIMIT}", "--limit", "memory=128MiB"],
        env=built.env(),
        cwd=str(built.workspace),
    )
    yield running, built
    running.stop()
    shutil.rmtree(built.root, ignore_errors=True)


def wire_sandbox(stage: Stage) -> dict[str, Any]:
    """The ``sandbox`` a client sends for the stage's profile: no limits in it."""
    from executor.sandbox.profiles import ProfileLibrary, shipped_directory

    ws = str(stage.workspace)
    library = ProfileLibrary([shipped_directory(), stage.root / "profiles"])
    context: dict[str, Any] = library.get("tight").wire_context(workspace_roots=(ws,), cwd=ws)
    assert "limits" not in context and "limits" not in context["permissions"]
    return context


def start_probe(client: Any, stage: Stage, process_id: str, *args: str) -> None:
    """``process/start`` of the probe, sandboxed as a client asks."""
    client.request(
        "process/start",
        {
            "processId": process_id,
            "argv": ["python3", stage.probe, *args],
            "cwd": f"file://{stage.workspace}",
            "env": {"PATH": "/usr/bin:/bin"},
            "tty": False,
            "sandbox": wire_sandbox(stage),
        },
    )


def echo(client: Any, stage: Stage, text: str) -> bytes:
    """A sandboxed ``echo`` through another session; its stdout."""
    _result, events = client.run(
        "echo",
        ["echo", text],
        cwd=f"file://{stage.workspace}",
        sandbox=wire_sandbox(stage),
        timeout=15,
    )
    return output_of(events, "stdout")


def test_daemon_serves_others_while_a_command_fork_bombs(
    daemon: tuple[RunningDaemon, Stage],
) -> None:
    """While one session's command holds a fork bomb at the limit, another session's echo
    runs and the daemon answers; the bomb's cgroups are gone once it closed."""
    running, stage = daemon
    with running.session("bomber") as bomber, running.session("neighbour") as neighbour:
        start_probe(bomber, stage, "bomb", "forkbomb", "3")
        note = bomber.notification("process/output", timeout=30)
        assert_bomb_capped(json.loads(output_of([note])))
        assert echo(neighbour, stage, "still here") == b"still here\n"
        assert neighbour.request("process/read", {"processId": "echo"})["exitCode"] == 0
        closed = bomber.process_events("bomb", timeout=30)
        exited = [e for e in closed if e["method"] == "process/exited"]
        assert exited and exited[0]["params"]["exitCode"] == 0
    assert running.process.poll() is None
    assert leftover_beyond_a_spare(running.pid) == []


def test_daemon_survives_a_memory_hog(daemon: tuple[RunningDaemon, Stage]) -> None:
    """A command touching 512 MiB under the daemon's 128 MiB is killed; the daemon and
    another session carry on."""
    running, stage = daemon
    with running.session("hog") as hog, running.session("neighbour") as neighbour:
        start_probe(hog, stage, "hog", "memory", "512")
        events = hog.process_events("hog", timeout=30)
        assert b"32 ok" in output_of(events, "stdout")
        exited = [e for e in events if e["method"] == "process/exited"]
        assert exited and exited[0]["params"]["exitCode"] == 137
        assert echo(neighbour, stage, "fine") == b"fine\n"
    assert running.process.poll() is None
    assert leftover_beyond_a_spare(running.pid) == []
