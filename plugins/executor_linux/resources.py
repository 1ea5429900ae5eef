"""Which mechanism enforces each resource limit here, and one command's share (daemon side).

* ``processes``: ``pids.max`` of the command's cgroup (the whole tree, threads included).
  Without a pids controller, ``RLIMIT_NPROC``: set after the user namespace is entered it
  counts the sandbox's own tasks; without one it counts every process of the daemon's user.
  The kernel never applies ``RLIMIT_NPROC`` to uid 0, so as root only the pids controller
  can cap processes; there it is reported as not enforced rather than pretended.
* ``memory``: the memory controller (RAM and swap together, the whole tree). Without one,
  ``RLIMIT_DATA`` per process: heap and private writable mappings, so runtimes that reserve
  large address ranges up front (V8, Go, the JVM, sanitizers) keep working, which
  ``RLIMIT_AS`` would break; a tree of processes can use the cap once per process.
* ``open_files``, ``file_size``, ``cpu_time``: ``RLIMIT_NOFILE``, ``RLIMIT_FSIZE``,
  ``RLIMIT_CPU`` per process (cgroups have no equivalent).

Every sandboxed command is also made the OOM killer's preferred victim
(``oom_score_adj`` 500, which it cannot lower once its capabilities are gone), so that if
the host runs out of memory anyway, sandboxed work goes before the daemon.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from executor.sandbox import ResourceLimits
from executor_linux.cgroups import CgroupSupport, CommandCgroups, cgroup_support, command_cgroups
from executor_linux.launch_spec import Limits

__all__ = ["OOM_SCORE_ADJ", "LimitsPlan", "chain", "limit_mechanisms", "plan_limits"]

log = logging.getLogger("executor.sandbox.linux")

#: Added to every sandboxed process's OOM score: with 500 it outranks any process outside a
#: sandbox that uses less than half of the memory.
OOM_SCORE_ADJ: Final = 500
_RLIMITS: Final = {
    "open_files": "RLIMIT_NOFILE",
    "file_size": "RLIMIT_FSIZE",
    "cpu_time": "RLIMIT_CPU",
}
_PER_PROCESS: Final = {
    "open_files": "RLIMIT_NOFILE, per process (a lower soft limit is kept)",
    "file_size": "RLIMIT_FSIZE, per file a process writes (SIGXFSZ, or EFBIG)",
    "cpu_time": "RLIMIT_CPU, per process (SIGXCPU, SIGKILL a second later)",
}


@dataclass(frozen=True, slots=True)
class LimitsPlan:
    """One command's limits: what the child applies, the report layer, the clean-up."""

    spec: Limits
    layer: str
    release: Callable[[], None] | None = None


def _processes_fallback(uid: int, user_namespace: bool) -> str:
    if uid == 0:
        return ""
    if user_namespace:
        return "RLIMIT_NPROC, counting the sandbox's own tasks (set in its user namespace)"
    return f"RLIMIT_NPROC, counting every process of uid {uid}"


def limit_mechanisms(
    *, user_namespace: bool, uid: int | None = None, support: CgroupSupport | None = None
) -> dict[str, str]:
    """``limits.<name>``: how each limit is enforced on this host (``executor doctor``)."""
    support = support or cgroup_support()
    uid = os.getuid() if uid is None else uid
    found: dict[str, str] = {}
    pids = support.hierarchies.get("pids")
    if pids is not None:
        found["processes"] = f"pids.max, the whole tree ({support.describe('pids')})"
    else:
        fallback = _processes_fallback(uid, user_namespace)
        found["processes"] = (
            f"{fallback} ({support.describe('pids')})"
            if fallback
            else "NOT ENFORCED: uid 0 is exempt from RLIMIT_NPROC and there is no usable pids"
            f" controller ({support.describe('pids')})"
        )
    memory = support.hierarchies.get("memory")
    if memory is not None:
        files = (
            "memory.max with memory.swap.max 0"
            if memory.version == 2
            else "memory.limit_in_bytes and memory.memsw.limit_in_bytes"
        )
        found["memory"] = f"{files}, the whole tree, RAM and swap ({support.describe('memory')})"
    else:
        found["memory"] = f"RLIMIT_DATA, per process ({support.describe('memory')})"
    found.update(_PER_PROCESS)
    return {f"limits.{name}": text for name, text in found.items()}


def plan_limits(
    limits: ResourceLimits,
    *,
    user_namespace: bool,
    uid: int | None = None,
    cgroups: CommandCgroups | None = None,
) -> LimitsPlan:
    """Create the command's cgroups and say what the child applies itself.

    Cgroups that cannot be created leave their limits to rlimits for this command (logged,
    and visible in the layer), never unenforced silently.
    """
    cgroups = cgroups or command_cgroups()
    uid = os.getuid() if uid is None else uid
    try:
        group = cgroups.create(limits)
    except OSError as exc:
        log.warning("cannot create a cgroup for a command (%s); rlimits apply instead", exc)
        group = None
    covered = group.controllers if group is not None else frozenset()
    rlimits: list[tuple[str, int]] = []
    nproc_later: int | None = None
    applied: dict[str, list[str]] = {}

    def cgroup(controller: str) -> str:
        return f"cgroup v{cgroups.support.hierarchies[controller].version}"

    for name, value in limits.items():
        if name == "processes":
            if "pids" in covered:
                how = cgroup("pids")
            elif uid == 0:
                how = "not enforced (root)"
            elif user_namespace:
                nproc_later, how = value, "rlimit"
            else:
                rlimits.append(("RLIMIT_NPROC", value))
                how = "rlimit"
        elif name == "memory":
            if "memory" in covered:
                how = cgroup("memory")
            else:
                rlimits.append(("RLIMIT_DATA", value))
                how = "rlimit"
        else:
            rlimits.append((_RLIMITS[name], value))
            how = "rlimit"
        applied.setdefault(how, []).append(limits.describe(name))
    spec = Limits(
        cgroups=group.joins if group is not None else (),
        rlimits=tuple(rlimits),
        nproc_in_user_namespace=nproc_later,
        oom_score_adj=OOM_SCORE_ADJ,
    )
    described = "; ".join(f"{how}: {', '.join(items)}" for how, items in applied.items())
    return LimitsPlan(
        spec=spec,
        layer=f"limits({described or 'none'})",
        release=group.release if group is not None else None,
    )


def chain(*steps: Callable[[], None] | None) -> Callable[[], None] | None:
    """One release callback running every given one, in order (None when there is none)."""
    present = [step for step in steps if step is not None]
    if len(present) <= 1:
        return present[0] if present else None

    def release() -> None:
        failed: Exception | None = None
        for step in present:
            try:
                step()
            except Exception as exc:  # the next clean-up still runs
                failed = failed or exc
        if failed is not None:
            raise failed

    return release
