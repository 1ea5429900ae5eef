"""The seccomp filters, built once in the daemon with libseccomp and shipped as raw BPF.

pyseccomp (libseccomp) builds correct filters for every architecture — the architecture
check, x32 aliases, argument comparisons — but importing it costs ~20 ms, so the daemon
compiles each filter once (``export_bpf``) and the launcher loads the bytes with ``prctl``.

Denied calls fail with ``EPERM`` (so a refused socket reads "Operation not permitted", which
also marks the exit as a sandbox denial); a foreign architecture kills the process (SIGSYS).

Always denied: debugging other processes (``ptrace``, ``process_vm_*``), ``io_uring`` (its
operations bypass seccomp), namespace and mount escapes (``unshare``, ``setns``, ``mount``,
``pivot_root``, the new mount API, ``clone`` with namespace flags; ``clone3`` answers
``ENOSYS`` so libc falls back to ``clone``, whose flags we can inspect), kernel attack surface
(``bpf``, ``perf_event_open``, ``userfaultfd``, keyrings, modules, ``kexec``), host identity
(``sethostname``, ``setdomainname``), and three ``ioctl`` requests: ``TIOCSTI`` (types into a
terminal's input), ``TIOCLINUX`` (console selection and input) and ``USERFAULTFD_IOC_NEW``
(``/dev/userfaultfd`` would hand out the userfaultfd that ``userfaultfd(2)`` is denied for).
``ioctl``'s request is an ``unsigned int`` to the kernel, so only its low 32 bits are compared:
a caller cannot slip past by setting the high bits of the register.

Sockets are decided by an allow-list of address families (and, with the network off, of
socket types) for ``socket`` and ``socketpair`` alike; everything else is refused:

* network off: ``AF_UNIX`` with type ``SOCK_STREAM`` or ``SOCK_SEQPACKET`` only (the type is
  compared without ``SOCK_NONBLOCK``/``SOCK_CLOEXEC``). No datagram socket of any family can
  exist — note that the kernel turns ``AF_UNIX``/``SOCK_RAW`` into a datagram socket, so a
  deny-list of ``SOCK_DGRAM`` is not enough. ``connect``, ``bind``, ``listen`` and ``accept``
  are denied, so the only sockets are socketpairs and unconnected stream sockets. That is what
  makes ``sendto``/``sendmsg`` safe to keep: the kernel never routes an address given to a
  stream or seqpacket socket (``unix_stream_sendmsg`` fails with ``EISCONN``/``EOPNOTSUPP``,
  ``unix_seqpacket_sendmsg`` needs a connected socket and drops the address), so every send
  goes to the socketpair's own peer — and a descriptor passed with ``SCM_RIGHTS`` can only
  travel between two ends that both live in the sandbox. Nothing reaches a host socket,
  pathname or abstract.
* network on: the families ``AF_UNIX``, ``AF_INET``, ``AF_INET6`` and ``AF_NETLINK`` (glibc's
  ``getaddrinfo`` asks the kernel's routing netlink which addresses exist), any type. The
  rest — ``AF_VSOCK`` (host services), ``AF_PACKET``, ``AF_ALG``, ``AF_BLUETOOTH``, ... — is
  kernel attack surface or a way around the host's network rules.
* network proxied (the session's private network namespace, only ``lo`` up): the same
  families; without local binding ``listen`` is refused too. It takes only a descriptor, so
  this refuses listening Unix stream sockets as well, not only TCP ones.

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
import termios
from functools import cache
from typing import Any

__all__ = [
    "ALWAYS_DENIED",
    "DENIED_IOCTLS",
    "METADATA_DENIED",
    "NETWORK_DENIED",
    "NETWORK_FAMILIES",
    "RESTRICTED_SOCKET_TYPES",
    "compile_filter",
]

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
#: ``(pid, ...)`` calls that change another process's scheduling (see ``shared_pids``).
OTHER_PROCESS_SETTERS = (
    "sched_setaffinity",
    "sched_setscheduler",
    "sched_setparam",
    "sched_setattr",
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
#: The kernel's SOCK_TYPE_MASK: the type without SOCK_NONBLOCK/SOCK_CLOEXEC (any other bit
#: makes socket(2) fail with EINVAL before a socket exists).
_SOCK_TYPE_MASK = 0xF
#: Network off: the only sockets, AF_UNIX ones that cannot carry an address.
RESTRICTED_SOCKET_TYPES = frozenset({socket.SOCK_STREAM, socket.SOCK_SEQPACKET})
#: Network on: the families a networked program needs.
NETWORK_FAMILIES = frozenset({socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK})
_LOW_32_BITS = 0xFFFF_FFFF
#: (request, mask) pairs: ``ioctl(fd, request & mask)`` is refused. TIOCSTI and TIOCLINUX
#: come from ``termios``, which holds this architecture's values (0x5412 and 0x541C on the
#: generic encoding). USERFAULTFD_IOC_NEW is ``_IO(0xAA, 0)``; its direction and size bits
#: differ between architectures, so it is matched on type and number alone (0xAA 0x00-0x3F
#: is reserved to userfaultfd in the kernel's ioctl-number list).
DENIED_IOCTLS = (
    (termios.TIOCSTI, _LOW_32_BITS),
    (termios.TIOCLINUX, _LOW_32_BITS),
    (0xAA00, 0xFFFF),  # USERFAULTFD_IOC_NEW
)


def _deny(f: Any, seccomp: Any, name: str, *args: Any, error: int = errno.EPERM) -> None:
    """Deny ``name`` where it exists (some calls are missing on some architectures)."""
    try:
        f.add_rule(seccomp.ERRNO(error), name, *args)
    except (OSError, ValueError, RuntimeError):
        pass  # not a system call on this architecture


def _deny_required(f: Any, seccomp: Any, name: str, *args: Any) -> None:
    """Deny ``name``; a rule libseccomp cannot build fails the filter instead of vanishing."""
    f.add_rule(seccomp.ERRNO(errno.EPERM), name, *args)


def _deny_other_families(f: Any, seccomp: Any, name: str, allowed: frozenset[int]) -> None:
    """Refuse every address family outside ``allowed`` (argument 0 of socket/socketpair).

    Rules can only deny, so the allow-list becomes: everything above the largest allowed
    family, and each value below it that is not allowed. A family added to a future kernel
    is therefore refused too.
    """
    top = max(allowed)
    _deny_required(f, seccomp, name, seccomp.Arg(0, seccomp.GT, top))
    for family in range(top):
        if family not in allowed:
            _deny_required(f, seccomp, name, seccomp.Arg(0, seccomp.EQ, family))


def _deny_other_types(f: Any, seccomp: Any, name: str, allowed: frozenset[int]) -> None:
    """Refuse every socket type outside ``allowed`` (argument 1, flags masked off)."""
    for sock_type in range(_SOCK_TYPE_MASK + 1):
        if sock_type not in allowed:
            arg = seccomp.Arg(1, seccomp.MASKED_EQ, _SOCK_TYPE_MASK, sock_type)
            _deny_required(f, seccomp, name, arg)


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


#: ``SCMP_FLTATR_CTL_OPTIMIZE`` value for a binary search on the syscall number (libseccomp
#: 2.5+; the default, 1, tests the numbers one after another in the order they were added).
_BINARY_TREE = 2


def _dispatch_by_binary_search(f: Any, seccomp: Any) -> None:
    """Find the syscall number's rules by a binary search instead of a linear chain.

    Same decisions, fewer instructions per call. It matters most when the filter is loaded:
    the kernel then runs the program for every syscall number of the architecture (to learn
    which are always allowed): the chain of ~90 comparisons took ~110 us per sandboxed
    launch to load, the tree takes ~65 us. A libseccomp older than 2.5 has only the chain.
    """
    try:
        f.set_attr(seccomp.Attr.CTL_OPTIMIZE, _BINARY_TREE)
    except OSError:
        pass  # the chain: slower to load, same decisions


@cache
def compile_filter(
    network_restricted: bool,
    lock_metadata: bool = False,
    shared_pids: bool = False,
    deny_listen: bool = False,
    *,
    linear: bool = False,
) -> bytes:
    """The raw BPF program for the network mode (built once per daemon and variant).

    ``linear``: libseccomp's plain chain of comparisons rather than the binary search (the
    reference the tests compare the search against; nothing else wants it).

    ``deny_listen``: ``listen`` fails with ``EPERM`` (a proxied command without local
    binding); implied when ``network_restricted``.

    ``shared_pids``: the command shares the host's PID namespace (no namespaces here), so a
    process ID may name a host process of the same user, whose limits, priority or CPU
    placement the kernel lets a same-uid caller change without any capability. Those calls
    are then allowed on the caller itself only (pid 0); reading stays allowed.
    """
    seccomp = _import_pyseccomp()  # imported late: it costs ~20 ms and only the daemon needs it

    f = seccomp.SyscallFilter(seccomp.ALLOW)
    f.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)
    if not linear:
        _dispatch_by_binary_search(f, seccomp)
    for name in ALWAYS_DENIED:
        _deny(f, seccomp, name)
    _deny(f, seccomp, "clone3", error=errno.ENOSYS)
    for flag in _NAMESPACE_FLAGS:
        _deny(f, seccomp, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    for request, mask in DENIED_IOCTLS:
        _deny_required(f, seccomp, "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, mask, request))
    for name in ("socket", "socketpair"):
        if network_restricted:
            _deny_other_families(f, seccomp, name, frozenset({socket.AF_UNIX}))
            _deny_other_types(f, seccomp, name, RESTRICTED_SOCKET_TYPES)
        else:
            _deny_other_families(f, seccomp, name, NETWORK_FAMILIES)
    if network_restricted:
        for name in NETWORK_DENIED:
            _deny(f, seccomp, name)
    elif deny_listen:
        _deny_required(f, seccomp, "listen")
    if shared_pids:
        _deny(f, seccomp, "prlimit64", seccomp.Arg(0, seccomp.NE, 0), seccomp.Arg(2, seccomp.NE, 0))
        for name in OTHER_PROCESS_SETTERS:
            _deny(f, seccomp, name, seccomp.Arg(0, seccomp.NE, 0))
        # setpriority/ioprio_set(which, who): only "this process" (PRIO_PROCESS = 0,
        # IOPRIO_WHO_PROCESS = 1; who 0); a user or group target reaches host processes.
        for name, this_process in (("setpriority", 0), ("ioprio_set", 1)):
            _deny(f, seccomp, name, seccomp.Arg(0, seccomp.NE, this_process))
            _deny(f, seccomp, name, seccomp.Arg(1, seccomp.NE, 0))
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
    except (ImportError, AttributeError, RuntimeError, ValueError) as exc:
        return f"pyseccomp/libseccomp unavailable: {exc}"
    if not os.path.exists("/proc/self/status"):
        return "no /proc"
    return None
