"""Command cgroups: finding the hierarchies (v1, v2, hybrid), creating, and removing them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
from executor_linux import launch_spec
from executor_linux.backend import LinuxBackend
from executor_linux.cgroups import (
    CgroupSupport,
    CommandCgroups,
    Hierarchy,
    cgroup_support,
    discover,
)
from executor_linux.resources import limit_mechanisms, plan_limits
from executor_linux.spare_cgroups import REFILL_DELAY

from executor.protocol.intent import Access
from executor.sandbox import Command, NetworkMode, PathRule, ResourceLimits, RuleSet
from executor.spawn.spawner import Spawner
from tests.executor_linux.conftest import LAUNCH_ENV, linux_sandbox_available
from tests.support.enforcement import skip_unless

HYBRID_CGROUP = """\
9:name=systemd:/
8:pids:/
4:memory:/process_api/abc
1:cpu:/
0::/
"""
HYBRID_MOUNTS = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V2_MOUNTS = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def test_hybrid_layout_uses_the_v1_controllers() -> None:
    """This CI machine's kind: v1 pids and memory (memory nested), an empty cgroup2 beside."""
    found = discover(
        HYBRID_CGROUP, HYBRID_MOUNTS, controllers_of={"/sys/fs/cgroup/unified": "hugetlb"}
    )
    assert found.hierarchies == {
        "pids": Hierarchy(1, "/sys/fs/cgroup/pids"),
        "memory": Hierarchy(1, "/sys/fs/cgroup/memory/process_api/abc"),
    }
    assert found.hierarchies["memory"].base == "/sys/fs/cgroup/memory/process_api/abc/executor"


def test_unified_layout_uses_the_daemons_v2_cgroup() -> None:
    """Pure v2: both controllers from the daemon's own cgroup, when its parent offers them."""
    own = "/sys/fs/cgroup/system.slice/executor.service"
    found = discover(
        "0::/system.slice/executor.service\n", V2_MOUNTS, controllers_of={own: "cpu memory pids"}
    )
    assert found.hierarchies == {"pids": Hierarchy(2, own), "memory": Hierarchy(2, own)}


def test_a_v2_cgroup_without_the_controllers_says_how_to_get_them() -> None:
    """No delegation: each controller is unavailable, with the reason and the remedy."""
    found = discover("0::/user.slice\n", V2_MOUNTS, controllers_of={})
    assert found.hierarchies == {}
    assert "does not offer the pids controller" in found.reasons["pids"]
    assert "Delegate=yes" in found.reasons["memory"]


def test_a_mount_of_a_subtree_maps_the_path_below_its_root() -> None:
    """A container sees its own part of a v1 hierarchy mounted at its root."""
    mounts = "50 40 0:36 /docker/c1 /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n"
    found = discover("8:pids:/docker/c1/inner\n", mounts, controllers_of={})
    assert found.hierarchies["pids"] == Hierarchy(1, "/sys/fs/cgroup/pids/inner")
    hidden = discover("8:pids:/elsewhere\n", mounts, controllers_of={})
    assert "pids" not in hidden.hierarchies


def test_v2_delegation_and_limits_are_written(tmp_path: Path) -> None:
    """On v2 the controllers are handed down to executor/ and each command's cgroup gets
    pids.max, memory.max and (with swap accounting) memory.swap.max = 0."""
    own = tmp_path / "service"
    own.mkdir()
    (own / "cgroup.subtree_control").write_text("")
    support = CgroupSupport({"pids": Hierarchy(2, str(own)), "memory": Hierarchy(2, str(own))})
    group = CommandCgroups(support).create(ResourceLimits(processes=100, memory=64 << 20))
    assert group is not None and group.controllers == {"pids", "memory"}
    (directory,) = {Path(d) for d in group.directories.values()}
    assert directory.parent == own / "executor"
    assert directory.name.startswith(f"{os.getpid()}-")
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (own / "executor" / "cgroup.subtree_control").read_text() == "+memory +pids"
    assert (directory / "pids.max").read_text() == "100"
    assert (directory / "memory.max").read_text() == str(64 << 20)
    assert group.joins == (str(directory / "cgroup.procs"),)


def test_only_the_controllers_a_limit_needs_are_used(tmp_path: Path) -> None:
    """No memory limit: no memory cgroup; no cgroup limit at all: no cgroup."""
    pids, memory = tmp_path / "pids", tmp_path / "memory"
    pids.mkdir()
    memory.mkdir()
    support = CgroupSupport({"pids": Hierarchy(1, str(pids)), "memory": Hierarchy(1, str(memory))})
    cgroups = CommandCgroups(support)
    group = cgroups.create(ResourceLimits(processes=10, open_files=5))
    assert group is not None and group.controllers == {"pids"}
    assert cgroups.create(ResourceLimits(open_files=5)) is None


def test_mechanisms_per_limit_say_what_applies() -> None:
    """doctor's lines: cgroups where usable; RLIMIT_NPROC per sandbox in a user namespace;
    as root without a pids controller, processes are plainly NOT ENFORCED."""
    v1 = CgroupSupport({"pids": Hierarchy(1, "/p"), "memory": Hierarchy(1, "/m")})
    none = CgroupSupport({}, {"pids": "no pids here", "memory": "no memory here"})
    with_cgroups = limit_mechanisms(user_namespace=False, uid=0, support=v1)
    assert with_cgroups["limits.processes"].startswith("pids.max")
    assert "cgroup v1, below /m/executor" in with_cgroups["limits.memory"]
    assert with_cgroups["limits.open_files"].startswith("RLIMIT_NOFILE")
    root = limit_mechanisms(user_namespace=False, uid=0, support=none)
    assert root["limits.processes"].startswith("NOT ENFORCED: uid 0 is exempt")
    assert root["limits.memory"].startswith("RLIMIT_DATA")
    user = limit_mechanisms(user_namespace=True, uid=1000, support=none)
    assert "the sandbox's own tasks" in user["limits.processes"]
    assert (
        "every process of uid 1000"
        in limit_mechanisms(user_namespace=False, uid=1000, support=none)["limits.processes"]
    )


def test_plan_without_cgroups_defers_nproc_to_the_user_namespace() -> None:
    """The child's payload: rlimits it sets at once, RLIMIT_NPROC after unshare."""
    limits = ResourceLimits(processes=64, memory=1 << 30, open_files=100, cpu_time=5)
    cgroups = CommandCgroups(CgroupSupport({}, {}))
    unprivileged = plan_limits(limits, user_namespace=True, uid=1000, cgroups=cgroups)
    assert unprivileged.spec.nproc_in_user_namespace == 64
    assert unprivileged.spec.rlimits == (
        ("RLIMIT_DATA", 1 << 30),
        ("RLIMIT_NOFILE", 100),
        ("RLIMIT_CPU", 5),
    )
    assert unprivileged.layer == (
        "limits(rlimit: processes=64, memory=1GiB, open_files=100, cpu_time=5s)"
    )
    root = plan_limits(limits, user_namespace=False, uid=0, cgroups=cgroups)
    assert root.spec.nproc_in_user_namespace is None
    assert root.layer.startswith("limits(not enforced (root): processes=64; rlimit: memory=1GiB")


# --- for real, on this host -------------------------------------------------------------------


@pytest.mark.enforcement
def test_real_command_cgroups_are_created_limited_and_removed() -> None:
    """The daemon's hierarchies here: a command cgroup with the limits written, a process
    that joined it, and on release the process killed and every directory gone."""
    support = cgroup_support()
    skip_unless(
        {"pids", "memory"} <= set(support.hierarchies),
        "pids and memory cgroups the daemon can create are needed",
    )
    group = CommandCgroups(support).create(ResourceLimits(processes=8, memory=64 << 20))
    assert group is not None
    directories = [Path(d) for d in dict.fromkeys(group.directories.values())]
    pids = Path(group.directories["pids"])
    assert (pids / "pids.max").read_text().strip() == "8"
    for controller, directory in group.directories.items():
        # v1 joins through "tasks": no global lock, no RCU grace period per launch.
        join = "tasks" if support.hierarchies[controller].version == 1 else "cgroup.procs"
        assert os.path.join(directory, join) in group.joins
    joins = "; ".join(f"echo 0 > {join}" for join in group.joins)
    leftover = subprocess.Popen(["sh", "-c", f"{joins}; exec sleep 30"])
    try:
        deadline = time.monotonic() + 10
        while str(leftover.pid) not in (pids / "cgroup.procs").read_text().split():
            assert time.monotonic() < deadline, "the process never joined its cgroup"
            time.sleep(0.01)
        group.release()
        assert leftover.wait(timeout=10) == -9
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()
    assert [d for d in directories if d.exists()] == []


@pytest.mark.enforcement
def test_when_exit_and_end_of_output_are_reported_nothing_is_left_in_the_cgroups(
    tmp_path: Path,
) -> None:
    """A sandboxed command leaves a process behind in its namespaces and exits 4. By the time
    the launcher has reported the exit and the output has ended, which may be before the
    namespaces are torn down (``sandbox.c`` reports early), that process is gone and no
    process of the launch is left in the command's cgroups: release removes them at once,
    without killing anything."""
    support = cgroup_support()
    skip_unless(
        {"pids", "memory"} <= set(support.hierarchies),
        "pids and memory cgroups the daemon can create are needed",
    )
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    rules = RuleSet(
        filesystem_restricted=True,
        rules=(PathRule("/", Access.READ), PathRule(str(tmp_path), Access.WRITE)),
        network=NetworkMode.RESTRICTED,
    )
    script = "cat /proc/self/cgroup; sleep 30 >/dev/null 2>&1 & sleep 0.2; exit 4"
    command = Command(executable="/bin/sh", argv=("sh", "-c", script), env={}, cwd="/", tty=False)
    plan = LinuxBackend(state_dir=str(tmp_path / "state")).prepare(rules, command)
    assert plan.setup is not None and plan.release is not None
    spec = launch_spec.decode(plan.setup.payload)
    assert spec.limits is not None
    directories = [Path(join).parent for join in spec.limits.cgroups]
    assert len(directories) == 2

    async def run() -> tuple[int, bytes, list[str], str]:
        request = replace(command, setup=plan.setup)
        read_end, write_end = os.pipe()
        spawner = Spawner()
        try:
            launch = spawner.launch(request, (0, write_end, write_end))
            os.close(write_end)
            outer, _supervisor = await launch.started
            # The launcher's outer child, which holds the namespaces until it exits.
            outer_cgroups = Path(f"/proc/{outer}/cgroup").read_text()
            status = await launch.exited
            # At once: a process of the launch still in there now (its namespaces being torn
            # down) would be gone a moment later.
            left = [(d / join).read_text() for d in directories for join in _JOINS]
            output = await asyncio.to_thread(_read_to_end, read_end)
            return status, output, left, outer_cgroups
        finally:
            os.close(read_end)
            spawner.close()

    try:
        status, output, left, outer_cgroups = asyncio.run(run())
    finally:
        plan.release()
    assert os.waitstatus_to_exitcode(status) == 4
    if os.environ.get(LAUNCH_ENV) == "native":
        # It reports the exit before its own exit tears the namespaces down: it must not be
        # in the command's cgroups (PID 1 joins them), or release would find it there.
        assert all(str(d).split("/executor/")[-1] not in outer_cgroups for d in directories)
    assert all(str(d).split("/executor/")[-1] in output.decode() for d in directories), output
    assert not any(text.strip() for text in left), left
    assert [d for d in directories if d.exists()] == []


_JOINS = ("tasks", "cgroup.procs")


def _read_to_end(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _ours(support: CgroupSupport) -> set[Path]:
    """This process's command cgroups, in every hierarchy."""
    bases = {Path(h.base) for h in support.hierarchies.values()}
    return {path for base in bases for path in base.glob(f"{os.getpid()}-*")}


@pytest.mark.enforcement
def test_a_spare_is_made_ahead_on_the_loop_used_once_and_never_when_touched() -> None:
    """In a daemon (a running event loop), a launch leaves one spare set for the same limits
    made a little later (``REFILL_DELAY``: not while the launch itself is still starting on
    the daemon's CPU), and the next launch takes it. A spare something joined
    meanwhile is not handed out (removed, its process killed), nor one made for other
    limits; the last spare goes with ``drop_spare`` (at exit)."""
    support = cgroup_support()
    skip_unless(
        {"pids", "memory"} <= set(support.hierarchies),
        "pids and memory cgroups the daemon can create are needed",
    )
    cgroups = CommandCgroups(support)
    limits = ResourceLimits(processes=8, memory=64 << 20)
    before = _ours(support)
    per_set = len({h.base for h in support.hierarchies.values()})  # v2: one for both

    async def scenario() -> None:
        first = cgroups.create(limits)
        assert first is not None
        mine = {Path(d) for d in first.directories.values()}
        await asyncio.sleep(0)
        assert _ours(support) - before - mine == set()  # not on the launch's own turn
        await refilled()
        spare = _ours(support) - before - mine
        assert len(spare) == per_set, spare
        second = cgroups.create(limits)
        assert second is not None and {Path(d) for d in second.directories.values()} == spare
        await refilled()
        touched = _ours(support) - before - mine - spare
        assert len(touched) == per_set
        joins = "; ".join(f"echo 0 > {d}/{_join_file(support, d)}" for d in touched)
        joined = subprocess.Popen(["sh", "-c", f"{joins}; exec sleep 30"])
        try:
            pids = next(d for d in touched if str(d).startswith(support.hierarchies["pids"].base))
            deadline = time.monotonic() + 10
            while str(joined.pid) not in (pids / "cgroup.procs").read_text().split():
                assert time.monotonic() < deadline, "the process never joined the spare"
                time.sleep(0.01)
            third = cgroups.create(limits)
            assert third is not None
            assert not {Path(d) for d in third.directories.values()} & touched
            assert joined.wait(timeout=10) == -9
            assert [d for d in touched if d.exists()] == []
        finally:
            if joined.poll() is None:
                joined.kill()
                joined.wait()
        await refilled()
        other = cgroups.create(ResourceLimits(processes=9, memory=64 << 20))
        assert other is not None
        assert (Path(other.directories["pids"]) / "pids.max").read_text().strip() == "9"
        await refilled()
        for group in (first, second, third, other):
            group.release()

    async def refilled() -> None:
        # A timer set after the refill's, for as long: the loop runs the refill first.
        await asyncio.sleep(REFILL_DELAY)

    asyncio.run(scenario())
    assert len(_ours(support) - before) == per_set  # the spare for the last limits
    cgroups.drop_spare()
    assert _ours(support) - before == set()


def _join_file(support: CgroupSupport, directory: Path) -> str:
    version = next(
        h.version for h in support.hierarchies.values() if str(directory).startswith(h.base)
    )
    return "tasks" if version == 1 else "cgroup.procs"
