"""The first thing the forked child does: join its cgroups, lower its rlimits (STDLIB ONLY).

``enter`` runs at the very start of the launcher's ``run``, before any namespace exists, so
that everything the command becomes — PID 1 of its namespaces, the command, every
descendant — is counted and capped. What it applies, a ``launch_spec.Limits``, comes from
``resources.plan_limits``::

    Limits(cgroups=(".../tasks", ...),                   # written "0": this process joins
           rlimits=(("RLIMIT_NOFILE", 65536), ...),      # lowered, never raised
           nproc_in_user_namespace=2048 | None,          # see in_user_namespace()
           oom_score_adj=500)

A limit only ever lowers what the process has: the soft limit becomes ``min(soft, value)``
and the hard limit ``min(hard, value)``, so a low soft limit the daemon runs with (1024 open
files, kept for programs that use ``select``) stays, and the command, without
``CAP_SYS_RESOURCE``, cannot raise either back. ``RLIMIT_CPU`` keeps one second between soft
(``SIGXCPU``) and hard (``SIGKILL``).
"""

from __future__ import annotations

import os
import resource

from executor_linux.launch_spec import Limits

__all__ = ["enter", "in_user_namespace", "lower"]

#: What ``in_user_namespace`` sets once inside the user namespace (this child's copy only).
_later: dict[str, int] = {}


def enter(spec: Limits | None) -> None:
    """Join the command's cgroups, raise its OOM score, lower its rlimits."""
    if spec is None:
        return
    for join in spec.cgroups:
        _write(_whole_process(join), "0")
    adjust = spec.oom_score_adj
    if adjust is not None:
        try:
            _write("/proc/self/oom_score_adj", str(adjust))
        except OSError:
            pass  # a preference for the OOM killer, not a limit: never a reason to fail
    for name, value in spec.rlimits:
        lower(name, value)
    nproc = spec.nproc_in_user_namespace
    if nproc is not None:
        _later["RLIMIT_NPROC"] = nproc


def in_user_namespace() -> None:
    """Set the deferred ``RLIMIT_NPROC``, just after entering the new user namespace.

    The kernel counts a user's tasks per user namespace and checks each level up the chain,
    the outer one against the limit the namespace's creator had: set here, the limit counts
    this sandbox's tasks alone, while set before ``unshare`` it would count (and cap) every
    process of the daemon's user.
    """
    for name, value in _later.items():
        lower(name, value)


def lower(name: str, value: int) -> None:
    """Lower rlimit ``name`` to ``value`` (soft and hard; ``RLIMIT_CPU``: hard one more)."""
    which = getattr(resource, name)
    soft, hard = resource.getrlimit(which)
    ceiling = value + 1 if name == "RLIMIT_CPU" else value
    hard = ceiling if hard == resource.RLIM_INFINITY else min(hard, ceiling)
    soft = value if soft == resource.RLIM_INFINITY else min(soft, value)
    resource.setrlimit(which, (min(soft, hard), hard))


def _whole_process(join: str) -> str:
    """``join``, unless it is a v1 ``tasks`` file and this process has more than one thread
    (``tasks`` moves the calling thread only): then ``cgroup.procs`` beside it."""
    if join.endswith("/tasks") and len(os.listdir("/proc/self/task")) > 1:
        return join[: -len("tasks")] + "cgroup.procs"
    return join


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
