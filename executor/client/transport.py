"""Transports: one JSON-RPC object per WebSocket message, or per line on a child's pipes.

A ``Connector`` opens a fresh ``Transport`` each time the client (re)connects. Only a
WebSocket connector is ``resumable``: a stdio server is a process of its own, and a new one
has a new session registry, so the session cannot outlive its pipes.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Sequence
from typing import Any, Protocol

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, PayloadTooBig
from websockets.frames import CloseCode

from executor.client.errors import ClientError, ConnectionLost, MessageTooLarge
from executor.protocol import jsonrpc

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "Connector",
    "StdioConnector",
    "Transport",
    "WebSocketConnector",
    "connector_for",
    "is_permanent_connect_error",
]

#: Largest message accepted from a server, WebSocket message or stdio line. The protocol
#: sets none, but a client that accepts any size lets a hostile server make it allocate
#: without bound. The largest answers a daemon gives by default are a 256 MiB
#: ``fs/readFile`` or buffered ``http/request`` body, base64: about 342 MiB.
DEFAULT_MAX_MESSAGE_BYTES = 384 << 20

#: A stdio reader's bound when the caller wants none (asyncio's reader needs a number).
_UNBOUNDED_LINE = 1 << 62


class Transport(Protocol):
    """One connection: whole messages in and out."""

    async def send(self, message: dict[str, Any]) -> None:
        """Send one message; raises ``ConnectionLost`` (``sent=False``) once closed."""

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or ``None`` once the connection has ended."""

    async def close(self) -> None:
        """Close the connection and release everything it holds; idempotent."""


class Connector(Protocol):
    """Opens connections to one server."""

    #: Whether a new connection can resume a session of an earlier one.
    resumable: bool

    async def open(self) -> Transport:
        """A new connection; raises ``OSError``/``ClientError`` when it cannot be opened."""


def _encode(message: dict[str, Any]) -> bytes:
    try:
        return jsonrpc.dumps_exact(message)
    except ValueError as exc:
        # A lone surrogate (a path decoded from bytes that are not UTF-8): sent as it is, the
        # server refuses it; replaced, it would name another file.
        raise ClientError(f"cannot send {message.get('method')}: {exc}") from None


def _decode(raw: str | bytes) -> dict[str, Any]:
    message = jsonrpc.loads(raw)
    if not isinstance(message, dict):
        raise ClientError(f"the server sent a message that is not an object: {raw[:200]!r}")
    return message


class WebSocketTransport:
    """A ``Transport`` over an open ``websockets`` client connection."""

    def __init__(self, ws: ClientConnection, max_message_bytes: int | None) -> None:
        self._ws = ws
        self._max_message_bytes = max_message_bytes
        self._closing: asyncio.Future[None] | None = None

    async def send(self, message: dict[str, Any]) -> None:
        try:
            await self._ws.send(_encode(message), text=True)
        except ConnectionClosed as exc:
            raise ConnectionLost(f"connection closed: {exc}", sent=False) from exc

    async def receive(self) -> dict[str, Any] | None:
        try:
            # Bytes, not text: the parser takes UTF-8 as it came (and checks it).
            raw = await self._ws.recv(decode=False)
        except ConnectionClosed as exc:
            if self._max_message_bytes is not None and _refused_as_too_big(exc):
                raise MessageTooLarge(self._max_message_bytes) from None
            return None
        return _decode(raw)

    async def close(self) -> None:
        # One closing for every caller, shielded: a caller cancelled mid-way (the reader,
        # a caller's timeout) must not leave the socket half closed.
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        await self._ws.close()
        # A peer that never answers the close handshake is cut by close_timeout; wait for
        # the socket to be gone so no descriptor outlives close().
        await self._ws.wait_closed()


def _refused_as_too_big(exc: ConnectionClosed) -> bool:
    """Whether this client closed the connection because a message exceeded its bound
    (websockets announces the size first and reads none of the payload)."""
    if isinstance(exc.__cause__, PayloadTooBig):
        return True
    sent = exc.sent
    return sent is not None and sent.code == CloseCode.MESSAGE_TOO_BIG and not exc.rcvd_then_sent


class WebSocketConnector:
    """``ws://`` or ``wss://`` URLs, with an optional bearer token."""

    resumable = True

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        open_timeout: float = 10.0,
        ping_interval: float | None = 10.0,
        ping_timeout: float | None = 10.0,
        close_timeout: float = 2.0,
        max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self.url = url
        self.max_message_bytes = max_message_bytes
        self._headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        self._open_timeout = open_timeout
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._close_timeout = close_timeout

    async def open(self) -> Transport:
        ws = await ws_connect(
            self.url,
            additional_headers=self._headers,
            # The server refuses any upgrade carrying an Origin (a browser guard); none is
            # sent. The bound is checked on each frame's announced length, before its
            # payload is read.
            max_size=self.max_message_bytes,
            compression=None,
            # Straight to the executor, as the URL says: not through an environment proxy.
            proxy=None,
            open_timeout=self._open_timeout,
            ping_interval=self._ping_interval,
            ping_timeout=self._ping_timeout,
            close_timeout=self._close_timeout,
            user_agent_header="executor-client",
        )
        return WebSocketTransport(ws, self.max_message_bytes)


class StdioTransport:
    """A ``Transport`` over a child process speaking newline-delimited JSON."""

    def __init__(self, process: asyncio.subprocess.Process, max_message_bytes: int | None) -> None:
        self._process = process
        self._max_message_bytes = max_message_bytes
        self._closed = False
        self._closing: asyncio.Future[None] | None = None

    async def send(self, message: dict[str, Any]) -> None:
        stdin = self._process.stdin
        if self._closed or stdin is None or stdin.is_closing():
            raise ConnectionLost("the stdio server's stdin is closed", sent=False)
        stdin.write(_encode(message) + b"\n")
        try:
            await stdin.drain()
        except (ConnectionError, BrokenPipeError) as exc:
            raise ConnectionLost(f"the stdio server went away: {exc}") from exc

    async def receive(self) -> dict[str, Any] | None:
        stdout = self._process.stdout
        assert stdout is not None
        while True:
            try:
                line = await stdout.readuntil(b"\n")
            except asyncio.IncompleteReadError:
                return None
            except asyncio.LimitOverrunError as exc:
                if self._max_message_bytes is not None:
                    raise MessageTooLarge(self._max_message_bytes) from None
                raise ClientError(f"the stdio server sent an overlong line: {exc}") from exc
            if line.strip():
                return _decode(line)

    async def close(self) -> None:
        # One closing for every caller, shielded, so that the server is always reaped.
        self._closed = True
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        process = self._process
        if process.stdin is not None:
            # EOF on its stdin ends a stdio server, and every process it started.
            process.stdin.close()
            with contextlib.suppress(ConnectionError, BrokenPipeError):
                await process.stdin.wait_closed()
        try:
            await asyncio.wait_for(process.wait(), timeout=5.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


class StdioConnector:
    """``stdio:CMD ARG...``: run CMD; its stdin and stdout carry the protocol."""

    resumable = False

    def __init__(
        self, argv: Sequence[str], *, max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES
    ) -> None:
        if not argv:
            raise ClientError("stdio: needs a command, e.g. stdio:executor serve --listen stdio")
        self.argv = list(argv)
        self.max_message_bytes = max_message_bytes

    async def open(self) -> Transport:
        process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            # stderr stays ours: the server's logs, and ssh's prompts, reach the user.
            # A line longer than this (its newline not counted) is refused, and at most
            # about twice this much is buffered while looking for the newline.
            limit=_UNBOUNDED_LINE if self.max_message_bytes is None else self.max_message_bytes,
        )
        return StdioTransport(process, self.max_message_bytes)


def connector_for(
    url: str | Sequence[str],
    *,
    token: str | None = None,
    open_timeout: float = 10.0,
    max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
) -> Connector:
    """The connector for ``url``: ``ws://``/``wss://`` URLs, ``stdio:CMD ARG...`` (split as a
    shell would, without running a shell), or an argv list for stdio. ``max_message_bytes``:
    the largest message accepted from the server (``None``: no bound)."""
    if not isinstance(url, str):
        return StdioConnector(list(url), max_message_bytes=max_message_bytes)
    if url.startswith(("ws://", "wss://")):
        return WebSocketConnector(
            url, token=token, open_timeout=open_timeout, max_message_bytes=max_message_bytes
        )
    if url.startswith("stdio:"):
        if token is not None:
            raise ClientError("a token is for WebSocket connections; stdio has none")
        argv = shlex.split(url.removeprefix("stdio:").removeprefix("//"))
        return StdioConnector(argv, max_message_bytes=max_message_bytes)
    raise ClientError(f"unsupported executor URL {url!r}: expected ws://HOST:PORT or stdio:CMD")


def is_permanent_connect_error(exc: BaseException) -> bool:
    """An error opening a connection that retrying will not fix: the server refused the
    upgrade for a client reason (401 bad token, 403, 404). Refused connections, timeouts
    and 5xx answers (a restarting proxy) are worth retrying."""
    if isinstance(exc, InvalidStatus):
        status = exc.response.status_code
        return 400 <= status < 500 and status not in (408, 429)
    return False
