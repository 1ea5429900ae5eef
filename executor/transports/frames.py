"""WebSocket frames, server side (RFC 6455 §5), sans-I/O: bytes in, events out.

Why not websockets' ``Protocol``: it parses every frame through a chain of generators and
enum lookups, which was half of the daemon's CPU time per request (profiled: ~50% at 75k
requests/s). A server that negotiates no extension needs much less: this reader handles the
common case — a masked, final, small text frame — in a few slicing operations and unmasks
with websockets' C ``apply_mask`` when it is available. Everything else the RFC asks of a
server is here too: fragmentation, control frames interleaved with fragments, the size
limits, the close handshake's frame, UTF-8 validation of text messages (a fragmented one
fails at the fragment that makes it invalid, RFC 6455 §8.1), and protocol errors mapped to
close codes.

Events are ``NamedTuple``s (cheaper to build than frozen dataclasses, one per message).
"""

from __future__ import annotations

import codecs
import struct
from collections.abc import Callable
from typing import Final, NamedTuple

from executor.memory import huge_buffer

__all__ = [
    "CLOSE",
    "PING",
    "PONG",
    "SMALL_TEXT_HEADERS",
    "Close",
    "Event",
    "FrameError",
    "FrameReader",
    "Message",
    "Ping",
    "Pong",
    "close_payload",
    "frame_header",
]

CONT: Final = 0x0
TEXT: Final = 0x1
BINARY: Final = 0x2
CLOSE: Final = 0x8
PING: Final = 0x9
PONG: Final = 0xA

#: Close codes a peer may send (RFC 6455 §7.4.1, plus the registered 1012-1014 and 3000-4999).
_VALID_CLOSE_CODES: Final = frozenset(
    {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014}
)


class _LargeFrame:
    """A large frame's payload, received into a mapping of its own and unmasked there.

    Used with the C loops only (they unmask in place). A 16 MiB message otherwise grew a
    buffer read by read and was copied again to unmask it: each copy into fresh pages is
    ~4,000 page faults.
    """

    __slots__ = ("buffer", "filled", "first", "mask")

    def __init__(self, first: int, mask: bytes | bytearray, length: int) -> None:
        self.first = first
        self.mask = bytes(mask)
        self.buffer = huge_buffer(length)
        self.filled = 0

    @property
    def complete(self) -> bool:
        """Whether the whole payload has arrived."""
        return self.filled == len(self.buffer)

    def fill(self, data: bytes | bytearray | memoryview) -> int:
        """Take as much of ``data`` as the payload still lacks; returns how much."""
        count = min(len(data), len(self.buffer) - self.filled)
        with memoryview(data) as view:
            self.buffer[self.filled : self.filled + count] = view[:count]
        self.filled += count
        return count

    def payload(self) -> memoryview:
        """The unmasked payload (call once, when complete)."""
        assert _speedups is not None
        _speedups.unmask_in_place(self.buffer, self.mask)
        return memoryview(self.buffer)


def _python_apply_mask(data: bytes | bytearray | memoryview, mask: bytes | bytearray) -> bytes:
    """XOR ``data`` with the repeated 4-byte ``mask`` (one big-integer operation)."""
    if not data:
        return b""
    size = len(data)
    repeated = (bytes(mask) * (size // 4 + 1))[:size]
    return (int.from_bytes(data, "little") ^ int.from_bytes(repeated, "little")).to_bytes(
        size, "little"
    )


apply_mask: Callable[[bytes | bytearray | memoryview, bytes | bytearray], bytes]
try:  # websockets ships a C implementation; it is a dependency of this package anyway
    from websockets.speedups import apply_mask as _c_apply_mask

    apply_mask = _c_apply_mask
except ImportError:  # pragma: no cover - the pure fallback is tested directly
    apply_mask = _python_apply_mask

try:  # the C loops of the commonest frames (setup.py builds them; optional, like the above)
    from executor.transports import _frames as _speedups
except ImportError:  # pragma: no cover - the Python reader is tested on its own
    _speedups = None  # type: ignore[assignment]


class FrameError(Exception):
    """The peer broke the protocol; close the connection with ``code``.

    ``events`` are those of the valid frames that preceded the bad one in the same ``feed``:
    the peer sent them before breaking the protocol, so they are still to be handled.
    """

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code} {reason}")
        self.code = code
        self.reason = reason
        self.events: list[Event] = []


class Message(NamedTuple):
    """A complete data message (reassembled from its fragments; a view of its own buffer
    when it came as one large frame)."""

    data: bytes | memoryview
    text: bool


class Ping(NamedTuple):
    """A ping; answer with a pong carrying the same payload."""

    payload: bytes


class Pong(NamedTuple):
    """A pong."""

    payload: bytes


class Close(NamedTuple):
    """A close frame; ``code`` is None when the frame carried no status."""

    code: int | None
    reason: str


Event = Message | Ping | Pong | Close

#: ``tuple.__new__`` builds a NamedTuple without its generated Python ``__new__`` (hot path).
_new_tuple: Final = tuple.__new__


#: Payloads at least this large are unmasked from a view of the buffer instead of a copy
#: (a 16 MiB copy into fresh pages costs ~15 ms of page faults on a VM).
_VIEW_AT: Final = 64 * 1024

#: Frames at least this large, not complete in one read, are received into a buffer of
#: their own (``_LargeFrame``).
_OWN_BUFFER_AT: Final = 1024 * 1024

#: The first byte of an unfragmented text frame (FIN, no reserved bits, opcode 1).
_TEXT_FINAL: Final = 0x80 | TEXT

#: Headers of small text frames, the common case, built once.
SMALL_TEXT_HEADERS: Final = tuple(bytes((0x80 | TEXT, length)) for length in range(126))


def frame_header(opcode: int, length: int) -> bytes:
    """The header of a final, unmasked (server) frame of ``length`` payload bytes."""
    if length < 126:
        if opcode == TEXT:
            return SMALL_TEXT_HEADERS[length]
        return bytes((0x80 | opcode, length))
    if length < 65536:
        return struct.pack("!BBH", 0x80 | opcode, 126, length)
    return struct.pack("!BBQ", 0x80 | opcode, 127, length)


def close_payload(code: int, reason: str = "") -> bytes:
    """The payload of a close frame (reason truncated to fit the 125-byte control limit)."""
    encoded = reason.encode("utf-8")[:123]
    while encoded:
        try:
            encoded.decode("utf-8")
            break
        except UnicodeDecodeError:
            encoded = encoded[:-1]
    return struct.pack("!H", code) + encoded


#: A stateful UTF-8 decoder: the bytes of a character split across fragments wait inside it.
_utf8_decoder: Final = codecs.getincrementaldecoder("utf-8")


class FrameReader:
    """Incremental parser of client frames into events, enforcing the size limits.

    ``max_frame`` bounds one frame's payload; ``max_message`` a reassembled message. Either
    violation raises ``FrameError(1009)``; text that is not UTF-8 raises ``FrameError(1007)``;
    other protocol violations raise ``FrameError(1002)``. The error carries the events of the
    frames parsed before the bad one. After an error the reader must not be fed again.
    """

    __slots__ = (
        "_buffer",
        "_fragments",
        "_fragments_size",
        "_fragments_text",
        "_fragments_utf8",
        "_large",
        "_unfragmented_limit",
        "max_frame",
        "max_message",
    )

    def __init__(self, *, max_frame: int, max_message: int) -> None:
        self.max_frame = max_frame
        self.max_message = max_message
        #: The largest unfragmented message: one frame, within both limits.
        self._unfragmented_limit = min(max_frame, max_message)
        self._buffer = bytearray()
        #: A large frame being received into a buffer of its own (see ``_LargeFrame``).
        self._large: _LargeFrame | None = None
        self._fragments: list[bytes | memoryview] | None = None
        self._fragments_size = 0
        self._fragments_text = False
        #: Checks a fragmented text message as it arrives; made at its first non-ASCII byte.
        self._fragments_utf8: codecs.IncrementalDecoder | None = None

    def feed(self, data: bytes) -> list[Event]:
        """Consume ``data``; return the events of every complete frame in it.

        A bad frame raises ``FrameError`` with the events of the frames before it.
        """
        events: list[Event] = []
        start = 0
        large = self._large
        if large is None:
            if not self._buffer and self._fragments is None and _speedups is not None:
                # The commonest read: whole small text frames (a request, or a pipelined
                # batch), all of them taken by the C loop.
                start = _speedups.texts(data, 0, self._unfragmented_limit, events, Message)
                if start == len(data):
                    return events
        else:
            taken = large.fill(data)
            if not large.complete:
                return events
            self._large = None
            event = self._frame(large.first, large.payload())
            if event is not None:
                events.append(event)
            if taken == len(data):
                return events
            data = data[taken:]
        buffer = self._buffer
        if buffer:
            buffer += data
            source: bytes | bytearray = buffer
        else:
            source = data
        offset, size = start, len(source)  # ``start`` is 0 unless the buffer was empty
        speedups = _speedups
        try:  # free unless raised (zero-cost exceptions): the loop stays as fast
            while size - offset >= 2:
                first = source[offset]
                if speedups is not None:
                    # Runs of the commonest frames in C; the first frame it leaves (another
                    # kind, incomplete, too large, not ASCII) goes through the rules below.
                    if first == _TEXT_FINAL and self._fragments is None:
                        resumed = speedups.texts(
                            source, offset, self._unfragmented_limit, events, Message
                        )
                        if resumed != offset:
                            offset = resumed
                            continue
                    elif first == CONT and self._fragments is not None:
                        joined, resumed = speedups.continuations(
                            source,
                            offset,
                            self.max_frame,
                            self.max_message - self._fragments_size,
                        )
                        if resumed != offset:
                            offset = resumed
                            self._add_fragment(joined, final=False)
                            continue
                second = source[offset + 1]
                length = second & 0x7F
                head = offset + 2
                if length >= 126:
                    if length == 126:
                        if size - head < 2:
                            break
                        length = (source[head] << 8) | source[head + 1]
                        head += 2
                    else:
                        if size - head < 8:
                            break
                        length = int.from_bytes(source[head : head + 8], "big")
                        head += 8
                if not second & 0x80:
                    raise FrameError(1002, "incorrect masking")
                self._check_size(first & 0x0F, length)
                end = head + 4 + length
                if end > size:
                    if length >= _OWN_BUFFER_AT and speedups is not None:
                        # The rest of a large frame goes straight into a buffer of its own,
                        # unmasked there in place: no growing buffer, no copy to unmask.
                        large = _LargeFrame(first, source[head : head + 4], length)
                        with memoryview(source) as view:
                            large.fill(view[head + 4 :])
                        self._large = large
                        offset = size
                    break
                if length < _VIEW_AT:
                    payload = apply_mask(source[head + 4 : end], source[head : head + 4])
                else:  # unmasked from a view: a large payload is not copied out first
                    with memoryview(source) as view:
                        payload = apply_mask(view[head + 4 : end], source[head : head + 4])
                offset = end
                event = self._frame(first, payload)
                if event is not None:
                    events.append(event)
        except FrameError as exc:
            exc.events = events
            raise
        if offset:
            if source is buffer:
                del buffer[:offset]
            elif offset < size:
                buffer += data[offset:]
        elif source is not buffer:
            buffer += data
        return events

    def _check_size(self, opcode: int, length: int) -> None:
        if opcode >= CLOSE:
            if length > 125:
                raise FrameError(1002, "control frame too long")
            return
        if length > self.max_frame:
            raise FrameError(1009, f"frame of {length} bytes exceeds the limit of {self.max_frame}")
        if self._fragments_size + length > self.max_message:
            raise FrameError(1009, f"message exceeds the limit of {self.max_message} bytes")

    def _frame(self, first: int, payload: bytes | memoryview) -> Event | None:
        if first & 0x70:
            raise FrameError(1002, "reserved bits must be 0 (no extension was negotiated)")
        opcode = first & 0x0F
        fin = bool(first & 0x80)
        if opcode in (TEXT, BINARY):
            if self._fragments is not None:
                raise FrameError(1002, "expected a continuation frame")
            if fin:
                if opcode == TEXT:
                    # Nearly every JSON message is ASCII: checked in C without building a str.
                    if not _isascii(payload):
                        _check_utf8(payload)
                    return _new_tuple(Message, (payload, True))
                return _new_tuple(Message, (payload, False))
            self._fragments = [payload]
            self._fragments_size = len(payload)
            self._fragments_text = opcode == TEXT
            self._fragments_utf8 = None
            if opcode == TEXT:
                self._check_fragment(payload, final=False)
            return None
        if opcode == CONT:
            fragments = self._fragments
            if fragments is None:
                raise FrameError(1002, "unexpected continuation frame")
            self._add_fragment(payload, final=fin)
            if not fin:
                return None
            self._fragments = None
            self._fragments_size = 0
            self._fragments_utf8 = None
            return Message(b"".join(fragments), self._fragments_text)
        if not fin:
            raise FrameError(1002, "fragmented control frame")
        assert type(payload) is bytes  # control frames are small: never a view
        if opcode == PING:
            return Ping(payload)
        if opcode == PONG:
            return Pong(payload)
        if opcode == CLOSE:
            return _parse_close(payload)
        raise FrameError(1002, f"invalid opcode {opcode:#x}")

    def _add_fragment(self, payload: bytes | memoryview, *, final: bool) -> None:
        """Append the payload of continuation frames to the message being reassembled."""
        assert self._fragments is not None
        self._fragments.append(payload)
        self._fragments_size += len(payload)
        if self._fragments_text:
            self._check_fragment(payload, final=final)

    def _check_fragment(self, payload: bytes | memoryview, *, final: bool) -> None:
        """Check the next fragment of a text message: an invalid sequence fails as soon as
        its bytes arrive, whichever fragment holds them (RFC 6455 §8.1); a character may
        continue in the next fragment unless ``final``."""
        decoder = self._fragments_utf8
        if decoder is None:
            if _isascii(payload):
                return  # no character was left unfinished before it, nor is after it
            decoder = self._fragments_utf8 = _utf8_decoder()
        elif _isascii(payload) and not decoder.getstate()[0]:
            return
        try:
            decoder.decode(payload, final)
        except UnicodeDecodeError:
            raise FrameError(1007, "invalid UTF-8 in a text message") from None


def _isascii(payload: bytes | memoryview) -> bool:
    if type(payload) is bytes:
        return payload.isascii()
    assert _speedups is not None  # only ``_LargeFrame`` makes views, and only with the C loops
    return _speedups.isascii(payload)


def _check_utf8(payload: bytes | memoryview) -> None:
    """Raise ``FrameError(1007)`` unless ``payload`` is UTF-8."""
    try:
        str(payload, "utf-8")
    except UnicodeDecodeError:
        raise FrameError(1007, "invalid UTF-8 in a text message") from None


def _parse_close(payload: bytes) -> Close:
    if not payload:
        return Close(None, "")
    if len(payload) == 1:
        raise FrameError(1002, "close frame with a one-byte payload")
    (code,) = struct.unpack("!H", payload[:2])
    if code not in _VALID_CLOSE_CODES and not 3000 <= code <= 4999:
        raise FrameError(1002, f"invalid close code {code}")
    try:
        reason = payload[2:].decode("utf-8")
    except UnicodeDecodeError:
        raise FrameError(1007, "close reason is not valid UTF-8") from None
    return Close(code, reason)
