"""What the forked child is told to apply: the launch, as typed values (STDLIB ONLY).

The daemon builds a ``LaunchSpec`` (``backend.prepare``); the launcher reads it in the forked
child (``launcher.run``, ``observe.Observer.verify``). Each part is one layer, ``None`` when
the launch has no such layer; the launcher applies them in field order.

Named tuples, not dataclasses: immutable, slotted and typed alike, but ``dataclasses`` imports
``inspect`` and ``ast``, 1.5 MiB more in the launcher server that every launch's forks copy
(fork and exit took ~10% longer); ``typing`` is loaded there anyway.

It crosses to the launcher server as bytes (``encode``), unpickled in the child (``decode``).
That server (``python -I -S zygote.py``) unpickles each request *before* it loads the
request's backend module, and nothing else puts ``executor_linux`` on its path: a class in
the request itself would not resolve on a fresh server's first launch. By the time the
child runs, ``launcher.py`` has imported this module, so the inner pickle resolves.
(``ChildSetup`` asks for builtins only, for the same reason.)
"""

from __future__ import annotations

import pickle
from typing import NamedTuple

__all__ = ["LandlockRules", "LaunchSpec", "Limits", "Mounts", "Namespaces", "decode", "encode"]


class Limits(NamedTuple):
    """Layer 0, before anything else (``rlimits.enter``)."""

    #: Files this process writes ``0`` to: it joins the command's cgroups.
    cgroups: tuple[str, ...] = ()
    #: ``(RLIMIT_* name, value)``, lowered (never raised) at once.
    rlimits: tuple[tuple[str, int], ...] = ()
    #: ``RLIMIT_NPROC``, lowered only inside the new user namespace (``rlimits.py`` says why).
    nproc_in_user_namespace: int | None = None
    oom_score_adj: int | None = None


class Mounts(NamedTuple):
    """What PID 1 of the namespaces mounts in its private mount namespace."""

    #: Where the launcher mounts its private tmpfs (the empty file that masks denied files).
    staging: str
    #: Make every existing mount read-only first.
    readonly_root: bool = False
    #: ``(op, path)`` in order, op one of ``rw``, ``ro``, ``pin``, ``mask_dir``, ``mask_file``,
    #: ``mask_socket`` (a host Unix socket: masked like a denied file while it is one, skipped
    #: once it is gone).
    operations: tuple[tuple[str, str], ...] = ()
    #: A private ``/dev/shm`` rather than the host's.
    private_shm: bool = False
    #: Replace ``/dev`` with a minimal one.
    private_dev: bool = False
    #: Mask ``/proc`` entries with host secrets; off only to measure it (``bench/layers.py``).
    mask_proc: bool = True


class Namespaces(NamedTuple):
    """Layer 1: the namespaces ``unshare`` creates (mount, PID and IPC always), the network
    namespace joined instead of a new one (proxy mode), and the mounts in the private mount
    namespace."""

    user: bool
    #: A new, empty network namespace (the network is off).
    net: bool
    #: Mount a fresh ``/proc`` (the host allows it).
    proc: bool
    #: Mapped to themselves in a new user namespace.
    uid: int
    gid: int
    mounts: Mounts
    #: ``(path, inode)``: join this network namespace before unsharing the others (proxy
    #: mode: the session's); the path must still name the namespace with that inode.
    join_net: tuple[str, int] | None = None


class LandlockRules(NamedTuple):
    """A Landlock ruleset: handled rights and scopes, and the ``(path, rights)`` grants."""

    fs: int
    net: int
    scoped: int
    grants: tuple[tuple[str, int], ...] = ()


class LaunchSpec(NamedTuple):
    """Every layer of one launch; ``None`` (or an empty filter) where it has none."""

    limits: Limits | None = None
    namespaces: Namespaces | None = None
    landlock: LandlockRules | None = None
    #: The raw BPF program, loaded last.
    seccomp: bytes | None = None


def encode(spec: LaunchSpec) -> bytes:
    """``spec`` as ``ChildSetup.payload`` (builtins only: see the module docstring)."""
    return pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL)


def decode(payload: bytes) -> LaunchSpec:
    """The ``LaunchSpec`` that ``encode`` made ``payload`` from."""
    spec = pickle.loads(payload)
    if not isinstance(spec, LaunchSpec):
        raise TypeError(f"a launch payload holds a LaunchSpec, not {type(spec).__name__}")
    return spec
