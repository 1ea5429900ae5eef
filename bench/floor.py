"""The floor of one round trip in Python: a WebSocket server that answers without doing anything.

    .venv/bin/python bench/run.py --only rpc.roundtrip --trials 5 \
        --reference ".venv/bin/python -m bench.floor serve --listen ws://127.0.0.1:{port}"

Started in place of the reference, it shows how much of ``rpc.roundtrip`` is left to a
daemon written in Python at all: the same event loop as ours (uvloop when installed), the
same socket options, one ``recv`` and one ``write`` per request, and nothing else: frames
are delimited, one byte is unmasked to tell a request (``{"id"…``) from a notification
(``{"method"…``), and every request is answered with the same prebuilt frame, whatever it
asked. Only the per-request cases that need no real answer (``rpc.roundtrip``) make sense
against it. (``serve --listen`` in its command line makes the runner meter its CPU as a
daemon's.)
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import os
import socket
import sys
from typing import cast
from urllib.parse import urlsplit

_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#: Answers ``initialize`` (the client wants a ``sessionId``) and every later request alike.
_ANSWER = b'{"id":0,"result":{"status":"ready","sessionId":"floor"}}'
_FRAME = bytes((0x81, len(_ANSWER))) + _ANSWER


class FloorProtocol(asyncio.Protocol):
    """One connection: the upgrade, then one fixed answer per request frame."""

    def __init__(self) -> None:
        self._fd = -1
        self._head = b""
        self._buffer = b""
        self._open = False
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (asyncio's, or uvloop's, which is no subclass of it).
        self._transport = cast("asyncio.Transport", transport)
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._fd = sock.fileno()

    def data_received(self, data: bytes) -> None:
        if self._open:
            self._frames(data)
            return
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            return
        key = b""
        for line in self._head[:end].split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"sec-websocket-key":
                key = value.strip()
        accept = base64.b64encode(hashlib.sha1(key + _GUID).digest())
        assert self._transport is not None
        self._transport.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        self._open = True
        rest, self._head = self._head[end + 4 :], b""
        if rest:
            self._frames(rest)

    def _frames(self, data: bytes) -> None:
        """Answer every complete request frame in ``data`` (small, masked frames only)."""
        buffer = self._buffer + data if self._buffer else data
        offset, answers = 0, 0
        while len(buffer) - offset >= 6:
            length = buffer[offset + 1] & 0x7F
            if length >= 126 or len(buffer) - offset < 6 + length:
                break  # the floor serves small requests only
            # The benchmark's clients put "id" first in a request, "method" first in a
            # notification: the third byte of the payload ('i' or 'm') tells them apart.
            if length > 2 and buffer[offset + 8] ^ buffer[offset + 4] == ord("i"):
                answers += 1
            offset += 6 + length
        self._buffer = buffer[offset:]
        if answers:
            os.write(self._fd, _FRAME * answers)


async def _serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(FloorProtocol, host, port, reuse_address=True)
    bound = server.sockets[0].getsockname()[1]
    print(f"ws://{host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    """Serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--listen", default="ws://127.0.0.1:0", help="ws://HOST:PORT")
    args = parser.parse_args(argv)
    url = urlsplit(args.listen)
    host, port = url.hostname or "127.0.0.1", url.port or 0
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve(host, port))
    else:
        uvloop.run(_serve(host, port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
