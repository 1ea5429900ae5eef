"""The child's standard streams: pipes, or one terminal, and the parent's ends of them."""

from __future__ import annotations

import os
import pty
from collections.abc import Iterable

from executor.protocol.messages import Stream
from executor.spawn.child import set_window_size

__all__ = ["PTY_COLUMNS", "PTY_ROWS", "close_all", "open_streams"]

PTY_ROWS, PTY_COLUMNS = 24, 80


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
        in_r, stdin_parent = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), None
    return (in_r, out_w, err_w), {out_r: Stream.STDOUT, err_r: Stream.STDERR}, stdin_parent


def close_all(fds: Iterable[int]) -> None:
    """Close each descriptor; one already closed does not stop the others."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            continue
