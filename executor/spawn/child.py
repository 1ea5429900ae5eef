"""What runs in a freshly forked child until ``execve``: the ``ChildContext``.

STDLIB ONLY. This module is loaded by the launcher server, which runs as
``python -I -S zygote.py`` and must stay small and single-threaded. A sandbox backend's child
setup function receives a ``ChildContext`` and must end by calling ``ctx.exec()`` (or
``ctx.fail()``); in between it may fork (e.g. to become PID 1 of a new PID namespace) and
apply its layers. ``ctx.exec()`` performs the common final steps in the process that becomes
the command: session and controlling terminal, working directory, ``before_exec``, ``execve``.

Every intermediate process that forks the next stage must close ``ctx.error_fd`` afterwards:
the supervisor learns that the command started from EOF on that pipe (it is close-on-exec),
so a stray copy would hold the start forever.
"""

from __future__ import annotations

import fcntl
import os
import signal
import struct
import termios
from collections.abc import Callable, Sequence

__all__ = ["STAGE_EXIT_STATUS", "ChildContext", "ExecSpec"]

#: Exit status of a child that failed before ``execve``; the stage is reported separately.
STAGE_EXIT_STATUS = 127


class ExecSpec:
    """The command to run: resolved executable, argv, environment, cwd, terminal mode."""

    __slots__ = ("argv", "cwd", "env", "executable", "tty")

    def __init__(
        self, executable: str, argv: Sequence[str], env: dict[str, str], cwd: str, tty: bool
    ) -> None:
        self.executable = executable
        self.argv = list(argv)
        self.env = env
        self.cwd = cwd
        self.tty = tty


class ChildContext:
    """Final steps before ``execve``, and the error channel back to the supervisor."""

    def __init__(self, spec: ExecSpec, error_fd: int) -> None:
        self.spec = spec
        self.error_fd = error_fd
        #: Hook a backend may set to run after ``chdir`` and just before ``execve``.
        self.before_exec: Callable[[], None] | None = None

    def fail(self, stage: str, error: int, detail: str = "") -> None:
        """Report a failed stage to the supervisor and exit; never returns."""
        message = f"{stage} {error} {detail}".strip().replace("\n", " ") + "\n"
        try:
            os.write(self.error_fd, message.encode("utf-8", "replace"))
        finally:
            os._exit(STAGE_EXIT_STATUS)

    def report(self, observed: str) -> None:
        """Tell the supervisor what the layers look like from inside, once they are applied
        (one line; the daemon logs it and ``executor run -v`` prints it)."""
        os.write(
            self.error_fd, ("+" + observed.replace("\n", " ") + "\n").encode("utf-8", "replace")
        )

    def run(self, stage: str, step: Callable[[], object]) -> None:
        """Run ``step``; an ``OSError`` fails ``stage`` with its errno."""
        try:
            step()
        except OSError as exc:
            self.fail(stage, exc.errno or 0, exc.strerror or "")
        except Exception as exc:  # a backend bug must still be reported, not hang the start
            self.fail(stage, 0, f"{type(exc).__name__}: {exc}")

    def new_session(self) -> None:
        """Become a session and process-group leader; take the terminal if there is one."""
        os.setsid()
        if self.spec.tty:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    def exec(self) -> None:
        """Become a session leader (taking the terminal), enter the working directory, run
        ``before_exec`` and replace this process with the command."""
        spec = self.spec
        self.run("session", self.new_session)
        self.run("chdir", lambda: os.chdir(spec.cwd))
        if self.before_exec is not None:
            self.run("sandbox", self.before_exec)
        try:
            os.execve(spec.executable, spec.argv, spec.env)
        except OSError as exc:
            self.fail("exec", exc.errno or 0, exc.strerror or "")
        except ValueError as exc:  # e.g. an embedded NUL: report it rather than exit silently
            self.fail("exec", 0, str(exc))


def prepare_descriptors(stdio: Sequence[int], keep: Sequence[int]) -> None:
    """Install ``stdio`` as 0, 1, 2 and close every other descriptor except ``keep``."""
    # Move the sources above 2 first so that dup2 never clobbers a source not yet copied.
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in stdio]
    for target, source in enumerate(high):
        os.dup2(source, target, inheritable=True)
    keep_set = {0, 1, 2, *keep}
    low = 3
    for fd in sorted(keep_set):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, 65536)


def reset_signals() -> None:
    """Default dispositions and an empty mask, as a freshly exec'd program expects.

    Only dispositions that are not already the default are touched (``getsignal`` reflects
    the real ones, inherited or set here): ~60 ``signal()`` calls cost ~0.6 ms per launch.
    """
    for signum in range(1, signal.NSIG):
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            if signal.getsignal(signum) is not signal.SIG_DFL:
                signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):
            continue
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def set_window_size(fd: int, rows: int, cols: int) -> None:
    """Give a terminal its size."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
