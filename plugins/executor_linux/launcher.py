"""Inside the forked child, before ``execve``: apply the Linux sandbox layers (STDLIB ONLY).

Called by the launcher server as ``run(payload, ctx)`` (see ``executor/spawn/child.py``), the
payload a ``launch_spec.LaunchSpec`` as ``launch_spec.encode`` made it. Layers, in this order:

0. **limits**, before anything else: join the command's cgroups, lower its rlimits
   (``rlimits.py``), so that every process the command becomes is counted and capped.
1. **namespaces** (when the host allows them): in proxy mode first *join* the session's
   network namespace (``setns``; before a user namespace could void the capability that
   needs), then unshare user (if not root), mount, PID, IPC and, with the network off,
   network. The child then forks: PID 1 of the new namespace applies the
   **mounts** and forks the command, forwards signals to it and exits with its status (the
   kernel then kills anything left in the namespace). The outer child relays that status.
2. after ``chdir``: **no_new_privs**, **Landlock** (paths are opened while capabilities
   still allow it), **capabilities dropped** (all sets), **seccomp** last — in PID 1 of the
   namespace, which then starts the command with ``posix_spawn`` (it inherits every layer),
   or, without namespaces, in the process that then becomes the command.
3. ``execve``.

Any failure ends the child through ``ctx.fail(stage, errno)``: the start request fails with a
message naming the layer, and nothing runs. Stages: ``limits``, ``network`` (joining the
session's network namespace), ``namespaces``, ``mounts``, ``landlock``, ``capabilities``,
``seccomp``.

``executor/spawn/sandbox.c`` is this module's twin in the native launcher (the default where
it is built; this one is the fallback): the same layers, order, stages and checks
(``observe.py``). A change here needs the same change there; the enforcement tests in
``tests/executor_linux`` run against both.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from executor_linux import landlock, observe, rlimits, syscalls
from executor_linux.launch_spec import LandlockRules, LaunchSpec, Namespaces, decode

#: Signals PID 1 forwards to the command's process group.
_FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
_IGNORED_ON_MISSING = (errno.ENOENT, errno.EINVAL)
_ALL_SIGNALS = tuple(s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP))


def run(payload: bytes, ctx: Any) -> None:
    """Apply the layers ``payload`` (an encoded ``LaunchSpec``) describes; run the command."""
    launch = decode(payload)
    ctx.run("limits", lambda: rlimits.enter(launch.limits))  # first: see rlimits.py
    namespaces = launch.namespaces
    if namespaces is None:
        _exec_confined(launch, ctx)
        return
    before = observe.namespace_inodes()
    if namespaces.join_net is not None:
        _join_network(namespaces.join_net, ctx)
    ctx.run("namespaces", lambda: _enter_namespaces(namespaces))
    os.setpgid(0, 0)  # our own group: the daemon signals it; PID 1 forwards to the command
    init = os.fork()
    if init == 0:
        _namespace_init(launch, namespaces, ctx, before)
        return
    os.close(ctx.error_fd)
    for signum in _FORWARDED:
        signal.signal(signum, signal.SIG_IGN)  # PID 1 is in our group and gets them itself
    os._exit(_wait_status(init))


def _join_network(join: tuple[str, int], ctx: Any) -> None:
    """Enter the session's network namespace, or fail the ``network`` stage.

    The path (a descriptor the daemon holds, seen through ``/proc``) must still name the
    namespace the daemon planned with: a closed session's descriptor number may since have
    been reused for anything else, another namespace included.
    """
    path, inode = join
    gone = f"the session's network namespace is gone ({path} no longer names namespace {inode})"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        ctx.fail("network", 0, f"{gone}: {exc.strerror}")
        return
    try:
        if os.fstat(fd).st_ino != inode:
            ctx.fail("network", 0, gone)
        ctx.run("network", lambda: syscalls.setns(fd, syscalls.CLONE_NEWNET))
    finally:
        os.close(fd)


def _enter_namespaces(spec: Namespaces) -> None:
    flags = syscalls.CLONE_NEWNS | syscalls.CLONE_NEWPID | syscalls.CLONE_NEWIPC
    if spec.net:
        flags |= syscalls.CLONE_NEWNET
    if spec.user:
        flags |= syscalls.CLONE_NEWUSER
    syscalls.unshare(flags)
    if spec.user:
        syscalls.write_file("/proc/self/setgroups", "deny")
        syscalls.write_file("/proc/self/uid_map", f"{spec.uid} {spec.uid} 1")
        syscalls.write_file("/proc/self/gid_map", f"{spec.gid} {spec.gid} 1")
        rlimits.in_user_namespace()  # RLIMIT_NPROC counts this sandbox only from here


def _namespace_init(
    launch: LaunchSpec, namespaces: Namespaces, ctx: Any, before: dict[str, int]
) -> None:
    """PID 1 of the new namespaces: mounts, confine itself, spawn the command, relay."""
    spec = ctx.spec
    ctx.run("mounts", lambda: _apply_mounts(namespaces, spec.tty))
    # Confining PID 1 itself, then spawning the command with posix_spawn (vfork), saves a
    # fork of this Python process; the command inherits every layer. PID 1 only waits and
    # forwards signals afterwards, which the layers allow.
    ctx.run("chdir", lambda: os.chdir(spec.cwd))
    _confine(launch, ctx, before)
    try:
        command = os.posix_spawn(
            spec.executable,
            spec.argv,
            spec.env,
            file_actions=_stdio_actions(spec.tty, namespaces.mounts.private_dev),
            setsid=True,
            setsigdef=_ALL_SIGNALS,
            setsigmask=(),
        )
    except OSError as exc:
        ctx.fail("exec", exc.errno or 0, exc.strerror or "")
        return
    except ValueError as exc:  # an embedded NUL byte
        ctx.fail("exec", errno.EINVAL, str(exc))
        return
    os.close(ctx.error_fd)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.killpg(command, signum)
        except OSError:
            pass

    for signum in _FORWARDED:
        signal.signal(signum, forward)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(255)
        if pid == command:
            os._exit(_exit_code(status))


def _stdio_actions(tty: bool, private_dev: bool) -> list[tuple[int | str, ...]]:
    """posix_spawn file actions: with a terminal, reopen it by name after ``setsid`` (glibc
    runs ``setsid`` before the file actions), which makes it the controlling terminal. In a
    private ``/dev`` the terminal is bound at ``/dev/console`` (its host name is not there)."""
    if not tty:
        return []
    name = _CONSOLE if private_dev else os.ttyname(0)
    return [
        (os.POSIX_SPAWN_OPEN, 0, name, os.O_RDWR, 0),
        (os.POSIX_SPAWN_DUP2, 0, 1),
        (os.POSIX_SPAWN_DUP2, 0, 2),
    ]


def _wait_status(pid: int) -> int:
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except InterruptedError:
            continue
        return _exit_code(status)


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


# --- mounts -----------------------------------------------------------------------------------


def _mountinfo() -> list[tuple[str, bool]]:
    """(mount point, read-only) of every mount, in mount order."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
        return [(point, readonly) for point, readonly, _kind in observe.mounts(handle.read())]


def _open_exact(path: str, *, link_ok: bool = False) -> int:
    """An O_PATH descriptor of ``path`` that refuses any symlink on the way (no swaps); with
    ``link_ok`` a symlink as the last component is the link itself (pins bind links too)."""
    import ctypes
    import struct

    flags = os.O_PATH | os.O_CLOEXEC | (os.O_NOFOLLOW if link_ok else 0)
    how = ctypes.create_string_buffer(struct.pack("=QQQ", flags, 0, 0x04), 24)
    return syscalls.syscall(syscalls.NR_OPENAT2, syscalls.AT_FDCWD, os.fsencode(path), how, 24)


def _apply_mounts(namespaces: Namespaces, tty: bool) -> None:
    plan = namespaces.mounts
    syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
    host_readonly = {point for point, readonly in _mountinfo() if readonly}
    empty_file = None
    empty_fd = -1
    if any(op in ("mask_file", "mask_socket") for op, _ in plan.operations):
        # Held open and bound through its descriptor: the staging directory lives in the
        # executor's state directory, which a later operation masks when it is visible.
        empty_fd = os.open(_staging_file(plan.staging), os.O_PATH | os.O_CLOEXEC)
        empty_file = f"/proc/self/fd/{empty_fd}"
    if plan.readonly_root:
        _readonly_everywhere()
    try:
        for op, path in plan.operations:
            _mount_one(op, path, empty_file, host_readonly)
    finally:
        if empty_fd >= 0:
            os.close(empty_fd)
    if plan.private_dev:
        _private_dev(plan.private_shm, tty)
    elif plan.private_shm and os.path.isdir("/dev/shm"):
        flags = syscalls.MS_NOSUID | syscalls.MS_NODEV
        syscalls.mount("tmpfs", "/dev/shm", "tmpfs", flags, "mode=1777")
    if namespaces.proc:
        flags = syscalls.MS_NOSUID | syscalls.MS_NODEV | syscalls.MS_NOEXEC
        # With a read-only root the fresh /proc is read-only too: no sysctl, no sysrq, no
        # /proc/self knob can be written (Landlock already refuses those writes there).
        readonly = plan.readonly_root
        syscalls.mount("proc", "/proc", "proc", flags | (syscalls.MS_RDONLY if readonly else 0))
        if plan.mask_proc:
            _mask_proc(readonly)


def _readonly_everywhere() -> None:
    """Every mount read-only: one recursive call, or mount by mount where the kernel refuses
    that (a mount that is gone or shadowed by a later one is skipped then)."""
    try:
        syscalls.mount_setattr("/", set_flags=syscalls.MOUNT_ATTR_RDONLY, recursive=True)
        return
    except OSError:
        pass
    for point, _readonly in _mountinfo():
        try:
            syscalls.mount_setattr(point, set_flags=syscalls.MOUNT_ATTR_RDONLY)
        except OSError as exc:
            if exc.errno not in _IGNORED_ON_MISSING:
                raise


# --- /dev and /proc ---------------------------------------------------------------------------

#: The host devices the private /dev holds (each bound from the host's node).
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_DEV_LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
)
_CONSOLE = "/dev/console"
#: /proc entries that show host-wide secrets or kernel internals: bound over by /dev/null
#: (files) or an empty read-only tmpfs (directories), as container runtimes do.
_PROC_MASKED_FILES = (
    "/proc/keys",
    "/proc/key-users",
    "/proc/kcore",
    "/proc/kallsyms",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/latency_stats",
)
#: Only writable settings: masked when /proc itself is not read-only.
_PROC_WRITABLE_FILES = ("/proc/sysrq-trigger",)
_PROC_MASKED_DIRS = ("/proc/acpi", "/proc/scsi", "/proc/asound")
#: /proc entries that write kernel-wide settings: read-only.
_PROC_READONLY = ("/proc/sys", "/proc/bus", "/proc/fs", "/proc/irq")


def _private_dev(private_shm: bool, tty: bool) -> None:
    """Replace /dev with a minimal one: the standard devices bound from the host, a private
    devpts instance (its own ptys only), /dev/shm, the fd links and, for a command with a
    terminal, that terminal at /dev/console. No other host device is reachable."""
    keep = {name: os.open(f"/dev/{name}", os.O_PATH | os.O_CLOEXEC) for name in _DEVICES}
    if tty:
        # By name in this namespace: a bind's source must be a mount of this namespace, and
        # the open descriptor's mount belongs to the parent's.
        keep["console"] = os.open(os.ttyname(0), os.O_PATH | os.O_CLOEXEC)
    shm = None if private_shm else os.open("/dev/shm", os.O_PATH | os.O_CLOEXEC)
    try:
        flags = syscalls.MS_NOSUID | syscalls.MS_NOEXEC
        syscalls.mount("tmpfs", "/dev", "tmpfs", flags, "mode=0755,size=64k,nr_inodes=64")
        for name, fd in keep.items():
            node = f"/dev/{name}"
            os.close(os.open(node, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o666))
            syscalls.mount(f"/proc/self/fd/{fd}", node, None, syscalls.MS_BIND)
        os.mkdir("/dev/pts", 0o755)
        flags = syscalls.MS_NOSUID | syscalls.MS_NOEXEC
        syscalls.mount("devpts", "/dev/pts", "devpts", flags, "newinstance,ptmxmode=0666,mode=620")
        os.mkdir("/dev/shm", 0o1777)
        if shm is None:
            flags = syscalls.MS_NOSUID | syscalls.MS_NODEV
            syscalls.mount("tmpfs", "/dev/shm", "tmpfs", flags, "mode=1777")
        else:
            syscalls.mount(
                f"/proc/self/fd/{shm}", "/dev/shm", None, syscalls.MS_BIND | syscalls.MS_REC
            )
        for name, target in _DEV_LINKS:
            os.symlink(target, f"/dev/{name}")
        syscalls.mount_setattr("/dev", set_flags=syscalls.MOUNT_ATTR_RDONLY)
    finally:
        for fd in (*keep.values(), *([] if shm is None else [shm])):
            os.close(fd)


def _mask_proc(readonly: bool) -> None:
    null = os.open("/dev/null", os.O_PATH | os.O_CLOEXEC)
    try:
        for path in _PROC_MASKED_FILES + (() if readonly else _PROC_WRITABLE_FILES):
            _mask_if_present(
                path, lambda p: syscalls.mount(f"/proc/self/fd/{null}", p, None, syscalls.MS_BIND)
            )
    finally:
        os.close(null)
    if not readonly:
        # Their entries are writable settings (acpi, scsi): a read-only /proc covers them.
        flags = syscalls.MS_RDONLY | syscalls.MS_NOSUID | syscalls.MS_NODEV | syscalls.MS_NOEXEC
        for path in _PROC_MASKED_DIRS:
            _mask_if_present(path, lambda p: syscalls.mount("tmpfs", p, "tmpfs", flags, "size=4k"))
        for path in _PROC_READONLY:
            _mask_if_present(path, _bind_readonly)


def _bind_readonly(path: str) -> None:
    syscalls.mount(path, path, None, syscalls.MS_BIND | syscalls.MS_REC)
    syscalls.mount_setattr(path, set_flags=syscalls.MOUNT_ATTR_RDONLY, recursive=True)


def _mask_if_present(path: str, mount: Any) -> None:
    """Entries a kernel config leaves out need no mask; any other failure fails the launch."""
    if os.path.lexists(path):
        mount(path)


def _staging_file(staging: str) -> str:
    flags = syscalls.MS_NOSUID | syscalls.MS_NODEV | syscalls.MS_NOEXEC
    syscalls.mount("tmpfs", staging, "tmpfs", flags, "mode=0700,size=16k")
    path = os.path.join(staging, "empty")
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0))
    os.chmod(path, 0)
    return path


def _mount_one(op: str, path: str, empty_file: str | None, host_readonly: set[str]) -> None:
    if op == "mask_socket":
        assert empty_file is not None
        _mask_socket(path, empty_file)
        return
    fd = _open_exact(path, link_ok=op == "pin")
    try:
        target = f"/proc/self/fd/{fd}"
        if op == "rw":
            syscalls.mount(target, target, None, syscalls.MS_BIND | syscalls.MS_REC)
            syscalls.mount_setattr(path, clear_flags=syscalls.MOUNT_ATTR_RDONLY, recursive=True)
            # Mounts below that the host itself has read-only stay read-only.
            for point in host_readonly:
                if point.startswith(path.rstrip("/") + "/"):
                    _set_readonly(point)
        elif op == "pin":
            # A mount point cannot be renamed, removed or replaced: the ground stays put.
            syscalls.mount(target, target, None, syscalls.MS_BIND | syscalls.MS_REC)
        elif op == "ro":
            syscalls.mount(target, target, None, syscalls.MS_BIND | syscalls.MS_REC)
            syscalls.mount_setattr(path, set_flags=syscalls.MOUNT_ATTR_RDONLY, recursive=True)
        elif op == "mask_dir":
            flags = syscalls.MS_RDONLY | syscalls.MS_NOSUID | syscalls.MS_NODEV | syscalls.MS_NOEXEC
            syscalls.mount("tmpfs", target, "tmpfs", flags, "mode=000,size=4k")
        elif op == "mask_file":
            assert empty_file is not None
            syscalls.mount(empty_file, target, None, syscalls.MS_BIND)
            syscalls.mount_setattr(path, set_flags=syscalls.MOUNT_ATTR_RDONLY)
        else:
            raise OSError(errno.EINVAL, f"unknown mount operation {op}")
    finally:
        os.close(fd)


def _mask_socket(path: str, empty_file: str) -> None:
    """Cover a host Unix socket with the empty mode-000 file: ``connect`` by that path then
    finds no socket (``EACCES`` without capabilities). Sockets come and go: one removed or
    replaced by a non-socket since planning has nothing left to reach, and is skipped; so is
    one this user cannot even look up (a directory on its path it may not search): the command,
    the same user without capabilities over host files, could not reach it either."""
    try:
        fd = _open_exact(path)
    except (FileNotFoundError, PermissionError):
        return
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return
        syscalls.mount(empty_file, f"/proc/self/fd/{fd}", None, syscalls.MS_BIND)
        syscalls.mount_setattr(path, set_flags=syscalls.MOUNT_ATTR_RDONLY)
    finally:
        os.close(fd)


def _set_readonly(point: str) -> None:
    try:
        syscalls.mount_setattr(point, set_flags=syscalls.MOUNT_ATTR_RDONLY)
    except OSError as exc:
        if exc.errno not in _IGNORED_ON_MISSING:
            raise


# --- the command process --------------------------------------------------------------------


def _exec_confined(launch: LaunchSpec, ctx: Any) -> None:
    """Without namespaces this process becomes the command: confine it just before execve."""
    ctx.before_exec = lambda: _confine(launch, ctx, None)
    ctx.exec()


def _confine(launch: LaunchSpec, ctx: Any, before: dict[str, int] | None) -> None:
    """no_new_privs, Landlock (paths opened while capabilities allow), capabilities, seccomp;
    then check from inside that each planned layer is in force (else the launch fails) and
    report what was observed."""
    observer = observe.Observer()
    ctx.run("no_new_privs", syscalls.set_no_new_privs)
    rules = launch.landlock
    if rules is not None:
        ctx.run("landlock", lambda: _apply_landlock(rules))
    ctx.run("capabilities", syscalls.drop_capabilities)
    program = launch.seccomp
    if program:
        ctx.run("seccomp", lambda: syscalls.load_seccomp(program))
    problems, observed = observer.verify(launch, before, landlock=rules is not None)
    observer.close()
    if problems:
        ctx.fail("verify", errno.EPERM, "planned but not in force: " + "; ".join(problems))
    ctx.report(observed)


def _apply_landlock(rules: LandlockRules) -> None:
    ruleset = landlock.Ruleset(rules.fs, rules.net, rules.scoped)
    try:
        for path, rights in rules.grants:
            try:
                ruleset.allow_path(path, rights)
            except FileNotFoundError:
                continue  # granting less than asked is safe; the path vanished since planning
    except BaseException:
        ruleset.close()
        raise
    ruleset.restrict_self()
