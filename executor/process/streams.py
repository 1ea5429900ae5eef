"""The child's standard streams: pipes, or one terminal, and the parent's ends of them.

A pipe starts at the kernel's default capacity (64 KiB on Linux). One the daemon finds full
when it reads (the command writes faster than its output is sent) is grown to
``FLOOD_PIPE_BYTES`` and read that much at a time: a flood then costs a quarter of the
wake-ups, reads and notifications per byte (measured: about half the daemon's CPU per byte
of a 64 MiB flood). Grown pipes count against the per-user pipe allowance the kernel gives
an unprivileged daemon (``/proc/sys/fs/pipe-user-pages-soft``, 64 MiB by default), which its
commands' own pipes share; past it every new pipe of that user gets a single page. So at most
``MAX_GROWN_PIPES`` are grown at a time (8 MiB), and a pipe that cannot grow stays as it is.
"""

from __future__ import annotations

import fcntl
import functools
import os
import pty
from collections.abc import Iterable

from executor.protocol.messages import Stream
from executor.spawn.child import set_window_size

__all__ = [
    "FLOOD_PIPE_BYTES",
    "MAX_GROWN_PIPES",
    "PTY_COLUMNS",
    "PTY_ROWS",
    "PipeGrowth",
    "close_all",
    "close_child_ends",
    "open_streams",
    "pipe_growth",
]

PTY_ROWS, PTY_COLUMNS = 24, 80

#: What a flooded output pipe is grown to, and how much is read from it at a time (the
#: notifications then carry up to 256 KiB, ~350 KB of base64: far below any frame limit).
FLOOD_PIPE_BYTES = 256 * 1024
#: Pipes grown at once, daemon-wide.
MAX_GROWN_PIPES = 32
_F_SETPIPE_SZ: int | None = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only


class PipeGrowth:
    """The daemon's budget of grown output pipes."""

    def __init__(self, limit: int = MAX_GROWN_PIPES) -> None:
        self.limit = limit
        self.grown = 0

    def grow(self, fd: int) -> bool:
        """Grow the pipe at ``fd`` to ``FLOOD_PIPE_BYTES``; False if it cannot or may not."""
        if _F_SETPIPE_SZ is None or self.grown >= self.limit:
            return False
        try:
            fcntl.fcntl(fd, _F_SETPIPE_SZ, FLOOD_PIPE_BYTES)
        except OSError:
            return False  # not a pipe (a terminal), or over the user's pipe allowance
        self.grown += 1
        return True

    def release(self) -> None:
        """A grown pipe was closed."""
        self.grown -= 1


_GROWTH = PipeGrowth()


def pipe_growth() -> PipeGrowth:
    """The daemon-wide budget (the kernel accounts pipes per user, so: per process)."""
    return _GROWTH


def open_streams(
    tty: bool, pipe_stdin: bool, size: tuple[int, int] | None = None
) -> tuple[tuple[int, int, int], dict[int, Stream], int | None]:
    """Child ends (stdin, stdout, stderr), parent readers, and the parent's stdin end.
    ``size``: the terminal's (rows, columns); the reference's 24 x 80 by default."""
    if tty:
        master, slave = pty.openpty()
        os.set_inheritable(master, False)
        set_window_size(slave, *(size or (PTY_ROWS, PTY_COLUMNS)))
        return (slave, slave, slave), {master: Stream.PTY}, master
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    if pipe_stdin:
        in_r, in_w = os.pipe()
        stdin_parent: int | None = in_w
    else:
        in_r, stdin_parent = _null_input(), None
    return (in_r, out_w, err_w), {out_r: Stream.STDOUT, err_r: Stream.STDERR}, stdin_parent


@functools.cache
def _null_input() -> int:
    """A read-only ``/dev/null`` kept open for the daemon's life: the stdin of every command
    without a stdin pipe. Reading it has no state to share, and the launcher gets a copy of
    it with each request; one per command cost an ``open`` before every launch."""
    return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)


def close_child_ends(child_fds: Iterable[int]) -> None:
    """Close the child's ends of ``open_streams`` once the launcher has its copies (the
    shared ``/dev/null`` stays open)."""
    close_all(set(child_fds) - {_null_input()})


def close_all(fds: Iterable[int]) -> None:
    """Close each descriptor; one already closed does not stop the others."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            continue
