"""Runs INSIDE the sandbox: try every escape of the catalog and its allowed counterpart.

Usage: ``python3 escape_probe.py '<json config>'``; prints one JSON object mapping each probe
name to ``{"escape": <outcome>, "allowed": <outcome>}``, where an outcome is ``"ok"`` or the
name of the error (``EACCES``, ``EROFS``, ...). Every target is something the test created:
files in its own directories, its own listeners and its own processes. Probes that could
change the host (hostname, mounts) only run inside a private namespace the test set up.
Standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

Outcome = str
_libc = ctypes.CDLL(None, use_errno=True)


def attempt(action: Callable[[], object]) -> Outcome:
    """Run ``action``; ``ok`` or the errno name of its failure."""
    try:
        action()
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))
    except subprocess.CalledProcessError as exc:
        return f"exit {exc.returncode}"
    return "ok"


def write(path: str, text: str = "escaped\n") -> None:
    """Create or truncate ``path`` with ``text``."""
    with open(path, "w") as handle:
        handle.write(text)


def read(path: str) -> None:
    """Read ``path`` fully."""
    with open(path, "rb") as handle:
        handle.read()


def libc_call(name: str, *args: Any) -> None:
    """A raw libc call; raise OSError on -1."""
    if getattr(_libc, name)(*args) == -1:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def raw_syscall(number: int, *args: Any) -> None:
    """A raw system call; raise OSError on -1."""
    _libc.syscall.restype = ctypes.c_long
    if _libc.syscall(number, *args) == -1:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def tcp_connect(port: int) -> None:
    """Connect to a TCP listener on loopback."""
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def tcp_listen() -> None:
    """Bind and listen on a loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()


def udp_send(port: int) -> None:
    """Send one datagram to a loopback port."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"escaped", ("127.0.0.1", port))


def unix_connect(address: str) -> None:
    """Connect to a Unix socket (a leading NUL means an abstract name)."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(2)
        sock.connect(address.replace("@", "\0", 1) if address.startswith("@") else address)
        sock.sendall(b"escaped")


def socketpair_roundtrip() -> None:
    """Traffic over a socketpair stays inside the sandbox and must work."""
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"ping")
        if right.recv(4) != b"ping":
            raise OSError(errno.EIO, "socketpair lost data")


def own_child_signal() -> None:
    """Signalling our own child is allowed."""
    child = subprocess.Popen(["sleep", "30"])
    child.send_signal(signal.SIGTERM)
    child.wait(timeout=5)


def ptrace_attach(pid: int) -> None:
    """PTRACE_ATTACH to ``pid``."""
    libc_call("ptrace", ctypes.c_long(16), ctypes.c_long(pid), None, None)


def io_uring_setup() -> None:
    """io_uring_setup(2) with a small ring."""
    params = ctypes.create_string_buffer(120)
    raw_syscall(425, 4, params)


def nested_userns() -> None:
    """A nested user namespace (to remount a protected path writable)."""
    subprocess.run(["unshare", "-Ur", "true"], check=True, capture_output=True, timeout=10)


CLONE_NEWUSER = 0x10000000
#: clone(2)'s number: ``unshare`` (the tool and the call) is refused by its own rule, so only
#: a direct clone with a namespace flag reaches seccomp's clone-flags rule.
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}


def clone_flags(flags: int) -> None:
    """clone(2) with ``flags`` | SIGCHLD, like fork; the child (if any) exits at once."""
    number = _SYS_CLONE[platform.machine()]
    _libc.syscall.restype = ctypes.c_long
    pid = _libc.syscall(ctypes.c_long(number), ctypes.c_ulong(flags | signal.SIGCHLD), 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)  # the child: nothing of ours may run here
    if pid == -1:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    _reap(pid)


def plain_fork() -> None:
    """fork(2) (clone without namespace flags) must keep working."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    _reap(pid)


def _reap(pid: int) -> None:
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise OSError(errno.ECHILD, f"child exited with {status}")


def change_own_file(change: Callable[[str], object], scratch: str | None, name: str) -> None:
    """``change`` applied to a file this command made, where it may write.

    With a writable workspace the file lies there. The read-only profile leaves no place on
    disk to write, so it is the command's own anonymous file (a memfd) changed by path
    through ``/proc/self/fd``: the same system calls, past the same seccomp filter and
    capabilities, on a file no profile protects. (Without a mount namespace the backend
    refuses these calls everywhere, documented: there this reports ``EPERM``.)
    """
    if scratch is not None:
        path = os.path.join(scratch, name)
        write(path, "own file\n")
        change(path)
        return
    fd = os.memfd_create(name)
    try:
        change(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def set_hostname(name: str) -> None:
    """sethostname(2); only ever run inside a private UTS namespace set up by the test."""
    encoded = name.encode()
    libc_call("sethostname", encoded, len(encoded))


def tmpfs_mount(target: str) -> None:
    """mount(2) a tmpfs; only ever run inside a private mount namespace set up by the test."""
    libc_call("mount", b"none", target.encode(), b"tmpfs", ctypes.c_ulong(0), None)


def probes(cfg: dict[str, Any]) -> dict[str, dict[str, Outcome]]:
    """Every escape and its allowed counterpart."""
    ws, out = cfg["workspace"], cfg["outside"]
    writable = cfg["workspace_writable"]
    inside_target = os.path.join(ws, "inside-ok.txt") if writable else os.path.join(ws, "seed.txt")
    inside_action: Callable[[], object] = (
        (lambda: write(inside_target)) if writable else (lambda: read(inside_target))
    )
    results: dict[str, dict[str, Outcome]] = {}

    def probe(name: str, escape: Callable[[], object], allowed: Callable[[], object]) -> None:
        results[name] = {"escape": attempt(escape), "allowed": attempt(allowed)}

    probe(
        "write_outside",
        lambda: write(os.path.join(out, "new.txt")),
        lambda: read(os.path.join(out, "seed.txt")),
    )
    probe("overwrite_outside", lambda: write(os.path.join(out, "seed.txt")), inside_action)
    probe(
        "read_denied", lambda: read(cfg["denied_file"]), lambda: read(os.path.join(out, "seed.txt"))
    )
    probe(
        "dotdot",
        lambda: write(os.path.join(ws, "..", os.path.basename(out), "dotdot.txt")),
        lambda: read(os.path.join(ws, "sub", "..", "seed.txt")),
    )
    probe(
        "symlink_out",
        lambda: write(os.path.join(ws, "link-out", "via-link.txt")),
        lambda: read(os.path.join(ws, "link-out", "seed.txt")),
    )

    def create_and_follow() -> None:
        link = os.path.join(ws, "fresh-link")
        os.symlink(out, link)  # read-only: this already fails, and that is the escape failing
        write(os.path.join(link, "f.txt"))

    probe(
        "create_symlink",
        create_and_follow,
        (lambda: os.symlink("seed.txt", os.path.join(ws, "inner-link")))
        if writable
        else inside_action,
    )
    probe(
        "hardlink_in",
        lambda: os.link(os.path.join(out, "seed.txt"), os.path.join(ws, "hardlink.txt")),
        (lambda: os.link(os.path.join(ws, "seed.txt"), os.path.join(ws, "hardlink-inner.txt")))
        if writable
        else inside_action,
    )
    probe(
        "rename_out",
        lambda: os.rename(os.path.join(ws, "movable.txt"), os.path.join(out, "moved-out.txt")),
        (lambda: os.rename(os.path.join(ws, "movable.txt"), os.path.join(ws, "moved.txt")))
        if writable
        else inside_action,
    )
    probe(
        "rename_in",
        lambda: os.rename(os.path.join(out, "seed.txt"), os.path.join(ws, "moved-in.txt")),
        inside_action,
    )
    probe(
        "proc_self_root",
        lambda: write("/proc/self/root" + os.path.join(out, "proc-self.txt")),
        lambda: read("/proc/self/root" + os.path.join(ws, "seed.txt")),
    )
    probe(
        "proc_1_root",
        lambda: write("/proc/1/root" + os.path.join(out, "proc-1.txt")),
        inside_action,
    )
    probe(
        "proc_pid_root",
        lambda: write(f"/proc/{cfg['peer_pid']}/root" + os.path.join(out, "proc-pid.txt")),
        inside_action,
    )
    target = os.path.join(out, "meta.txt")
    scratch = ws if writable else None
    metadata: dict[str, Callable[[str], object]] = {
        "chmod": lambda path: os.chmod(path, 0o777),
        # Giving a file away needs CAP_CHOWN; a command may only "change" it to itself.
        "chown": lambda path: os.chown(path, os.getuid(), os.getgid()),
        "utime": lambda path: os.utime(path, (0, 0)),
        "setxattr": lambda path: os.setxattr(path, "user.escaped", b"1"),
    }
    for name, change in metadata.items():
        escape: Callable[[], object] = partial(change, target)
        if name == "chown":
            escape = partial(os.chown, target, 65534, 65534)  # giving the file away
        probe(name, escape, partial(change_own_file, change, scratch, f"own-{name}.txt"))
    if cfg.get("private_uts"):
        probe("sethostname", lambda: set_hostname("escaped"), lambda: socket.gethostname())
    if cfg.get("private_mounts"):
        probe(
            "mount",
            lambda: tmpfs_mount(os.path.join(ws, "sub")),
            lambda: os.listdir(os.path.join(ws, "sub")),
        )
    git = os.path.join(ws, ".git")
    probe(
        "git_write",
        lambda: write(os.path.join(git, "config")),
        lambda: read(os.path.join(git, "config")),
    )
    probe(
        "git_hooks",
        lambda: write(os.path.join(git, "hooks", "pre-commit")),
        lambda: os.listdir(os.path.join(git, "hooks")),
    )
    probe(
        "mkdir_codex",
        lambda: (
            os.mkdir(os.path.join(ws, ".codex", "x"))
            if os.path.isdir(os.path.join(ws, ".codex"))
            else os.mkdir(os.path.join(ws, ".codex"))
        ),
        (lambda: os.mkdir(os.path.join(ws, "codex-like"))) if writable else inside_action,
    )
    probe("rename_git", lambda: os.rename(git, os.path.join(ws, ".git-moved")), inside_action)
    probe("tcp_connect", lambda: tcp_connect(cfg["tcp_port"]), socketpair_roundtrip)
    probe("tcp_listen", tcp_listen, socketpair_roundtrip)
    probe("udp_send", lambda: udp_send(cfg["udp_port"]), socketpair_roundtrip)
    probe("unix_pathname", lambda: unix_connect(cfg["unix_path"]), socketpair_roundtrip)
    probe("unix_abstract", lambda: unix_connect(cfg["unix_abstract"]), socketpair_roundtrip)
    probe("signal_host", lambda: os.kill(cfg["victim_pid"], signal.SIGTERM), own_child_signal)
    probe(
        "proc_environ",
        lambda: read(f"/proc/{cfg['peer_pid']}/environ"),
        lambda: read("/proc/self/environ"),
    )
    probe("ptrace", lambda: ptrace_attach(cfg["peer_pid"]), lambda: read("/proc/self/status"))
    probe("io_uring", io_uring_setup, lambda: read("/proc/self/status"))
    probe("nested_userns", nested_userns, lambda: subprocess.run(["true"], check=True, timeout=10))
    probe("clone_newuser", lambda: clone_flags(CLONE_NEWUSER), plain_fork)
    shm = os.path.join("/dev/shm", cfg["shm_name"])

    def shm_roundtrip() -> None:
        write(shm, "private\n")
        with open(shm) as handle:
            if handle.read() != "private\n":
                raise OSError(errno.EIO, "a different file was read back")

    probe("dev_shm", shm_roundtrip, lambda: read("/dev/null"))
    results["hostname_after"] = {"escape": socket.gethostname(), "allowed": "ok"}
    results["uid"] = {"escape": str(os.getuid()), "allowed": "ok"}
    return results


if __name__ == "__main__":
    print(json.dumps(probes(json.loads(sys.argv[1]))))
