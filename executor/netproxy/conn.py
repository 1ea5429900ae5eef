"""One TCP connection of the proxy while it is read as a request: the client's, or the
upstream one of a plain HTTP request. Tunnels do not go through here (``relay``).

``Conn`` is a thin layer over a non-blocking socket and the loop's ``sock_recv`` and
``sock_sendall``: what arrived and was not consumed stays in a buffer (``peek``,
``unread``) and is handed to the tunnel when the connection becomes one.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import struct
from collections.abc import Sequence
from typing import Final

from executor.netproxy.policy import IPAddress, Unreachable

__all__ = ["Conn", "connect"]

#: Bytes one read asks for.
READ_SIZE: Final = 256 * 1024
LINGER_RESET: Final = struct.pack("ii", 1, 0)


def prepare(sock: socket.socket) -> None:
    """Non-blocking, and no Nagle delay for a relay's small writes (TLS handshakes)."""
    sock.setblocking(False)
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP reset, so its peer sees an error rather than a clean end."""
    if sock.fileno() < 0:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RESET)
    sock.close()


class Conn:
    """A connection being read as a request; see the module docstring."""

    def __init__(self, sock: socket.socket) -> None:
        prepare(sock)
        self.sock = sock
        self._inbox = bytearray()
        self._eof = False

    @property
    def closed(self) -> bool:
        """Whether the socket is closed."""
        return self.sock.fileno() < 0

    async def _fill(self) -> None:
        data = await asyncio.get_running_loop().sock_recv(self.sock, READ_SIZE)
        if data:
            self._inbox += data
        else:
            self._eof = True

    async def peek(self) -> bytes:
        """What has arrived, left in place (at least a byte; ``b""`` at EOF)."""
        if not self._inbox and not self._eof:
            await self._fill()
        return bytes(self._inbox)

    async def read(self) -> bytes:
        """What has arrived (at least a byte; ``b""`` at EOF)."""
        if not self._inbox and not self._eof:
            await self._fill()
        return self.take()

    async def read_exactly(self, size: int) -> bytes:
        """``size`` bytes; ``asyncio.IncompleteReadError`` at an early EOF."""
        while len(self._inbox) < size:
            if self._eof:
                raise asyncio.IncompleteReadError(bytes(self._inbox), size)
            await self._fill()
        data = bytes(self._inbox[:size])
        del self._inbox[:size]
        return data

    def unread(self, data: bytes) -> None:
        """Put ``data`` back in front of what has arrived (a parser's leftover)."""
        self._inbox[:0] = data

    def take(self) -> bytes:
        """Everything received and not consumed (for the tunnel to pass on first)."""
        data = bytes(self._inbox)
        self._inbox.clear()
        return data

    async def send(self, data: bytes) -> None:
        """Send ``data`` whole (waits while the peer does not read)."""
        if data:
            await asyncio.get_running_loop().sock_sendall(self.sock, data)

    def shutdown_write(self) -> None:
        """Send EOF (``shutdown(SHUT_WR)``); reading goes on."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def reset(self) -> None:
        """Close with a TCP reset."""
        reset(self.sock)


_ERRNO_KIND: Final = {
    errno.ECONNREFUSED: "refused",
    errno.ENETUNREACH: "network",
    errno.EHOSTUNREACH: "unreachable",
    errno.ETIMEDOUT: "timeout",
}


async def connect(addresses: Sequence[IPAddress], port: int) -> tuple[Conn, IPAddress]:
    """A connection to the first of ``addresses`` that answers, tried in order (the caller
    bounds the time); ``Unreachable`` naming the last failure when none does."""
    loop = asyncio.get_running_loop()
    failure: OSError | None = None
    for address in addresses:
        family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            prepare(sock)
            await loop.sock_connect(sock, (str(address), port))
        except OSError as exc:
            sock.close()
            failure = exc
            continue
        except BaseException:
            sock.close()
            raise
        return Conn(sock), address
    if failure is None:
        raise Unreachable("no address to connect to")
    kind = _ERRNO_KIND.get(failure.errno or 0, "unreachable")
    message = (os.strerror(failure.errno) if failure.errno else str(failure)).lower()
    raise Unreachable(f"cannot connect: {message}", kind=kind)
