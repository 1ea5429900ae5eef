"""The daemon's side of the launcher servers: send a launch, learn start, exit and end.

One ``Spawner`` owns up to two launcher server processes, each started lazily and again if
it dies: ``zygote.py`` (Python; runs backend setup hooks between fork and exec) and, when it
was built, the native ``executor-launcher`` (``launcher.c``) for plain commands and for
sandboxed ones whose setup has a native form (``ChildSetup.native``, the Linux backend's;
``sandbox.c`` applies it). ``launch()`` hands one of them the command and the child's
descriptors and returns a ``Launch`` whose futures resolve as the supervisor reports; both
speak the status lines ``zygote`` documents.

``EXECUTOR_SANDBOX_LAUNCH=python`` sends sandboxed commands to ``zygote.py`` even when the
native launcher can take them (``native``, the default, uses it when it is available);
``EXECUTOR_NATIVE_LAUNCHER=off`` turns the native launcher off altogether.
"""

from __future__ import annotations

import asyncio
import functools
import os
import pickle
import re
import resource
import socket
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor.errors import InternalError, os_error_message, spawn_kind
from executor.sandbox.command import Command

__all__ = ["Launch", "LaunchFailed", "Spawner"]

_ZYGOTE = Path(__file__).with_name("zygote.py")
_NATIVE = Path(__file__).with_name("executor-launcher")
#: The big-endian length in front of every request.
_LENGTH = struct.Struct(">I").pack


class LaunchFailed(InternalError):
    """The child failed before ``execve``; nothing ran. ``stage`` names the failing step."""

    def __init__(self, stage: str, error: int, detail: str, *, sandboxed: bool = False) -> None:
        message = os_error_message(OSError(error, detail)) if error else detail or "launch failed"
        if stage in ("exec", "chdir"):
            self.start_kind = spawn_kind(error)
        else:
            message = f"failed to start the command: {stage}: {message}"
            # A sandbox layer that failed, or the launcher itself.
            self.start_kind = "sandboxPreparation" if sandboxed else "spawnFailed"
        super().__init__(message)
        self.stage = stage
        self.error = error
        self.detail = detail


@dataclass(eq=False)
class Launch:
    """One launched command, as reported by its supervisor."""

    started: asyncio.Future[tuple[int, int]]
    exited: asyncio.Future[int]
    gone: asyncio.Future[None]
    _buffer: bytearray = field(default_factory=bytearray)
    #: What the sandbox layers looked like from inside the child, once applied (backends
    #: that report it); set before ``started`` resolves.
    observed: str | None = None
    _on_exit: Callable[[asyncio.Future[int]], None] | None = None
    #: The command is confined (a failure before its ``execve`` may be a sandbox layer's).
    sandboxed: bool = False

    def when_exited(self, callback: Callable[[asyncio.Future[int]], None]) -> None:
        """Call ``callback(exited)`` once ``exited`` is done: right from the read of the
        status line, not a loop pass later as a future's own callbacks are, so that what it
        sends goes out in this pass."""
        self._on_exit = callback
        # Also the future's callback, called once either way: for an exit known already, or
        # set on the future by other means.
        self.exited.add_done_callback(self._exit_known)

    def feed(self, data: bytes) -> None:
        """Consume supervisor report lines."""
        self._buffer += data
        while (end := self._buffer.find(b"\n")) >= 0:
            line = self._buffer[:end].decode("utf-8", "replace")
            del self._buffer[: end + 1]
            self._line(line)

    def _line(self, line: str) -> None:
        kind, _, rest = line.partition(" ")
        if kind == "S" and not self.started.done():
            pid, _, supervisor = rest.partition(" ")
            self.started.set_result((int(pid), int(supervisor)))
        elif kind == "E" and not self.started.done():
            stage, _, tail = rest.partition(" ")
            number, _, detail = tail.partition(" ")
            self.started.set_exception(
                LaunchFailed(stage, int(number or 0), detail, sandboxed=self.sandboxed)
            )
        elif kind == "O" and not self.started.done():
            self.observed = rest
        elif kind == "X" and not self.exited.done():
            self.exited.set_result(int(rest))
            self._exit_known()

    def _exit_known(self, _exited: object = None) -> None:
        callback, self._on_exit = self._on_exit, None
        if callback is not None:
            callback(self.exited)

    def end(self) -> None:
        """The supervisor is gone: every descendant of the command has exited."""
        if not self.started.done():
            self.started.set_exception(
                InternalError("the launcher exited before the command started")
            )
        if not self.exited.done() and self.started.exception() is None:
            self.exited.set_exception(InternalError("the launcher exited without an exit status"))
            self._exit_known()
        if not self.gone.done():
            self.gone.set_result(None)


def native_launcher() -> Path | None:
    """The built native launcher (``launcher.c``), or ``None`` to use ``zygote.py`` for all.

    ``None`` when it was not built (no C compiler at install time, not Linux), when it does
    not run here (a binary copied from another machine), or when the operator turned it off
    with ``EXECUTOR_NATIVE_LAUNCHER=off``. Both launch plain commands the same way; the
    native one costs ~1.5 ms less CPU per command.
    """
    if os.environ.get("EXECUTOR_NATIVE_LAUNCHER", "").strip().lower() in _OFF:
        return None
    if not sys.platform.startswith("linux") or not os.access(_NATIVE, os.X_OK):
        return None
    return _NATIVE if _usage(str(_NATIVE)) is not None else None


_OFF = ("0", "off", "no", "false")
#: How the native launcher's usage text names the version of the sandbox specs it applies
#: (``sandbox.c``; a spec's fourth byte is its version: ``native_spec.py``).
_SANDBOX_SPEC = re.compile(rb"sandbox-spec (\d+)\)")
#: How it names the slots of kept supervisors it offers (``launcher.c``: "supervisors kept
#: for reuse").
_SLOTS = re.compile(rb"supervisor-slots (\d+)")
#: How many supervisors of plain launches the daemon keeps for reuse, at most: each idle one
#: is a small process (a few hundred KiB of its own).
KEPT_SUPERVISORS = 8


@functools.cache
def _usage(program: str) -> bytes | None:
    """The launcher's usage text, if it starts here (run by hand it must explain itself and
    exit 2); ``None`` if it does not.

    Checked once per process: a launcher that cannot even start would otherwise fail every
    plain command of the daemon instead of falling back to the Python path.
    """
    try:
        result = subprocess.run([program], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if result.returncode == 2 and b"started by the daemon" in result.stderr:
        return result.stderr
    return None


def native_spec_version() -> int:
    """The version of the sandbox specs the native launcher applies, 0 when sandboxed
    commands go to the Python launcher (not built, predates specs, or
    ``EXECUTOR_SANDBOX_LAUNCH=python``)."""
    native = native_launcher()
    if native is None or sandbox_launch_mode() != "native":
        return 0
    found = _SANDBOX_SPEC.search(_usage(str(native)) or b"")
    return int(found.group(1)) if found else 0


def native_slots() -> int:
    """How many kept supervisors the native launcher offers (0: none, or an older build)."""
    native = native_launcher()
    found = _SLOTS.search(_usage(str(native)) or b"") if native is not None else None
    return min(int(found.group(1)), KEPT_SUPERVISORS) if found else 0


def sandbox_launch_mode() -> str:
    """``"native"`` or ``"python"``: where sandboxed commands with a native setup go, as
    ``EXECUTOR_SANDBOX_LAUNCH`` asks (default ``native``: when that launcher is available)."""
    wanted = os.environ.get("EXECUTOR_SANDBOX_LAUNCH", "").strip().lower()
    return "python" if wanted == "python" else "native"


#: The descriptor limit commands get when the daemon raised its own (``raise_descriptor_limit``;
#: empty: it did not).
_COMMAND_NOFILE: list[tuple[int, int]] = []
#: Enough for every session's proxies and tunnels; more is never needed.
_DAEMON_NOFILE_CAP = 1 << 20


def raise_descriptor_limit() -> None:
    """Raise the daemon's soft descriptor limit to its hard one (each proxy tunnel holds two
    descriptors; a 1024 default runs out at a few hundred). Commands keep the limit the daemon
    started with: the launcher servers are set back to it (programs using ``select`` rely on
    a soft limit of 1024). Linux only (``prlimit``)."""
    if not hasattr(resource, "prlimit") or _COMMAND_NOFILE:
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else _DAEMON_NOFILE_CAP
    wanted = min(wanted, _DAEMON_NOFILE_CAP)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (OSError, ValueError):
        return
    _COMMAND_NOFILE.append((soft, hard))


class _Server:
    """One launcher server process and its control socket; started lazily, again if it died."""

    def __init__(self, program: list[str]) -> None:
        self._program = program
        self._process: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None

    def _ensure(self) -> socket.socket:
        # A dead server is found by the send itself (EPIPE or ECONNRESET: its end of the
        # socket is closed), not by polling its pid before each launch: every supervisor
        # closes the control socket first thing, so nothing else holds that end open.
        if self._control is not None:
            return self._control
        self.stop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._process = subprocess.Popen(
                [*self._program, str(theirs.fileno()), str(os.getpid())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                # stdout is the protocol channel in stdio mode: the launcher and every
                # supervisor it forks must neither write to it nor hold it open (the client
                # sees EOF only when the last holder is gone). Tracebacks still reach stderr.
                stdout=subprocess.DEVNULL,
                close_fds=True,
            )
        finally:
            theirs.close()
        if _COMMAND_NOFILE:
            # Before the first request: the server forks nothing until it has one.
            resource.prlimit(self._process.pid, resource.RLIMIT_NOFILE, _COMMAND_NOFILE[0])
        ours.setblocking(True)
        self._control = ours
        return ours

    def send(self, payload: bytes, fds: list[int]) -> None:
        """One request: length, payload, and ``fds`` attached to its first bytes.

        One ``sendmsg`` for all of it: every extra write to the control socket wakes the
        launcher again, and in a burst each wake-up costs a context switch.
        """
        header = _LENGTH(len(payload))
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fd_array(fds))]
        for attempt in range(2):
            control = self._ensure()
            try:
                sent = control.sendmsg([header, payload], rights)
                if sent < len(header) + len(payload):
                    control.sendall((header + payload)[sent:])
                return
            except (BrokenPipeError, ConnectionResetError):
                self.stop()
                if attempt:
                    raise InternalError("the launcher server is not running") from None

    def stop(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._process is not None:
            if self._process.poll() is None:
                self._process.terminate()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None


def _native_payload(request: Command, spec: bytes | None = None, slot: int = -1) -> bytes:
    """A request in ``launcher.c``'s format: NUL-terminated fields, after the sandbox spec or
    the kept supervisor's slot if there is one."""
    fields = [
        "1" if request.tty else "0",
        request.cwd,
        request.executable,
        str(len(request.argv)),
        *request.argv,
        *[f"{name}={value}" for name, value in sorted_environment(request.env)],
    ]
    # Joined, then encoded once (the filesystem encoding is stateless: the same bytes as
    # field by field); one NUL between fields and none in them.
    text = "\0".join(fields)
    if text.count("\0") != len(fields) - 1:
        # Validation refuses these long before; a stray one must not shift the fields.
        raise LaunchFailed("exec", 0, "embedded null byte")
    if spec is not None:
        prefix = b"S\0\0\0\0" + _LENGTH(len(spec)) + spec
    elif slot >= 0:
        prefix = b"K\0\0\0" + bytes((slot,))
    else:
        prefix = b""
    return prefix + os.fsencode(text) + b"\0"


def sorted_environment(env: dict[str, str]) -> list[tuple[str, str]]:
    """A command's environment in the order the reference passes it: sorted by name, byte by
    byte (Rust's ``Command`` keeps it in a ``BTreeMap``), whatever order the request, the
    ``envPolicy`` or a backend gave it. A program that lists its environment (``env``,
    ``printenv``) then prints the same as under the reference."""
    try:
        "".join(env).encode()
    except UnicodeEncodeError:
        # Undecodable bytes kept as surrogate escapes (an inherited environment): the one
        # case where code point order is not byte order.
        return sorted(env.items(), key=lambda item: os.fsencode(item[0]))
    return sorted(env.items())  # names are unique: the values are never compared


class Spawner:
    """Owns the launcher servers and sends them launches.

    Plain commands go to the native launcher when it is built, else to ``zygote.py``.
    Commands with a backend ``setup`` hook go to the native launcher when the setup has a
    native form, that launcher reads its encoding and ``EXECUTOR_SANDBOX_LAUNCH`` is not
    ``python``; else to ``zygote.py`` (the hook is Python).
    """

    def __init__(self) -> None:
        self._python = _Server([sys.executable, "-I", "-S", str(_ZYGOTE)])
        native = native_launcher()
        self._native = _Server([str(native)]) if native is not None else None
        #: The spec version the native launcher applies (0: none, or not to be used).
        self._spec_version = native_spec_version()
        #: Slots of kept supervisors not in use (launcher.c: "supervisors kept for reuse"). A
        #: slot comes back only once its launch's end has been read here: until then the
        #: daemon may still signal that supervisor's descendants as the launch's tree.
        self._free_slots = list(range(native_slots()))[::-1]

    @property
    def supervisor(self) -> str:
        """Which supervisor runs plain commands: ``"native"`` or ``"python"``."""
        return "native" if self._native is not None else "python"

    @property
    def sandbox_supervisor(self) -> str:
        """Which launcher applies sandboxed commands that have a native setup."""
        return "native" if self._spec_version else "python"

    def launcher_for(self, request: Command) -> str:
        """``"native"`` or ``"python"``: the launcher ``launch`` sends ``request`` to."""
        setup = request.setup
        if self._native is None:
            return "python"
        if setup is None:
            return "native"
        # A spec of another version than the launcher's is never sent there: it would refuse
        # it, and the Python launcher applies the same layers.
        native = setup.native
        if native is not None and len(native) > 3 and native[3] == self._spec_version:
            return "native"
        return "python"

    def launch(self, request: Command, stdio: tuple[int, int, int]) -> Launch:
        """Start ``request`` with ``stdio``; the caller keeps (and closes) its own descriptors."""
        loop = asyncio.get_running_loop()
        read_end, write_end = os.pipe()  # close-on-exec by default (PEP 446)
        slot = -1
        try:
            if self.launcher_for(request) == "native":
                assert self._native is not None
                spec = None if request.setup is None else request.setup.native
                if request.setup is None and self._free_slots:
                    slot = self._free_slots.pop()
                payload = _native_payload(request, spec, slot)
                self._native.send(payload, [write_end, *stdio])
            else:
                self._send_python(request, [write_end, *stdio])
        except BaseException:
            os.close(read_end)
            if slot >= 0:
                self._free_slots.append(slot)
            raise
        finally:
            os.close(write_end)
        # The rest waits until the request is out: the command starts meanwhile.
        os.set_blocking(read_end, False)
        launch = Launch(
            loop.create_future(),
            loop.create_future(),
            loop.create_future(),
            sandboxed=request.setup is not None,
        )

        def readable() -> None:
            try:
                data = os.read(read_end, 4096)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if data:
                launch.feed(data)
                return
            loop.remove_reader(read_end)
            os.close(read_end)
            if slot >= 0:
                self._free_slots.append(slot)
            launch.end()

        loop.add_reader(read_end, readable)
        return launch

    def _send_python(self, request: Command, fds: list[int]) -> None:
        message: dict[str, Any] = {
            "kind": "launch",
            "executable": request.executable,
            "argv": list(request.argv),
            "env": dict(sorted_environment(request.env)),
            "cwd": request.cwd,
            "tty": request.tty,
            "setup": None,
            "preload": [],
        }
        setup = request.setup
        if setup is not None:
            message["setup"] = {
                "module": setup.module_path,
                "function": setup.function,
                "payload": setup.payload,
            }
            # Always named: the server loads a module once, and a restarted server (which
            # ``send`` may start) has loaded none.
            message["preload"] = [setup.module_path]
        self._python.send(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL), fds)

    def close(self) -> None:
        """Stop the launcher servers (their supervisors then end their trees)."""
        self._python.stop()
        if self._native is not None:
            self._native.stop()


def _fd_array(fds: list[int]) -> bytes:
    # C ints in native order, as SCM_RIGHTS takes them (struct: already in use for lengths).
    return struct.pack(f"{len(fds)}i", *fds)
