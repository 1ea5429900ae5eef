"""A small HTTP/1.1 server for the http/request benchmarks, run as its own process.

``python bench/httpserver.py`` prints its port, then serves until stdin closes:
``GET /small`` a 1 KiB body, ``GET /big/<bytes>`` that many bytes with a Content-Length.
Keep-alive is honoured (the reference reuses connections; we do not), bodies are written
from one preallocated buffer, so the server is never the bottleneck of a measurement.
"""

from __future__ import annotations

import asyncio
import sys

_CHUNK = memoryview(b"x" * (1024 * 1024))
_SMALL = b"s" * 1024


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            if path == "/small":
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1024\r\n\r\n" + _SMALL)
            elif path.startswith("/big/"):
                size = int(path.rsplit("/", 1)[1])
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
                while size > 0:
                    part = _CHUNK[: min(size, len(_CHUNK))]
                    writer.write(part)
                    size -= len(part)
                    await writer.drain()
            else:
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        pass  # the client went away, or the server is shutting down
    finally:
        writer.close()


async def _main() -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", 0, backlog=512)
    print(server.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the benchmark closes our stdin
    server.close()


if __name__ == "__main__":
    asyncio.run(_main())
