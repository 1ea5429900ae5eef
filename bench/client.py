"""A lean asyncio WebSocket client for benchmarks: the client must never be the bottleneck.

It speaks just enough RFC 6455 for an exec-server: one upgrade, unfragmented masked text
frames out (with an all-zero mask, which the RFC permits a server to accept and which makes
masking free), text/binary/ping/close frames in. Responses are matched to requests by id;
notifications are routed to per-process listeners. ``TCP_NODELAY`` is set so that the
client's own Nagle delay never shows up in a latency.

Output is counted from the raw frames, never decoded: a ``process/output`` notification is
recognised by a few byte searches (its ``processId`` and the extent of its base64 ``chunk``),
and any other message carrying a large base64 field (``deltaBase64``, ``dataBase64``) is
parsed with that field cut out. A server that sends many small chunks (the reference: 8 KiB)
must not cost this client more per byte than one that sends few large ones; what each
message still costs is reported next to the daemon's CPU (``bench.harness.CpuMeter``).

``bench.blocking`` has the same protocol driven by blocking socket calls, for the
per-request cases.
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import struct
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

try:
    import orjson

    def _loads(data: bytes | bytearray) -> Any:
        return orjson.loads(data)

    def _dumps(value: Any) -> bytes:
        return orjson.dumps(value)

except ImportError:  # pragma: no cover - the benchmark venv has orjson
    import json

    def _loads(data: bytes | bytearray) -> Any:
        return json.loads(bytes(data))

    def _dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()


__all__ = [
    "BASE64",
    "DECODED_BYTES",
    "Base64Hook",
    "BenchClient",
    "RpcFailure",
    "decoded_length",
    "frame",
]

_ZERO_MASK = b"\x00\x00\x00\x00"
Listener = Callable[[dict[str, Any]], None]
#: ``(buffer, start, end)`` of a base64 field's text -> a value for the message.
Base64Hook = Callable[[bytearray, int, int], Any]

#: Added to a message whose base64 field was cut out: the bytes that field encoded.
DECODED_BYTES = "_decodedBytes"
#: Added as well when ``BenchClient.base64_hook`` is set: what the hook said of the field.
BASE64 = "_base64"
#: Base64 fields cut out of large messages (``"name":"`` as it appears on the wire).
_BASE64_KEYS = (b'"chunk":"', b'"deltaBase64":"', b'"dataBase64":"')
#: Both servers put these fields near the start of a message; searched only this far.
_HEAD_BYTES = 256
#: Smaller messages are simply parsed.
_ELIDE_FROM = 1024
_OUTPUT_PREFIX = b'{"method":"process/output"'
#: What one read asks for at least.
_READ_BYTES = 256 * 1024
_U16 = struct.Struct("!H").unpack_from
_U64 = struct.Struct("!Q").unpack_from
_PROCESS_ID = b'"processId":"'
_CHUNK = b'"chunk":"'


def decoded_length(text: bytes | bytearray, start: int = 0, end: int | None = None) -> int:
    """How many bytes the (padded) base64 in ``text[start:end]`` decodes to."""
    end = len(text) if end is None else end
    if end <= start:
        return 0
    padding = (text[end - 1] == 0x3D) + (end - start > 1 and text[end - 2] == 0x3D)
    return (end - start) // 4 * 3 - padding


class RpcFailure(Exception):
    """An error response."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.error = error


def frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """One final, masked (zero key) client frame."""
    length = len(payload)
    if length < 126:
        header = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
    elif length < 1 << 16:
        header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
    return header + _ZERO_MASK + payload


class BenchClient(asyncio.BufferedProtocol):
    """One WebSocket connection to an exec-server.

    The socket is read straight into one receive buffer (``BufferedProtocol``), parsed in
    place, and the buffer is compacted or grown only between reads; a frame larger than the
    buffer grows it once to the frame's size, so a 90 MB answer is received without being
    copied (a ``bytearray`` grown by appending copied it many times over).
    """

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray(_READ_BYTES)
        self._start = 0  # the first byte not parsed yet
        self._end = 0  # the end of what was received
        self._need = 0  # the size of the frame at _start, when it does not fit the buffer
        self._upgraded = False
        self._opened: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self._pending: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self._next_id = 1
        self.listeners: dict[str, Listener] = {}
        #: ``process/output`` counted without parsing: processId (bytes) -> its watch.
        self.sinks: dict[bytes, ProcessWatch] = {}
        #: Called with the receive buffer and the extent of each cut-out base64 field, in
        #: place (nothing is copied); what it returns is added to the message as ``BASE64``.
        self.base64_hook: Base64Hook | None = None
        self.unrouted = 0
        #: Frames queued while handling inbound data; flushed in one write afterwards.
        self._outbox: list[bytes] = []
        self._pipeline: _Pipeline | None = None
        self.session_id: str | None = None

    # --- connection -------------------------------------------------------------------------

    @classmethod
    async def connect(cls, url: str, *, initialize: bool = True) -> BenchClient:
        """Connect (and by default complete the handshake)."""
        parts = urlsplit(url)
        assert parts.hostname is not None
        assert parts.port is not None
        loop = asyncio.get_running_loop()
        _transport, client = await loop.create_connection(cls, parts.hostname, parts.port)
        key = base64.b64encode(os.urandom(16)).decode()
        host = f"{parts.hostname}:{parts.port}"
        client._write(
            (
                f"GET / HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        await asyncio.wait_for(client._opened, 10)
        if initialize:
            result = await client.request("initialize", {"clientName": "bench"})
            client.session_id = result["sessionId"]
            client.notify("initialized", {})
        return client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._opened.done():
            self._opened.set_exception(ConnectionError("closed during the upgrade"))
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("connection lost"))
        self._pending.clear()
        if not self.closed.done():
            self.closed.set_result(None)

    def close(self) -> None:
        """Drop the connection."""
        if self._transport is not None:
            self._transport.close()

    def _write(self, data: bytes) -> None:
        assert self._transport is not None
        self._transport.write(data)

    # --- inbound ----------------------------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        """Room for the next read: compact, then grow to the pending frame's size if needed.

        Only here may the buffer move or change size: while ``buffer_updated`` runs, the
        event loop still holds the view this returned. It never shrinks: a connection that
        received one large answer (a warm-up) receives the next one into memory it has
        already touched, not into fresh pages that fault in the measured window.
        """
        start, end, buffer = self._start, self._end, self._buffer
        if start == end:  # everything parsed: start over at the front, nothing to move
            self._start = self._end = start = end = 0
        # Room for the frame being received (or what is left unparsed) and a read past it,
        # decided once per frame: a buffer sized to the frame alone grew again (a fresh copy
        # of the whole frame) when its last read came in.
        wanted = max(self._need, end - start) + _READ_BYTES
        if len(buffer) - start < wanted or len(buffer) - end < _READ_BYTES // 2:
            if len(buffer) < wanted:
                grown = bytearray(wanted)
                grown[: end - start] = buffer[start:end]
                self._buffer = buffer = grown
            else:
                buffer[: end - start] = buffer[start:end]
            self._start, self._end = 0, end - start
        return memoryview(buffer)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        if not self._upgraded and not self._upgrade():
            return
        self._parse_frames()
        if self._outbox:
            data = b"".join(self._outbox)
            self._outbox.clear()
            self._write(data)

    def data_received(self, data: bytes) -> None:
        """Feed ``data`` as if it had been read from the socket (tests)."""
        view = memoryview(data)
        while view:
            target = self.get_buffer(len(view))
            count = min(len(target), len(view))
            target[:count] = view[:count]
            target.release()
            self.buffer_updated(count)
            view = view[count:]

    def _upgrade(self) -> bool:
        """Consume the HTTP response to the upgrade; True once frames may follow."""
        buffer = self._buffer
        end = buffer.find(b"\r\n\r\n", self._start, self._end)
        if end < 0:
            return False
        status = bytes(buffer[self._start : end]).split(b" ", 2)[1]
        self._start = end + 4
        if status != b"101":
            self._opened.set_exception(ConnectionError(f"upgrade refused: {status!r}"))
            return False
        self._upgraded = True
        self._opened.set_result(None)
        return True

    def _parse_frames(self) -> None:
        buffer = self._buffer
        offset, size = self._start, self._end
        self._need = 0
        while size - offset >= 2:
            first, second = buffer[offset], buffer[offset + 1]
            length = second & 0x7F
            head = 2
            if length == 126:
                if size - offset < 4:
                    break
                (length,) = _U16(buffer, offset + 2)
                head = 4
            elif length == 127:
                if size - offset < 10:
                    break
                (length,) = _U64(buffer, offset + 2)
                head = 10
            if size - offset < head + length:
                self._need = head + length
                break
            start = offset + head
            offset = start + length
            run = self._pipeline
            # Pipelined answers are recognised in place (no copy): the client should cost
            # as little as possible of each measured round trip.
            if run is not None and buffer.startswith(b'{"id":', start):
                run.answered(self._outbox)
                continue
            if length >= _ELIDE_FROM and first & 0x0F in (0x1, 0x2):
                if buffer.startswith(_OUTPUT_PREFIX, start) and self._count_output(
                    buffer, start, offset
                ):
                    continue
                message = self._elided(buffer, start, offset)
                if message is not None:
                    self._on_message(message)
                    continue
            payload = buffer[start:offset]
            if run is not None and payload[:9] == b'{"error":':
                run.failed(_loads(payload)["error"])
                continue
            self._on_frame(first & 0x0F, payload)
        self._start = offset

    def _count_output(self, buffer: bytearray, start: int, end: int) -> bool:
        """A watched ``process/output`` message: count its bytes in place (no parse, no copy).

        Both servers end the message with the chunk (``..."chunk":"<base64>"}}``); another
        shape takes the general path.
        """
        head = start + _HEAD_BYTES
        key = buffer.find(_PROCESS_ID, start, head) + len(_PROCESS_ID)
        chunk = buffer.find(_CHUNK, key, head) + len(_CHUNK)
        if key < len(_PROCESS_ID) or chunk < len(_CHUNK) or not buffer.endswith(b'"}}', 0, end):
            return False
        end -= 3
        if buffer.find(b'"', chunk, end) >= 0:  # the chunk is not the last field
            return False
        sink = self.sinks.get(bytes(buffer[key : buffer.find(b'"', key, chunk)]))
        if sink is None:
            return False
        size = (end - chunk) // 4 * 3
        if buffer[end - 1] == 0x3D:  # "=" padding
            size -= 2 if buffer[end - 2] == 0x3D else 1
        sink.output_bytes += size
        sink.output_messages += 1
        return True

    def _elided(self, buffer: bytearray, start: int, end: int) -> dict[str, Any] | None:
        """A large message parsed without its base64 field (``DECODED_BYTES`` says its size)."""
        head = min(end, start + _HEAD_BYTES)
        for key in _BASE64_KEYS:
            field = buffer.find(key, start, head)
            if field >= 0:
                break
        else:
            return None
        text = field + len(key)
        text_end = buffer.find(b'"', text, end)
        if text_end < 0:
            return None
        message: dict[str, Any] = _loads(buffer[start:text] + buffer[text_end:end])
        message[DECODED_BYTES] = decoded_length(buffer, text, text_end)
        if self.base64_hook is not None:
            message[BASE64] = self.base64_hook(buffer, text, text_end)
        return message

    def _on_frame(self, opcode: int, payload: bytearray) -> None:
        if opcode in (0x1, 0x2):
            self._on_message(_loads(payload))
        elif opcode == 0x9:
            self._write(frame(bytes(payload), 0xA))
        elif opcode == 0x8:
            self.close()

    def _on_message(self, message: dict[str, Any]) -> None:
        if "method" in message:
            params = message.get("params") or {}
            key = params.get("processId", params.get("requestId"))
            listener = self.listeners.get(str(key))
            if listener is not None:
                listener(message)
            else:
                self.unrouted += 1
            return
        future = self._pending.pop(message.get("id"), None)
        if future is not None and not future.done():
            future.set_result(message)

    # --- outbound ---------------------------------------------------------------------------

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification."""
        self._write(frame(_dumps({"method": method, "params": params})))

    def submit(self, method: str, params: Any = None) -> asyncio.Future[dict[str, Any]]:
        """Send a request; the future resolves with the raw response object."""
        request_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[dict[str, Any]] = self._loop.create_future()
        self._pending[request_id] = future
        self._write(frame(_dumps({"id": request_id, "method": method, "params": params})))
        return future

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request and return its result (``RpcFailure`` on an error response)."""
        response = await self.submit(method, params)
        if "error" in response:
            raise RpcFailure(response["error"])
        return response["result"]

    async def pipeline(self, method: str, params: Any, count: int, window: int = 128) -> None:
        """Send ``count`` identical requests, at most ``window`` in flight; wait for all.

        The window keeps the measurement about request handling rather than buffering (and
        the reference wedges when ~1,000 requests with large answers are pipelined, §10a).
        Frames are built before the clock matters, and answers are counted on the receive
        path without decoding them (``{"id":`` starts a result, ``{"error":`` an error, as
        both servers encode them), each releasing the next request in the same write.
        """
        first = self._next_id
        self._next_id += count
        frames = [
            frame(_dumps({"id": request_id, "method": method, "params": params}))
            for request_id in range(first, first + count)
        ]
        run = _Pipeline(self._loop.create_future(), frames)
        self._pipeline = run
        self._write(b"".join(run.take(window)))
        try:
            await run.done
        finally:
            self._pipeline = None

    # --- processes --------------------------------------------------------------------------

    def watch(self, process_id: str) -> ProcessWatch:
        """Listen to a process's notifications (register before starting it)."""
        watch = ProcessWatch(self._loop)
        self.listeners[process_id] = watch.on_event
        self.sinks[process_id.encode()] = watch
        return watch

    def unwatch(self, process_id: str) -> None:
        """Stop listening to a process."""
        self.listeners.pop(process_id, None)
        self.sinks.pop(process_id.encode(), None)

    def start_params(
        self, process_id: str, argv: Iterable[str], *, cwd: str = "file:///tmp", **extra: Any
    ) -> dict[str, Any]:
        """``process/start`` params with the usual defaults."""
        return {
            "processId": process_id,
            "argv": list(argv),
            "cwd": cwd,
            "env": {"PATH": "/usr/bin:/bin"},
            "tty": False,
            **extra,
        }


class ProcessWatch:
    """Counts a process's output and resolves ``closed`` on ``process/closed``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.closed: asyncio.Future[float] = loop.create_future()
        self.exited_at: float | None = None
        self.output_bytes = 0
        self.output_messages = 0
        self.exit_code: int | None = None
        self._loop = loop

    def on_event(self, message: dict[str, Any]) -> None:
        """A notification of this process."""
        method = message["method"]
        params = message["params"]
        if method == "process/output":
            size = message.get(DECODED_BYTES)
            self.output_bytes += decoded_length(params["chunk"].encode()) if size is None else size
            self.output_messages += 1
        elif method == "process/exited":
            self.exited_at = self._loop.time()
            self.exit_code = params["exitCode"]
        elif method == "process/closed" and not self.closed.done():
            self.closed.set_result(self._loop.time())


class _Pipeline:
    """State of one ``pipeline()`` run: prebuilt frames, and how many were answered."""

    __slots__ = ("count", "done", "frames", "next", "received")

    def __init__(self, done: asyncio.Future[None], frames: list[bytes]) -> None:
        self.done = done
        self.frames = frames
        self.count = len(frames)
        self.next = 0
        self.received = 0

    def take(self, n: int) -> list[bytes]:
        """The next ``n`` request frames (fewer at the end)."""
        start, self.next = self.next, min(self.count, self.next + n)
        return self.frames[start : self.next]

    def answered(self, outbox: list[bytes]) -> None:
        """One more result: release the next request into ``outbox``."""
        self.received += 1
        if self.next < self.count:
            outbox.append(self.frames[self.next])
            self.next += 1
        elif self.received == self.count and not self.done.done():
            self.done.set_result(None)

    def failed(self, error: dict[str, Any]) -> None:
        """An error response ends the run."""
        if not self.done.done():
            self.done.set_exception(RpcFailure(error))
