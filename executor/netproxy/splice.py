"""Linux tunnels by ``splice(2)``: bytes go socket → pipe → socket inside the kernel.

A relay that reads into the process and writes back out copies every byte twice more than
the kernel needs to; splicing through a pipe moves page references instead, and the proxy
spends about a third of the CPU per byte (``bench/cases/proxy.py``). Each direction of a
tunnel borrows a pipe from a small pool while it has bytes in flight and gives it back
once the pipe is empty — usually at once, since a socket that can take data takes it — so
a tunnel costs its two sockets' descriptors, not six.

Flow control: a direction stops reading its source while its pipe holds bytes the
destination did not take, and resumes once the destination drained them; the kernel's
socket buffers hold the rest. EOF one way becomes ``shutdown(SHUT_WR)`` on the other
socket once the pipe is empty; both ways ended, both sockets close. An error on one side
resets the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import socket
from collections.abc import Callable
from typing import Final

from executor.netproxy.conn import reset

__all__ = ["PipePool", "SpliceTunnel", "available"]

#: Bytes a pipe may hold (``F_SETPIPE_SZ``, up to the default ``pipe-max-size``; a pipe
#: holds pages only while it holds data).
PIPE_SIZE: Final = 1024 * 1024
#: Reads from one socket per wake-up at most (fairness between tunnels).
_SPLICES_PER_WAKE: Final = 8
#: Empty pipes a pool keeps for the next burst.
POOL_KEEP: Final = 16
_FLAGS: Final = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)
_F_SETPIPE_SZ: Final = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_F_GETPIPE_SZ: Final = getattr(fcntl, "F_GETPIPE_SZ", 1032)


@functools.cache
def available() -> bool:
    """Whether TCP sockets can be spliced here (Linux; tried once on a loopback pair, since
    a kernel or sandbox may have the call and refuse it for sockets)."""
    if not (hasattr(os, "splice") and hasattr(os, "pipe2")):
        return False
    try:
        with (
            socket.create_server(("127.0.0.1", 0)) as listener,
            socket.create_connection(listener.getsockname(), timeout=1) as sender,
        ):
            receiver, _ = listener.accept()
            read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
            try:
                with receiver:
                    sender.sendall(b"x")
                    moved = os.splice(receiver.fileno(), write_fd, 1)
                    moved += os.splice(read_fd, receiver.fileno(), 1)
                    return moved == 2 and sender.recv(1) == b"x"
            finally:
                os.close(read_fd)
                os.close(write_fd)
    except OSError:
        return False


class _Pipe:
    __slots__ = ("read_fd", "size", "write_fd")

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self.size = fcntl.fcntl(self.write_fd, _F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:  # over the user's pipe-buffer allowance: what it has
            self.size = fcntl.fcntl(self.write_fd, _F_GETPIPE_SZ)

    def close(self) -> None:
        os.close(self.read_fd)
        os.close(self.write_fd)


class PipePool:
    """Empty pipes for tunnels to borrow (one pool per proxy; not thread-safe)."""

    def __init__(self, keep: int = POOL_KEEP) -> None:
        self._idle: list[_Pipe] = []
        self._keep = keep

    def take(self) -> _Pipe:
        """An empty pipe."""
        return self._idle.pop() if self._idle else _Pipe()

    def give(self, pipe: _Pipe) -> None:
        """Return an empty pipe."""
        if len(self._idle) < self._keep:
            self._idle.append(pipe)
        else:
            pipe.close()

    def close(self) -> None:
        """Close the idle pipes."""
        for pipe in self._idle:
            pipe.close()
        self._idle.clear()


class _Flow:
    """One direction of a tunnel."""

    __slots__ = ("dst", "ended", "pending", "pipe", "reading", "relayed", "src", "writing")

    def __init__(self, src: socket.socket, dst: socket.socket) -> None:
        self.src = src
        self.dst = dst
        self.pipe: _Pipe | None = None
        #: Bytes in ``pipe`` that ``dst`` has not taken yet.
        self.pending = 0
        #: ``src`` sent EOF.
        self.ended = False
        self.reading = False
        self.writing = False
        self.relayed = 0


class SpliceTunnel:
    """Two connected sockets relayed to each other; see the module docstring."""

    def __init__(
        self,
        a: socket.socket,
        b: socket.socket,
        pool: PipePool,
        on_closed: Callable[[SpliceTunnel], None],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._pool = pool
        self._on_closed = on_closed
        self._flows = (_Flow(a, b), _Flow(b, a))
        self._done = False
        for flow in self._flows:
            self._read(flow, True)

    @property
    def relayed(self) -> tuple[int, int]:
        """Bytes relayed each way (first socket to second, second to first)."""
        return self._flows[0].relayed, self._flows[1].relayed

    @property
    def closed(self) -> bool:
        """Whether both sockets are closed."""
        return self._done

    def _read(self, flow: _Flow, on: bool) -> None:
        if on and not flow.reading:
            self._loop.add_reader(flow.src.fileno(), self._readable, flow)
        elif not on and flow.reading:
            self._loop.remove_reader(flow.src.fileno())
        flow.reading = on

    def _write(self, flow: _Flow, on: bool) -> None:
        if on and not flow.writing:
            self._loop.add_writer(flow.dst.fileno(), self._flush, flow)
        elif not on and flow.writing:
            self._loop.remove_writer(flow.dst.fileno())
        flow.writing = on

    def _readable(self, flow: _Flow) -> None:
        # Several splices per wake-up while the destination keeps up: on a busy machine a
        # wake-up is what costs, and the socket may hold megabytes by then.
        for _ in range(_SPLICES_PER_WAKE):
            pipe = flow.pipe
            if pipe is None:
                pipe = flow.pipe = self._pool.take()
            try:
                count = os.splice(
                    flow.src.fileno(), pipe.write_fd, pipe.size - flow.pending, flags=_FLAGS
                )
            except BlockingIOError:  # nothing (more) to read, or the pipe's slots are full
                if flow.pending:
                    if flow.writing:
                        self._read(flow, False)
                else:
                    self._release(flow)
                return
            except OSError:
                self._fail(reset_first=flow.dst)
                return
            if count == 0:
                flow.ended = True
                self._read(flow, False)
                if not flow.pending:
                    self._release(flow)
                    self._end(flow)
                return
            flow.pending += count
            flow.relayed += count
            self._flush(flow)
            if flow.pending or not flow.reading:
                return

    def _flush(self, flow: _Flow) -> None:
        pipe = flow.pipe
        assert pipe is not None
        while flow.pending:
            try:
                count = os.splice(pipe.read_fd, flow.dst.fileno(), flow.pending, flags=_FLAGS)
            except BlockingIOError:
                break
            except OSError:
                self._fail(reset_first=flow.src)
                return
            flow.pending -= count
        if flow.pending:  # the destination is full: wait until it takes more
            self._write(flow, True)
            self._read(flow, flow.pending < pipe.size and not flow.ended)
            return
        self._write(flow, False)
        self._release(flow)
        if flow.ended:
            self._end(flow)
        else:
            self._read(flow, True)

    def _release(self, flow: _Flow) -> None:
        if flow.pipe is not None and not flow.pending:
            self._pool.give(flow.pipe)
            flow.pipe = None

    def _end(self, flow: _Flow) -> None:
        """``flow``'s source ended and all of it was passed on: pass the EOF on."""
        with contextlib.suppress(OSError):
            flow.dst.shutdown(socket.SHUT_WR)
        if all(other.ended and not other.pending for other in self._flows):
            self.close()

    def _fail(self, *, reset_first: socket.socket) -> None:
        """A socket failed: reset the other end of the tunnel too."""
        self._stop()
        reset(reset_first)
        self.close()

    def _stop(self) -> None:
        for flow in self._flows:
            self._read(flow, False)
            self._write(flow, False)

    def close(self) -> None:
        """Close both sockets now (bytes in flight are dropped)."""
        if self._done:
            return
        self._done = True
        self._stop()
        for flow in self._flows:
            if flow.pipe is not None:
                if flow.pending:
                    flow.pipe.close()  # holds bytes nobody will read
                else:
                    self._pool.give(flow.pipe)
                flow.pipe = None
            flow.src.close()
        self._on_closed(self)
