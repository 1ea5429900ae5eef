"""The launcher server: a small, single-threaded process that forks every command.

STDLIB ONLY; started by the daemon as ``python -I -S /abs/path/zygote.py <control-fd>``.
Forking here instead of in the daemon keeps ``execve`` off the daemon's event loop, is safe
(no threads, a small heap), lets backends run setup code between fork and exec without
``preexec_fn``, and costs a fraction of starting a fresh interpreter per command.

For each request the server forks a **supervisor** and forgets it (SIGCHLD is ignored, so
supervisors are reaped by the kernel). The supervisor makes itself a child subreaper, forks
the **command** and reports on the status pipe the daemon gave it, one line each:

* ``S <pid> <supervisor>`` the command started (its ``execve`` succeeded); signals go to group
  ``<pid>``; the command's whole tree lives under ``<supervisor>``;
* ``E <stage> <errno> <detail>`` the child failed before ``execve`` (nothing ran);
* ``X <wait status>`` the command exited (sent the moment it exits, pipes or not);

then EOF once the command *and every descendant* are gone: because the supervisor is a
subreaper, descendants that escape with ``setsid`` or double forks stay in its subtree, where
the daemon can find and kill them. If the launcher server dies (daemon gone), each
supervisor gets SIGTERM and kills its whole tree.

Wire format of a request on the control socket: 4-byte big-endian length, then a pickled
dict of builtins; the descriptors ``[status, stdin, stdout, stderr]`` ride on the first byte.
"""

from __future__ import annotations

import array
import importlib.util
import os
import pickle
import signal
import socket
import struct
import sys
from types import ModuleType
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_MAX_FDS = 8


def _load_path(path: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


child = _load_path(os.path.join(_HERE, "child.py"), "executor_spawn_child")
treekill = _load_path(os.path.join(_HERE, "treekill.py"), "executor_spawn_treekill")
_modules: dict[str, ModuleType] = {}


if sys.platform.startswith("linux"):
    import ctypes

    # Looked up once: every supervisor calls it, and loading libc per call costs ~0.5 ms.
    _libc_prctl = ctypes.CDLL(None, use_errno=True).prctl
else:  # pragma: no cover - macOS has no prctl
    _libc_prctl = None


def _prctl(option: int, value: int) -> None:
    if _libc_prctl is not None:
        _libc_prctl(option, value, 0, 0, 0)


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        part = sock.recv(size - len(data))
        if not part:
            raise EOFError
        data += part
    return bytes(data)


def _recv_request(sock: socket.socket) -> tuple[dict[str, Any], list[int]]:
    fds = array.array("i")
    header, ancillary, _flags, _addr = sock.recvmsg(4, socket.CMSG_SPACE(_MAX_FDS * fds.itemsize))
    if not header:
        raise EOFError
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    header += _recv_exact(sock, 4 - len(header))
    (length,) = struct.unpack(">I", header)
    request: dict[str, Any] = pickle.loads(_recv_exact(sock, length))
    return request, list(fds)


def _report(fd: int, line: str) -> None:
    try:
        os.write(fd, line.encode("utf-8", "replace"))
    except OSError:
        pass


def _kill_tree(_signum: int, _frame: object) -> None:
    """SIGTERM (the launcher server died: the daemon stopped it or is gone): SIGKILL all
    below this supervisor, escapees included (they stay below the subreaper)."""
    treekill.signal_tree(None, os.getpid())


def _exec_child(request: dict[str, Any], fds: list[int], error_fd: int) -> None:
    child.reset_signals()
    extra = list(fds[4:])
    child.prepare_descriptors(fds[1:4], keep=[error_fd, *extra])
    spec = child.ExecSpec(
        request["executable"], request["argv"], request["env"], request["cwd"], request["tty"]
    )
    ctx = child.ChildContext(spec, error_fd)
    ctx.extra_fds = extra
    setup = request.get("setup")
    if setup is None:
        ctx.exec()
        return
    module = _modules.get(setup["module"])
    if module is None:
        ctx.fail("setup", 0, f"backend module {setup['module']} was not preloaded")
        return
    ctx.run("setup", lambda: getattr(module, setup["function"])(setup["payload"], ctx))
    ctx.fail("setup", 0, "backend setup returned without executing the command")


#: Every signal a command must start with at its default disposition (``posix_spawn``).
_SIGNALS_TO_DEFAULT = tuple(
    s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)
)
#: ``posix_spawn`` is glibc's ``clone(CLONE_VM | CLONE_VFORK)`` on Linux: no copy of the
#: supervisor's page tables and no copy-on-write faults before ``execve``.
_CAN_SPAWN = sys.platform.startswith("linux") and hasattr(os, "posix_spawn")


def _spawn_plain(request: dict[str, Any], fds: list[int]) -> int:
    """Start a command that needs no backend setup with ``posix_spawn``; returns its pid.

    A forked Python child costs a full page-table copy of this process plus copy-on-write
    faults for every page the child's Python code touches; a burst of 100 launches spent
    ~4 ms of system time per command that way. The spawn replicates ``ChildContext.exec``:
    a new session (``setsid`` happens before the file actions in glibc, so opening the
    terminal by name makes it the controlling terminal, as ``TIOCSCTTY`` would), the
    standard descriptors, every signal at its default, an empty mask, and the cwd (set here:
    this supervisor exists only for this command). Raises ``_Failed`` with the stage.
    """
    stdio = fds[1:4]
    for fd in fds:
        os.set_inheritable(fd, False)  # descriptors received with SCM_RIGHTS are inheritable
    try:
        os.chdir(request["cwd"])
    except OSError as exc:
        raise _Failed("chdir", exc) from None
    if request["tty"]:
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.ttyname(stdio[0]), os.O_RDWR, 0),
            (os.POSIX_SPAWN_DUP2, 0, 1),
            (os.POSIX_SPAWN_DUP2, 0, 2),
        ]
    else:
        actions = [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(stdio)]
    try:
        return os.posix_spawn(
            request["executable"],
            request["argv"],
            request["env"],
            file_actions=actions,
            setsid=True,
            setsigdef=_SIGNALS_TO_DEFAULT,
            setsigmask=(),
        )
    except OSError as exc:
        raise _Failed("exec", exc) from None
    except ValueError as exc:  # e.g. an embedded NUL byte
        raise _Failed("exec", OSError(0, str(exc))) from None


class _Failed(Exception):
    """A launch step failed before ``execve`` succeeded."""

    def __init__(self, stage: str, error: OSError) -> None:
        super().__init__(stage)
        self.line = f"{stage} {error.errno or 0} {error.strerror or ''}".strip()


def _supervise(request: dict[str, Any], fds: list[int], control: socket.socket) -> None:
    control.close()
    status_fd = fds[0]
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, _kill_tree)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if _CAN_SPAWN and request.get("setup") is None:
        try:
            command = _spawn_plain(request, fds)
        except _Failed as failed:
            _report(status_fd, f"E {failed.line}\n")
            _reap(-1, status_fd, report=False)
            return
        for fd in fds[1:]:
            os.close(fd)
        _report(status_fd, f"S {command} {os.getpid()}\n")
        _reap(command, status_fd, report=True)
        return
    read_end, write_end = os.pipe()  # non-inheritable (PEP 446); macOS has no pipe2
    command = os.fork()
    if command == 0:
        try:
            os.close(read_end)
            _exec_child(request, fds, write_end)
        finally:
            os._exit(child.STAGE_EXIT_STATUS)
    os.close(write_end)
    for fd in fds[1:]:
        os.close(fd)
    received = bytearray()
    while chunk := os.read(read_end, 4096):
        received += chunk
    os.close(read_end)
    # "+..." lines: what the child observed of its layers; any other line: the failure.
    lines = received.decode("utf-8", "replace").splitlines()
    failure = next((line for line in lines if not line.startswith("+")), None)
    if failure is not None:
        _report(status_fd, "E " + failure + "\n")
    else:
        for line in lines:
            _report(status_fd, "O " + line[1:] + "\n")
        _report(status_fd, f"S {command} {os.getpid()}\n")
    _reap(command, status_fd, report=failure is None)


def _reap(command: int, status_fd: int, *, report: bool) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue
        if pid == command and report:
            _report(status_fd, f"X {status}\n")


def _serve_one(control: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    for path in request.get("preload", ()):
        if path not in _modules:
            _modules[path] = _load_path(path, f"executor_backend_{len(_modules)}")
    if request.get("kind") == "preload":
        for fd in fds:
            os.close(fd)
        return
    try:
        pid = os.fork()
    except OSError as exc:
        _report(fds[0], f"E fork {exc.errno} {exc.strerror}\n")
        pid = -1
    if pid == 0:
        try:
            _supervise(request, fds, control)
        finally:
            os._exit(0)
    for fd in fds:
        os.close(fd)


def main() -> None:
    """Serve launch requests until the control socket closes."""
    control = socket.socket(fileno=int(sys.argv[1]))
    parent = int(sys.argv[2])
    os.setsid()  # keep the daemon's terminal (and its ^C) away from every command
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the daemon died before the death signal was armed
        return
    while True:
        try:
            request, fds = _recv_request(control)
        except (EOFError, ConnectionError):
            return
        try:
            _serve_one(control, request, fds)
        except Exception as exc:  # answer on the status pipe rather than dying
            if fds:
                _report(fds[0], f"E launcher 0 {type(exc).__name__}: {exc}\n")
                for fd in fds:
                    try:
                        os.close(fd)
                    except OSError:
                        pass


if __name__ == "__main__":
    main()
