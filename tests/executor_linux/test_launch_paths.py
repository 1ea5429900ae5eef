"""The launcher that applies the layers: the one ``EXECUTOR_SANDBOX_LAUNCH`` names really ran,
and each stage's failure is reported by name, before anything runs (both launchers).

Launches go straight through a ``Spawner`` with a hand-made ``LaunchSpec`` (as the backend
would plan it), so that each stage can be made to fail on its own: a cgroup that does not
exist (``limits``), a network namespace that is gone (``network``), an invalid uid map
(``namespaces``), a bind of a missing path (``mounts``), rights Landlock does not know
(``landlock``), an invalid BPF program (``seccomp``), a plan whose read-only mount a later
one undoes (``verify``), a missing working directory (``chdir``) and program (``exec``).
Each failing launch would create a marker file if its command ran; the marker stays absent,
and the same launch without the fault runs the command.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from executor_linux import landlock, launch_spec, native_spec, seccomp_policy
from executor_linux.launch_spec import LandlockRules, LaunchSpec, Limits, Mounts, Namespaces

from executor.sandbox import ChildSetup, Command
from executor.spawn.spawner import LaunchFailed, Spawner
from tests.executor_linux.conftest import LAUNCH_ENV, Scene, linux_sandbox_available, run_cli
from tests.support.enforcement import skip_unless

pytestmark = pytest.mark.enforcement

LAUNCHER = str(Path(launch_spec.__file__).with_name("launcher.py"))
#: The compiled filters are the daemon's; compiled once here too.
FILTER = seccomp_policy.compile_filter(True)


@pytest.fixture
def box(tmp_path: Path) -> Path:
    """A writable directory and a staging directory the launches may mount over."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    (tmp_path / "work").mkdir()
    (tmp_path / "staging").mkdir(mode=0o700)
    return tmp_path


def base_spec(box: Path) -> LaunchSpec:
    """Every layer, as the backend plans a workspace command with the network off."""
    abi = landlock.abi_version()
    fs = landlock.fs_rights(abi)
    work = str(box / "work")
    user = os.getuid() != 0
    mounts = Mounts(
        staging=str(box / "staging"),
        readonly_root=True,
        operations=(("rw", work),),
        private_shm=True,
        private_dev=True,
    )
    return LaunchSpec(
        limits=Limits(rlimits=(("RLIMIT_NOFILE", 4096),), oom_score_adj=500),
        namespaces=Namespaces(
            user=user, net=True, proc=True, uid=os.getuid(), gid=os.getgid(), mounts=mounts
        ),
        landlock=LandlockRules(
            fs=fs,
            net=landlock.NET_BIND_TCP | landlock.NET_CONNECT_TCP if abi >= 4 else 0,
            scoped=landlock.SCOPE_SIGNAL | landlock.SCOPE_ABSTRACT_UNIX_SOCKET if abi >= 6 else 0,
            grants=(("/", landlock.ACCESS_FS_READ), (work, fs), ("/dev/null", fs)),
        ),
        seccomp=FILTER,
    )


def launch(spec: LaunchSpec, argv: list[str], cwd: str) -> tuple[str, int | LaunchFailed]:
    """Launch ``argv`` under ``spec``: (the launcher that took it, exit code or the failure)."""

    async def run() -> tuple[str, int | LaunchFailed]:
        spawner = Spawner()
        setup = ChildSetup(
            module_path=LAUNCHER,
            function="run",
            payload=launch_spec.encode(spec),
            native=native_spec.encode(spec),
        )
        request = Command(
            executable=argv[0],
            argv=tuple(argv),
            env={"PATH": "/usr/bin:/bin"},
            cwd=cwd,
            tty=False,
            setup=setup,
        )
        null = os.open(os.devnull, os.O_RDWR)
        try:
            launched = spawner.launch(request, (null, null, null))
            try:
                await asyncio.wait_for(launched.started, 30)
            except LaunchFailed as failed:
                await asyncio.wait_for(launched.gone, 30)
                return spawner.launcher_for(request), failed
            code = await asyncio.wait_for(launched.exited, 30)
            await asyncio.wait_for(launched.gone, 30)
            return spawner.launcher_for(request), os.waitstatus_to_exitcode(code)
        finally:
            os.close(null)
            spawner.close()

    return asyncio.run(run())


def touch(marker: Path) -> list[str]:
    return ["/bin/sh", "-c", f"echo ran > {marker}"]


def test_the_launcher_named_in_the_environment_takes_the_launch(
    box: Path, sandbox_launch: str
) -> None:
    """Not silently the other one: the spawner's choice, and what PID 1 of the sandbox is."""
    assert os.environ[LAUNCH_ENV] == sandbox_launch
    marker = box / "work" / "pid1"
    spec = base_spec(box)
    script = f"readlink /proc/1/exe > {marker}"
    taken, code = launch(spec, ["/bin/sh", "-c", script], str(box / "work"))
    assert (taken, code) == (sandbox_launch, 0)
    pid1 = os.path.basename(marker.read_text().strip())
    if sandbox_launch == "native":
        assert pid1 == "executor-launcher"
    else:
        assert pid1.startswith("python")


def test_executor_run_uses_the_named_launcher(scene: Scene, sandbox_launch: str) -> None:
    """Through ``executor run`` (the daemon's spawner code): PID 1 is that launcher's."""
    result = run_cli(scene, "workspace", ["readlink", "/proc/1/exe"], "--no-tty")
    assert result.returncode == 0, result.stderr
    pid1 = os.path.basename(result.stdout.strip())
    assert (pid1 == "executor-launcher") is (sandbox_launch == "native"), pid1


def test_the_sandboxed_command_starts_with_default_signals(box: Path, sandbox_launch: str) -> None:
    """Nothing ignored or blocked reaches the command from the daemon (here: the test, which
    starts the launcher server) or from PID 1 and the outer child, which ignore the signals
    they forward; the command can still ignore one itself."""
    status = box / "work" / "status"
    passed_on = (signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT, signal.SIGUSR1, signal.SIGALRM)
    previous = {number: signal.signal(number, signal.SIG_IGN) for number in passed_on}
    try:
        _, code = launch(base_spec(box), ["/bin/cp", "/proc/self/status", str(status)], "/")
        _, code_trapping = launch(
            base_spec(box),
            ["/bin/sh", "-c", f"trap '' HUP; exec cp /proc/self/status {status}.trapped"],
            "/",
        )
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    assert (code, code_trapping) == (0, 0)
    fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
    glibc_internal = 1 << 31 | 1 << 32
    assert (int(fields["SigIgn"], 16) & ~glibc_internal, int(fields["SigBlk"], 16)) == (0, 0)
    trapped = (status.parent / "status.trapped").read_text()
    ignored = next(line for line in trapped.splitlines() if line.startswith("SigIgn:"))
    assert int(ignored.split()[1], 16) & 1 << (signal.SIGHUP - 1)


def test_an_intact_spec_runs_the_command_with_every_layer(box: Path) -> None:
    """The allowed counterpart of every fault below: the same spec, untouched, runs."""
    marker = box / "work" / "status"
    script = f"grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):' /proc/self/status > {marker}"
    _, code = launch(base_spec(box), ["/bin/sh", "-c", script], str(box / "work"))
    assert code == 0
    status = dict(line.split(":\t") for line in marker.read_text().splitlines())
    assert status == {
        "NoNewPrivs": "1",
        "Seccomp": "2",
        "CapEff": "0000000000000000",
        "CapBnd": "0000000000000000",
    }


def _with_mounts(spec: LaunchSpec, operations: tuple[tuple[str, str], ...]) -> LaunchSpec:
    assert spec.namespaces is not None
    mounts = spec.namespaces.mounts._replace(operations=operations)
    return spec._replace(namespaces=spec.namespaces._replace(mounts=mounts))


def _faults(box: Path) -> dict[str, tuple[LaunchSpec, str, str]]:
    """stage -> (a spec failing there, cwd, executable)."""
    spec = base_spec(box)
    work = str(box / "work")
    namespaces = spec.namespaces
    landlock_rules = spec.landlock
    assert namespaces is not None and landlock_rules is not None
    missing = str(box / "missing")
    return {
        "limits": (spec._replace(limits=Limits(cgroups=(f"{missing}/tasks",))), work, "/bin/sh"),
        "network": (
            spec._replace(namespaces=namespaces._replace(net=False, join_net=(missing, 1))),
            work,
            "/bin/sh",
        ),
        "namespaces": (
            # -1 is no valid id: the kernel refuses the map.
            spec._replace(namespaces=namespaces._replace(user=True, uid=2**32 - 1)),
            work,
            "/bin/sh",
        ),
        "mounts": (_with_mounts(spec, (("rw", work), ("ro", missing))), work, "/bin/sh"),
        "landlock": (spec._replace(landlock=landlock_rules._replace(fs=1 << 60)), work, "/bin/sh"),
        "seccomp": (spec._replace(seccomp=b"\xff" * 8), work, "/bin/sh"),
        # The read-only bind of the workspace is undone by a writable one on top: the
        # launcher applies both, and its check from inside sees the workspace writable.
        "verify": (_with_mounts(spec, (("ro", work), ("rw", work))), work, "/bin/sh"),
        "chdir": (spec, missing, "/bin/sh"),
        "exec": (spec, work, str(box / "work" / "no-such-program")),
    }


@pytest.mark.parametrize(
    "stage",
    ["limits", "network", "namespaces", "mounts", "landlock", "seccomp", "verify", "chdir", "exec"],
)
def test_a_failing_stage_is_named_and_nothing_runs(
    box: Path, stage: str, sandbox_launch: str
) -> None:
    spec, cwd, executable = _faults(box)[stage]
    marker = box / "work" / "ran"
    argv = touch(marker)
    taken, outcome = launch(spec, [executable, *argv[1:]], cwd)
    assert taken == sandbox_launch
    assert isinstance(outcome, LaunchFailed), outcome
    assert outcome.stage == stage, (outcome.stage, outcome.detail)
    assert not marker.exists()
    if stage == "verify":
        assert f"{box / 'work'} is writable" in outcome.detail
    if stage == "network":
        assert "network namespace is gone" in outcome.detail


def test_without_namespaces_the_command_is_confined_before_exec(box: Path) -> None:
    """Landlock only (no namespaces): the process becomes the command after every layer; a
    write outside the granted tree fails, one inside works."""
    spec = base_spec(box)._replace(namespaces=None)
    outside = box / "outside"
    outside.mkdir()
    inside = box / "work" / "inside"
    script = f"echo x > {inside}; echo y > {outside / 'file'} || true"
    _, code = launch(spec, ["/bin/sh", "-c", script], str(box / "work"))
    assert code == 0
    assert inside.read_text() == "x\n"
    assert not (outside / "file").exists()
    failed = spec._replace(seccomp=b"\xff" * 8)
    _, outcome = launch(failed, touch(box / "work" / "ran"), str(box / "work"))
    assert isinstance(outcome, LaunchFailed) and outcome.stage == "seccomp"
    assert not (box / "work" / "ran").exists()
