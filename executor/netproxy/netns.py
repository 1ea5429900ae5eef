"""A private network namespace the daemon holds open, and listening sockets inside it (Linux).

A session's proxied commands share one network namespace with nothing in it but ``lo``: they
reach each other's listeners there, and the host's loopback services not at all. The daemon
never enters it with its own threads: a short-lived thread ``unshare``\\ s (or ``setns``\\ es
into) it, opens what is needed and ends. A socket belongs to the namespace it was created in
for its whole life, so the listening sockets such a thread makes are served by the daemon's
event loop from the host's namespace, and the proxy's outbound connections leave from there.

Holding the namespace is holding a descriptor of it: launches join it by the path
``/proc/<daemon pid>/fd/<fd>`` and check its inode (``NetworkRoute``), so a descriptor number
reused after ``close`` cannot send a command into another session's namespace.

Creating a network namespace needs ``CAP_SYS_ADMIN``; ``available()`` says whether this
daemon has it (a test, not a guess: it creates and drops one, once).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import os
import socket
import struct
import threading
from collections.abc import Callable
from typing import Final, TypeVar

__all__ = ["NamespaceError", "NetNamespace", "available"]

_CLONE_NEWNET: Final = 0x40000000
_SIOCGIFFLAGS: Final = 0x8913
_SIOCSIFFLAGS: Final = 0x8914
_IFF_UP: Final = 0x1
_T = TypeVar("_T")


class NamespaceError(OSError):
    """A network namespace could not be made or used."""


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise NamespaceError(code, f"{what}: {os.strerror(code)}")


def _in_thread(work: Callable[[], _T]) -> _T:
    """Run ``work`` in a thread of its own and return its result (or raise its error).

    Namespace changes are per thread: the thread ends with them, the daemon's threads never
    see them."""
    outcome: list[_T] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # handed to the caller
            failure.append(exc)

    thread = threading.Thread(target=body, name="netns", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def _loopback_up() -> None:
    """Bring ``lo`` up in the calling thread's network namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


class NetNamespace:
    """A new network namespace with only ``lo`` (up), held open by this object."""

    def __init__(self) -> None:
        def create() -> int:
            _check(_libc().unshare(_CLONE_NEWNET), "unshare(CLONE_NEWNET)")
            _loopback_up()
            return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)

        self._fd: int | None = _in_thread(create)
        self.inode = os.fstat(self._fd).st_ino

    @property
    def path(self) -> str:
        """Where a launcher opens it (valid while this object is open)."""
        return f"/proc/{os.getpid()}/fd/{self.fileno()}"

    def fileno(self) -> int:
        """The descriptor that holds it."""
        if self._fd is None:
            raise NamespaceError(errno.EBADF, "the network namespace is closed")
        return self._fd

    def run(self, work: Callable[[], _T]) -> _T:
        """``work()`` in a thread inside this namespace (sockets it makes stay in it)."""
        fd = self.fileno()

        def inside() -> _T:
            _check(_libc().setns(fd, _CLONE_NEWNET), "setns(CLONE_NEWNET)")
            return work()

        return _in_thread(inside)

    def listen(self, host: str, port: int, *, backlog: int = 512) -> socket.socket:
        """A non-blocking TCP socket listening on ``host:port`` inside the namespace."""

        def make() -> socket.socket:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((host, port))
                sock.listen(backlog)
                sock.setblocking(False)
            except BaseException:
                sock.close()
                raise
            return sock

        return self.run(make)

    def close(self) -> None:
        """Let go of it (it ends once no process or socket is left in it)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@functools.cache
def available() -> str | None:
    """Why this daemon cannot hold private network namespaces (``None``: it can)."""
    try:
        NetNamespace().close()
    except OSError as exc:
        return f"cannot create a network namespace ({exc.strerror or exc})"
    return None
