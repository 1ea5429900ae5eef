"""A ``LaunchSpec`` in the native launcher's encoding (``executor/spawn/sandbox.c``).

The native launcher applies the same layers as ``launcher.py``, in C; this is what the daemon
hands it instead of a pickle: ``b"EXS"`` and the version byte, then one record per value,
each a tag byte, a 4-byte big-endian length and the value. Integers are big-endian (``u32``,
``u64``; ``i64`` two's complement), paths their bytes (absolute, no NUL). Records:

======  =============================  ===========================================
tag     record                         value
======  =============================  ===========================================
1       cgroup to join (repeated)      path of the file ``0`` is written to
2       rlimit (repeated)              u32 resource number, u64 value
3       RLIMIT_NPROC in the user ns    u64
4       oom_score_adj                  i64
10      namespaces                     u8 user, u8 net, u8 proc, u32 uid, u32 gid
11      network namespace to join      u64 inode, path
12      staging directory              path
13      mount flags                    u8 readonly_root, private_shm, private_dev, mask_proc
14      mount operation (repeated)     u8 op (``w`` rw, ``r`` ro, ``p`` pin, ``d`` mask_dir,
                                       ``f`` mask_file, ``s`` mask_socket), path
20      Landlock ruleset               u64 handled fs, u64 handled net, u64 scoped
21      Landlock grant (repeated)      u64 rights, path
30      seccomp program                the raw classic-BPF program, compiled in the daemon
======  =============================  ===========================================

Repeated records keep their order (mounts apply in it). The launcher refuses a spec with a
record or version it does not know, so nothing planned is ever dropped silently; ``encode``
returns ``None`` for a spec it cannot express (the Python launcher then runs it).
"""

from __future__ import annotations

import resource
import struct

from executor_linux.launch_spec import LaunchSpec

__all__ = ["VERSION", "encode"]

#: The encoding's version: the native launcher names the one it reads in its usage text.
VERSION = 1

_OPS = {
    "rw": b"w",
    "ro": b"r",
    "pin": b"p",
    "mask_dir": b"d",
    "mask_file": b"f",
    "mask_socket": b"s",
}


class _Unsupported(Exception):
    """Something the native encoding cannot carry."""


def _path(path: str) -> bytes:
    raw = path.encode("utf-8", "surrogateescape")
    if not raw.startswith(b"/") or b"\0" in raw:
        raise _Unsupported(path)
    return raw


def _record(tag: int, value: bytes) -> bytes:
    return struct.pack(">BI", tag, len(value)) + value


def encode(spec: LaunchSpec) -> bytes | None:
    """``spec`` for the native launcher, or ``None`` when it cannot be expressed there."""
    try:
        return _encode(spec)
    except (_Unsupported, struct.error, AttributeError):
        return None


def _encode(spec: LaunchSpec) -> bytes:
    parts = [b"EXS", bytes([VERSION])]
    limits = spec.limits
    if limits is not None:
        parts += [_record(1, _path(join)) for join in limits.cgroups]
        for name, value in limits.rlimits:
            if not name.startswith("RLIMIT_"):
                raise _Unsupported(name)
            parts.append(_record(2, struct.pack(">IQ", getattr(resource, name), value)))
        if limits.nproc_in_user_namespace is not None:
            parts.append(_record(3, struct.pack(">Q", limits.nproc_in_user_namespace)))
        if limits.oom_score_adj is not None:
            parts.append(_record(4, struct.pack(">q", limits.oom_score_adj)))
    namespaces = spec.namespaces
    if namespaces is not None:
        flags = (namespaces.user, namespaces.net, namespaces.proc)
        parts.append(
            _record(10, struct.pack(">3BII", *map(int, flags), namespaces.uid, namespaces.gid))
        )
        if namespaces.join_net is not None:
            path, inode = namespaces.join_net
            parts.append(_record(11, struct.pack(">Q", inode) + _path(path)))
        mounts = namespaces.mounts
        parts.append(_record(12, _path(mounts.staging)))
        mount_flags = (mounts.readonly_root, mounts.private_shm, mounts.private_dev)
        parts.append(_record(13, bytes([*map(int, mount_flags), int(mounts.mask_proc)])))
        for op, path in mounts.operations:
            code = _OPS.get(op)
            if code is None:
                raise _Unsupported(op)
            parts.append(_record(14, code + _path(path)))
    rules = spec.landlock
    if rules is not None:
        parts.append(_record(20, struct.pack(">QQQ", rules.fs, rules.net, rules.scoped)))
        parts += [_record(21, struct.pack(">Q", rights) + _path(p)) for p, rights in rules.grants]
    if spec.seccomp:
        if len(spec.seccomp) % 8 or len(spec.seccomp) > 4096 * 8:
            raise _Unsupported("seccomp program size")
        parts.append(_record(30, spec.seccomp))
    return b"".join(parts)
