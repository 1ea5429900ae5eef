"""The client's bound on the size of a server's message (``max_message_bytes``).

A hostile or compromised executor must not make the client allocate without bound: a
message larger than the bound is refused before its payload is read, the calls waiting on
that connection fail with an error that names the bound and how to raise it, and the
session goes on (WebSocket) on a new connection. Most tests use a tiny hostile server that
answers with messages of exactly the size asked for; one uses the real daemon.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from executor.client import (
    ClientError,
    MessageTooLarge,
    OutcomeUnknown,
    SessionFailed,
    connect,
    connect_sync,
)
from tests.client.conftest import arun
from tests.support.daemon import RunningDaemon

LIMIT = 64 * 1024


def padded(request_id: Any, size: int) -> str:
    """An answer to ``request_id`` of exactly ``size`` bytes (a string result)."""
    shell = json.dumps({"id": request_id, "result": ""}, separators=(",", ":"))
    return shell.replace('""', '"' + "x" * (size - len(shell)) + '"')


class HostileServer:
    """Speaks just enough of the protocol: ``initialize`` (resumes keep the session id),
    ``test/pad`` {size} answered with a message of that many bytes, ``test/hang`` never
    answered. ``initialize_size`` pads the handshake's answer too."""

    def __init__(self, initialize_size: int | None = None) -> None:
        self.initialize_size = initialize_size
        #: The close code of every connection that ended, in order.
        self.close_codes: list[int | None] = []
        self.connections = 0
        self.url = ""

    async def _handle(self, ws: ServerConnection) -> None:
        self.connections += 1
        try:
            async for raw in ws:
                message = json.loads(raw)
                method, request_id = message.get("method"), message.get("id")
                if method == "initialize":
                    if self.initialize_size is not None:
                        await ws.send(padded(request_id, self.initialize_size))
                        continue
                    session = message["params"].get("resumeSessionId") or "hostile-session"
                    result = {"sessionId": session, "environmentInfo": {"cwd": "/"}}
                    await ws.send(json.dumps({"id": request_id, "result": result}))
                elif method == "test/pad":
                    await ws.send(padded(request_id, message["params"]["size"]))
        except ConnectionClosed:
            pass
        finally:
            self.close_codes.append(ws.close_code)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[HostileServer]:
        async with serve(self._handle, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            self.url = f"ws://127.0.0.1:{port}"
            yield self


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.01)


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_message_at_the_bound_is_taken_and_one_byte_more_fails_the_calls_waiting() -> None:
    """At the bound: accepted. One byte more: the connection is closed (1009, "message too
    big"), the read-only call waiting on it raises ``MessageTooLarge`` (not sent again: it
    would close the next connection too), a changing one ``OutcomeUnknown``; the session
    is resumed, later calls work, and closing leaves no task or descriptor behind."""

    async def main() -> None:
        await asyncio.sleep(0)
        fds, tasks = descriptors(), len(asyncio.all_tasks())
        async with HostileServer().running() as server:
            env = await connect(server.url, max_message_bytes=LIMIT)
            assert len(await env.request("test/pad", {"size": LIMIT}, idempotent=True)) > 0
            hanging = asyncio.ensure_future(env.request("test/hang", {}, idempotent=False))
            waiting = asyncio.ensure_future(env.request("test/hang", {}, idempotent=True))
            await asyncio.sleep(0.05)
            with pytest.raises(MessageTooLarge) as refused:
                await env.request("test/pad", {"size": LIMIT + 1}, idempotent=True)
            message = str(refused.value)
            assert f"max_message_bytes={LIMIT}" in message
            assert "connect(..., max_message_bytes=N)" in message
            assert refused.value.limit == LIMIT
            # Every call waiting on that connection fails with it (which call the message
            # answered cannot be known); one that changes something may have taken effect.
            with pytest.raises(MessageTooLarge):
                await waiting
            with pytest.raises(OutcomeUnknown, match="max_message_bytes") as unknown:
                await hanging
            assert isinstance(unknown.value.__cause__, MessageTooLarge)
            await until(lambda: server.close_codes == [1009])
            # The session goes on, on a new connection.
            assert len(await env.request("test/pad", {"size": LIMIT}, idempotent=True)) > 0
            assert env.recoveries == 1
            assert env.state == "connected"
            await env.close()
        assert len(asyncio.all_tasks()) == tasks
        assert descriptors() == fds

    arun(main(), timeout=15)


def test_an_oversized_handshake_answer_fails_connect_with_the_bound() -> None:
    async def main() -> None:
        await asyncio.sleep(0)
        fds, tasks = descriptors(), len(asyncio.all_tasks())
        async with HostileServer(initialize_size=LIMIT + 1).running() as server:
            with pytest.raises(MessageTooLarge, match=f"max_message_bytes={LIMIT}"):
                await connect(server.url, max_message_bytes=LIMIT)
            await until(lambda: server.close_codes == [1009])
        assert len(asyncio.all_tasks()) == tasks
        assert descriptors() == fds

    arun(main(), timeout=15)


def test_the_bound_reaches_the_sync_facade_and_is_checked() -> None:
    with pytest.raises(ClientError, match="max_message_bytes must be positive"):
        connect("ws://127.0.0.1:1", max_message_bytes=0)

    async def main() -> None:
        async with HostileServer(initialize_size=LIMIT + 1).running() as server:
            with pytest.raises(MessageTooLarge):
                await asyncio.to_thread(connect_sync, server.url, max_message_bytes=LIMIT)

    arun(main(), timeout=15)


STDIO_SERVER = """
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        result = {"sessionId": "s", "environmentInfo": {}}
        print(json.dumps({"id": message["id"], "result": result}), flush=True)
    elif message.get("method") == "test/pad":
        size = message["params"]["size"]
        shell = json.dumps({"id": message["id"], "result": ""}, separators=(",", ":"))
        print(shell.replace('""', '"' + "x" * (size - len(shell)) + '"'), flush=True)
"""


def test_a_stdio_line_past_the_bound_fails_the_session() -> None:
    """Over stdio the bound is the line's (its newline not counted); a stdio session
    cannot be resumed, so it fails, naming the bound."""

    async def main() -> None:
        env = await connect([sys.executable, "-c", STDIO_SERVER], max_message_bytes=LIMIT)
        try:
            assert len(await env.request("test/pad", {"size": LIMIT}, idempotent=True)) > 0
            with pytest.raises(MessageTooLarge, match=f"max_message_bytes={LIMIT}"):
                await env.request("test/pad", {"size": LIMIT + 1}, idempotent=True)
            with pytest.raises(SessionFailed, match=f"max_message_bytes={LIMIT}"):
                await env.request("test/pad", {"size": 100}, idempotent=True)
        finally:
            await env.close()

    arun(main(), timeout=15)


def test_a_real_daemon_answer_past_the_bound_leaves_the_session_usable(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    """``fs/readFile`` of a file whose answer exceeds the bound fails with the bound's
    error, as does ``read_stream`` with blocks over it; a process started before keeps its
    output, and ``read_stream`` with blocks under the bound reads the same file."""
    data = os.urandom(LIMIT)  # base64: a third more than the bound
    path = tmp_path / "big"
    path.write_bytes(data)

    async def main() -> None:
        async with connect(daemon.url, max_message_bytes=LIMIT) as env:
            proc = await env.start(["sh", "-c", "echo before; read x; echo after"], stdin=True)
            assert (await anext(proc.output())).data == b"before\n"
            small = data[: LIMIT // 2]  # base64 and envelope: under the bound
            (path.parent / "small").write_bytes(small)
            assert await env.fs.read_file(str(path.parent / "small")) == small
            with pytest.raises(MessageTooLarge, match=f"max_message_bytes={LIMIT}"):
                await env.fs.read_file(str(path))
            with pytest.raises(MessageTooLarge):  # not read again and again
                async for _ in env.fs.read_stream(str(path), block_size=LIMIT):
                    pass
            blocks = [b async for b in env.fs.read_stream(str(path), block_size=LIMIT // 2)]
            assert b"".join(blocks) == data
            assert env.recoveries == 2
            await proc.write(b"\n")
            result = await proc.collect()
            assert (result.exit_code, result.stdout) == (0, b"after\n")

    arun(main(), timeout=20)
