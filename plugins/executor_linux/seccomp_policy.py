"""The seccomp filters, built once in the daemon with libseccomp and shipped as raw BPF.

pyseccomp (libseccomp) builds correct filters for every architecture — the architecture
check, x32 aliases, argument comparisons — but importing it costs ~20 ms, so the daemon
compiles each filter once (``export_bpf``) and the launcher loads the bytes with ``prctl``.

Denied calls fail with ``EPERM``; a foreign architecture kills the process (SIGSYS).

Always denied: debugging other processes (``ptrace``, ``process_vm_*``), ``io_uring`` (its
operations bypass seccomp), namespace and mount escapes (``unshare``, ``setns``, ``mount``,
``pivot_root``, the new mount API, ``clone`` with namespace flags; ``clone3`` answers
``ENOSYS`` so libc falls back to ``clone``, whose flags we can inspect), kernel attack surface
(``bpf``, ``perf_event_open``, ``userfaultfd``, keyrings, modules, ``kexec``), host identity
(``sethostname``, ``setdomainname``) and ``AF_VSOCK`` sockets (they reach host services).

Network restricted: ``socket`` only for ``AF_UNIX`` stream/seqpacket sockets, and no
``connect``, ``bind``, ``listen`` or ``accept``, so no connection can leave the sandbox — not
over IP, not to a host Unix socket (pathname or abstract). Unlike the reference we keep
``sendto``/``sendmsg``/``getsockopt``/... : on the only sockets that can exist (socketpairs and
unconnected stream sockets) they cannot reach anything outside, and socketpair traffic works.
``AF_UNIX`` datagram sockets are refused because ``sendto`` could address a host socket.

Metadata locked (only when no mount namespace backs the filesystem rules): Landlock does not
govern ``chmod``, ``chown``, ``utime`` or extended attributes, so without read-only mounts
these calls are refused everywhere — also inside writable roots, which is stricter than the
profile asks but never weaker. ``utimensat`` with no times (``touch``) stays allowed; it can
only set a file's times to "now".
"""

from __future__ import annotations

import errno
import os
import socket
import tempfile
from functools import cache
from typing import Any

__all__ = ["ALWAYS_DENIED", "METADATA_DENIED", "NETWORK_DENIED", "compile_filter"]

ALWAYS_DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "open_by_handle_at",
    "name_to_handle_at",
    "lookup_dcookie",
    "quotactl",
    "swapon",
    "swapoff",
    "acct",
    "reboot",
    "sethostname",
    "setdomainname",
    "syslog",
    "iopl",
    "ioperm",
)
NETWORK_DENIED = ("connect", "bind", "listen", "accept", "accept4")
METADATA_DENIED = (
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "utime",
    "utimes",
    "futimesat",
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "setxattrat",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "removexattrat",
)
_NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)
_SOCK_TYPE_MASK = 0xF
_AF_VSOCK = 40


def _deny(f: Any, seccomp: Any, name: str, *args: Any, error: int = errno.EPERM) -> None:
    try:
        f.add_rule(seccomp.ERRNO(error), name, *args)
    except (OSError, ValueError, RuntimeError):
        pass  # not a system call on this architecture


def _import_pyseccomp() -> Any:
    """Import pyseccomp even where ``ctypes.util.find_library`` cannot see libseccomp.

    pyseccomp locates the library with ``find_library``, which needs an ld.so cache or the
    development symlink; minimal hosts have neither, yet the runtime soname loads fine.
    """
    import ctypes.util

    original = ctypes.util.find_library

    def find(name: str) -> str | None:
        found = original(name)
        return "libseccomp.so.2" if found is None and name == "seccomp" else found

    ctypes.util.find_library = find
    try:
        import pyseccomp
    finally:
        ctypes.util.find_library = original
    return pyseccomp


@cache
def compile_filter(network_restricted: bool, lock_metadata: bool = False) -> bytes:
    """The raw BPF program for the network mode (built once per daemon and variant)."""
    seccomp = _import_pyseccomp()  # imported late: it costs ~20 ms and only the daemon needs it

    f = seccomp.SyscallFilter(seccomp.ALLOW)
    f.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)
    for name in ALWAYS_DENIED:
        _deny(f, seccomp, name)
    _deny(f, seccomp, "clone3", error=errno.ENOSYS)
    for flag in _NAMESPACE_FLAGS:
        _deny(f, seccomp, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    _deny(f, seccomp, "socket", seccomp.Arg(0, seccomp.EQ, _AF_VSOCK))
    _deny(f, seccomp, "socketpair", seccomp.Arg(0, seccomp.EQ, _AF_VSOCK))
    if network_restricted:
        for name in NETWORK_DENIED:
            _deny(f, seccomp, name)
        _deny(f, seccomp, "socket", seccomp.Arg(0, seccomp.NE, socket.AF_UNIX))
        _deny(
            f,
            seccomp,
            "socket",
            seccomp.Arg(0, seccomp.EQ, socket.AF_UNIX),
            seccomp.Arg(1, seccomp.MASKED_EQ, _SOCK_TYPE_MASK, socket.SOCK_DGRAM),
        )
        _deny(f, seccomp, "socketpair", seccomp.Arg(0, seccomp.NE, socket.AF_UNIX))
    if lock_metadata:
        for name in METADATA_DENIED:
            _deny(f, seccomp, name)
        _deny(f, seccomp, "utimensat", seccomp.Arg(2, seccomp.NE, 0))
    with tempfile.TemporaryFile() as handle:
        f.export_bpf(handle)
        handle.seek(0)
        return handle.read()


def available() -> str | None:
    """None when filters can be built here, else why not."""
    try:
        compile_filter(True)
    except OSError as exc:
        return f"libseccomp failed: {exc}"
    except (ImportError, AttributeError, RuntimeError) as exc:
        return f"pyseccomp/libseccomp unavailable: {exc}"
    if not os.path.exists("/proc/self/status"):
        return "no /proc"
    return None
