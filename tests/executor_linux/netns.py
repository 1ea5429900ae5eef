"""A private network namespace the test owns, as the daemon keeps one per session (Linux).

A short-lived thread ``unshare``s a network namespace, brings its ``lo`` up and keeps a
descriptor of it; the launcher joins it through ``/proc/<pid>/fd/<fd>``. Sockets made by a
thread that entered it stay in it, so listeners "inside" are created the same way. Nothing
here touches the host's own network namespace.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["PrivateNetwork"]

T = TypeVar("T")

_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
#: ``struct ifreq``: the name, then a union whose first member here is ``short ifr_flags``.
_IFREQ = struct.Struct("16sh22x")
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int) -> None:
    if result < 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def in_thread(action: Callable[[], T]) -> T:
    """``action()`` in a fresh thread (whose namespaces die with it), its result or error."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["result"] = action()
        except BaseException as exc:  # re-raised in the caller
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=10)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]  # type: ignore[return-value]


class PrivateNetwork:
    """A network namespace with only ``lo`` up, held open by a descriptor."""

    def __init__(self) -> None:
        self.fd = in_thread(self._create)
        self.inode = os.fstat(self.fd).st_ino
        #: What the launcher opens (a descriptor of this process, seen through ``/proc``).
        self.path = f"/proc/{os.getpid()}/fd/{self.fd}"

    @staticmethod
    def _create() -> int:
        _check(_libc.unshare(_CLONE_NEWNET))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            request = _IFREQ.pack(b"lo", 0)
            flags = _IFREQ.unpack(fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
            fcntl.ioctl(sock, _SIOCSIFFLAGS, _IFREQ.pack(b"lo", flags | _IFF_UP))
        return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)

    def inside(self, action: Callable[[], T]) -> T:
        """``action()`` run by a thread that entered this namespace."""

        def entered() -> T:
            _check(_libc.setns(self.fd, _CLONE_NEWNET))
            return action()

        return in_thread(entered)

    def tcp_listener(self, port: int = 0) -> socket.socket:
        """A listening TCP socket on this namespace's ``127.0.0.1:port``."""

        def listen() -> socket.socket:
            sock = socket.socket()
            sock.bind(("127.0.0.1", port))
            sock.listen()
            return sock

        return self.inside(listen)

    def close(self) -> None:
        """Drop the descriptor (the namespace ends with its last user)."""
        os.close(self.fd)
