"""The sans-I/O WebSocket frame reader (RFC 6455 §5) as a unit: events, limits, errors."""

from __future__ import annotations

import importlib.util
import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from executor.transports import frames
from executor.transports.frames import (
    Close,
    FrameError,
    FrameReader,
    Message,
    Ping,
    Pong,
    close_payload,
    frame_header,
)

TEXT, BINARY, CONT, CLOSE, PING, PONG = 0x1, 0x2, 0x0, 0x8, 0x9, 0xA


def client_frame(
    opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0, masked: bool = True
) -> bytes:
    """A frame as a client sends it (masked with a random key)."""
    first = (0x80 if fin else 0) | rsv | opcode
    length = len(payload)
    mask_bit = 0x80 if masked else 0
    if length < 126:
        header = struct.pack("!BB", first, mask_bit | length)
    elif length < 65536:
        header = struct.pack("!BBH", first, mask_bit | 126, length)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, length)
    if not masked:
        return header + payload
    key = os.urandom(4)
    return header + key + frames._python_apply_mask(payload, key)


@pytest.fixture(autouse=True, params=["c", "python"])
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs against the reader with its C loops and with pure Python."""
    if request.param == "python":
        monkeypatch.setattr(frames, "_speedups", None)
    elif importlib.util.find_spec("executor.transports._frames") is None:
        pytest.skip("the C loops (executor/transports/_frames.c) are not built")
    return str(request.param)


def reader(max_frame: int = 1 << 20, max_message: int = 1 << 22) -> FrameReader:
    """A reader with generous limits."""
    return FrameReader(max_frame=max_frame, max_message=max_message)


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 200_000], ids=str)
def test_lengths_of_every_encoding(size: int) -> None:
    """7-bit, 16-bit and 64-bit lengths all decode to the exact payload."""
    payload = os.urandom(size)
    assert reader().feed(client_frame(BINARY, payload)) == [Message(payload, False)]


def test_many_frames_in_one_feed_and_split_across_feeds() -> None:
    """Several frames in one chunk, and one frame split byte by byte, both work."""
    data = b"".join(client_frame(TEXT, f"m{i}".encode()) for i in range(50))
    assert reader().feed(data) == [Message(f"m{i}".encode(), True) for i in range(50)]
    one = reader()
    events = []
    for index in range(len(data)):
        events += one.feed(data[index : index + 1])
    assert events == [Message(f"m{i}".encode(), True) for i in range(50)]


def test_fragments_with_interleaved_control_frames() -> None:
    """Continuations reassemble; a ping between fragments is delivered on its own."""
    data = (
        client_frame(TEXT, b"hel", fin=False)
        + client_frame(PING, b"p")
        + client_frame(CONT, b"lo ", fin=False)
        + client_frame(CONT, b"world")
    )
    assert reader().feed(data) == [Ping(b"p"), Message(b"hello world", True)]


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"", Close(None, "")),
        (struct.pack("!H", 1000), Close(1000, "")),
        (struct.pack("!H", 1001) + "bye ü".encode(), Close(1001, "bye ü")),
        (struct.pack("!H", 4000), Close(4000, "")),
    ],
    ids=["empty", "normal", "reason", "private-code"],
)
def test_close_frames(payload: bytes, expected: Close) -> None:
    """Close frames carry an optional code and UTF-8 reason."""
    assert reader().feed(client_frame(CLOSE, payload)) == [expected]


def test_pong_event() -> None:
    """Pongs are reported (keepalive)."""
    assert reader().feed(client_frame(PONG, b"k")) == [Pong(b"k")]


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (client_frame(TEXT, b"x", masked=False), 1002),
        (client_frame(TEXT, b"x", rsv=0x40), 1002),
        (client_frame(0x3, b"x"), 1002),
        (client_frame(CONT, b"x"), 1002),
        (client_frame(TEXT, b"a", fin=False) + client_frame(TEXT, b"b"), 1002),
        (client_frame(PING, b"x", fin=False), 1002),
        (client_frame(PING, b"x" * 126), 1002),
        (client_frame(CLOSE, b"\x03"), 1002),
        (client_frame(CLOSE, struct.pack("!H", 999)), 1002),
        (client_frame(CLOSE, struct.pack("!H", 1005)), 1002),
        (client_frame(CLOSE, struct.pack("!H", 1000) + b"\xff"), 1007),
        (client_frame(BINARY, b"x" * 101), 1009),
        (client_frame(TEXT, b"x" * 60, fin=False) + client_frame(CONT, b"y" * 60), 1009),
    ],
    ids=[
        "unmasked",
        "reserved-bit",
        "unknown-opcode",
        "orphan-continuation",
        "data-inside-fragments",
        "fragmented-control",
        "long-control",
        "one-byte-close",
        "bad-close-code",
        "reserved-close-code",
        "close-reason-not-utf8",
        "frame-too-big",
        "message-too-big",
    ],
)
def test_protocol_errors_map_to_close_codes(data: bytes, code: int) -> None:
    """Each violation raises FrameError with the close code to send."""
    with pytest.raises(FrameError) as info:
        reader(max_frame=100, max_message=100).feed(data)
    assert info.value.code == code


def test_oversize_frame_is_refused_from_its_header_alone() -> None:
    """A too-long frame is refused before its payload arrives (no buffering of it)."""
    header = struct.pack("!BBQ", 0x82, 0x80 | 127, 1 << 40)
    with pytest.raises(FrameError) as info:
        reader().feed(header)
    assert info.value.code == 1009


@pytest.mark.parametrize("size", [0, 1, 3, 4, 5, 1000, 4097], ids=str)
def test_python_mask_matches_c_mask(size: int) -> None:
    """The pure-Python unmasking fallback agrees with websockets' C implementation."""
    from websockets.utils import apply_mask as reference

    data, key = os.urandom(size), os.urandom(4)
    assert frames._python_apply_mask(data, key) == reference(data, key)
    assert frames.apply_mask(data, key) == reference(data, key)


@pytest.mark.parametrize(
    ("opcode", "length", "expected"),
    [
        (TEXT, 5, b"\x81\x05"),
        (CLOSE, 2, b"\x88\x02"),
        (TEXT, 126, b"\x81\x7e\x00\x7e"),
        (TEXT, 65536, b"\x81\x7f" + (65536).to_bytes(8, "big")),
    ],
    ids=["small-text", "close", "16-bit", "64-bit"],
)
def test_server_frame_headers(opcode: int, length: int, expected: bytes) -> None:
    """Server frames are final and unmasked, with the shortest length encoding."""
    assert frame_header(opcode, length) == expected


def test_close_payload_truncates_reason_on_a_character_boundary() -> None:
    """A close payload never exceeds 125 bytes nor splits a UTF-8 character."""
    payload = close_payload(1000, "é" * 100)
    assert len(payload) <= 125
    payload[2:].decode("utf-8")
    assert close_payload(1009)[:2] == b"\x03\xf1"


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (client_frame(TEXT, b"x", masked=False), 1002),
        (client_frame(TEXT, b"x", rsv=0x20), 1002),
        (client_frame(0xB, b""), 1002),
        (client_frame(BINARY, b"x" * 101), 1009),
        (client_frame(TEXT, b"\xff"), 1007),
        (client_frame(CLOSE, struct.pack("!H", 1004)), 1002),
    ],
    ids=["unmasked", "reserved-bit", "reserved-opcode", "too-big", "not-utf8", "bad-close-code"],
)
def test_frames_before_a_bad_one_in_the_same_feed_come_with_the_error(
    bad: bytes, code: int
) -> None:
    """A bad frame does not swallow the valid ones read with it: the error carries them."""
    good = client_frame(TEXT, b'{"id":1}') + client_frame(PING, b"p") + client_frame(BINARY, b"b")
    with pytest.raises(FrameError) as info:
        reader(max_frame=100).feed(good + bad + client_frame(TEXT, b"never"))
    assert info.value.code == code
    assert info.value.events == [Message(b'{"id":1}', True), Ping(b"p"), Message(b"b", False)]


def test_text_must_be_utf8_and_binary_need_not() -> None:
    """Invalid UTF-8 fails a text message with 1007; a binary message is just bytes."""
    assert reader().feed(client_frame(TEXT, "κόσμε".encode())) == [Message("κόσμε".encode(), True)]
    assert reader().feed(client_frame(BINARY, b"\xff")) == [Message(b"\xff", False)]
    with pytest.raises(FrameError) as info:
        reader().feed(client_frame(TEXT, b"ok \xed\xa0\x80"))  # a surrogate
    assert info.value.code == 1007


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_a_character_may_span_fragments(cut: int) -> None:
    """A multi-byte character split across fragments (a ping between them) is valid."""
    data = "a𝄞b".encode()
    one = reader()
    assert one.feed(client_frame(TEXT, data[: 1 + cut], fin=False)) == []
    assert one.feed(client_frame(PING, b"")) == [Ping(b"")]
    assert one.feed(client_frame(CONT, data[1 + cut :])) == [Message(data, True)]


@pytest.mark.parametrize(
    ("fragments", "failing"),
    [
        ([b"valid ", b"\xff", b"never sent"], 1),
        ([b"valid \xf4", b"\x90\x80\x80", b"never sent"], 1),  # above U+10FFFF, across a cut
        ([b"valid ", b"\xc0\xaf"], 1),  # overlong
        ([b"\xed\xa0", b"\x80"], 1),  # surrogate, across a cut
        ([b"ok", b"ok", b"\xe2\x82"], 2),
    ],
    ids=["invalid-byte", "too-high", "overlong", "surrogate", "truncated-at-the-end"],
)
def test_fragmented_text_fails_at_the_fragment_that_breaks_it(
    fragments: list[bytes], failing: int
) -> None:
    """The incremental check fails on the first fragment that cannot be UTF-8 (RFC 6455 §8.1)."""
    one = reader()
    last = len(fragments) - 1
    frames = [
        client_frame(TEXT if index == 0 else CONT, fragment, fin=index == last)
        for index, fragment in enumerate(fragments)
    ]
    for frame in frames[:failing]:
        assert one.feed(frame) == []
    with pytest.raises(FrameError) as info:
        one.feed(frames[failing])
    assert info.value.code == 1007


def test_binary_fragments_are_not_decoded() -> None:
    """Fragmented binary messages are not checked for UTF-8."""
    one = reader()
    assert one.feed(client_frame(BINARY, b"\xff", fin=False)) == []
    assert one.feed(client_frame(CONT, b"\xfe")) == [Message(b"\xff\xfe", False)]


def test_runs_of_small_and_fragmented_frames_match_frame_by_frame() -> None:
    """Many small messages and a message in many fragments (the C loops' runs) reassemble."""
    text = b'{"id":1,"method":"environment/status"}'
    burst = b"".join(client_frame(TEXT, text) for _ in range(100))
    body = os.urandom(3000).hex().encode()
    parts = [body[at : at + 64] for at in range(0, len(body), 64)]
    fragmented = b"".join(
        client_frame(TEXT if index == 0 else CONT, part, fin=index == len(parts) - 1)
        for index, part in enumerate(parts)
    )
    data = burst + fragmented + burst
    expected = [Message(text, True)] * 100 + [Message(body, True)] + [Message(text, True)] * 100
    for read_size in (len(data), 4096, 69, 7):
        one = reader()
        events = []
        for at in range(0, len(data), read_size):
            events += one.feed(data[at : at + read_size])
        assert events == expected


def test_a_run_of_fragments_stops_at_the_message_limit() -> None:
    """Continuations past the message limit are refused, not joined."""
    one = reader(max_frame=100, max_message=250)
    data = client_frame(TEXT, b"a" * 100, fin=False) + b"".join(
        client_frame(CONT, b"b" * 100, fin=False) for _ in range(3)
    )
    with pytest.raises(FrameError) as info:
        one.feed(data)
    assert info.value.code == 1009


_FRAME = st.tuples(
    st.sampled_from([TEXT, BINARY, CONT, PING, PONG, 0x3]),
    st.binary(max_size=200) | st.sampled_from([b"\xff", b"\xc3", b"abc\xe2\x82", b"\xac"]),
    st.booleans(),  # fin
    st.sampled_from([0, 0, 0, 0x40]),  # rsv
    st.sampled_from([True, True, True, False]),  # masked
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(frames_=st.lists(_FRAME, max_size=12), read_size=st.integers(1, 400))
def test_c_and_python_readers_agree(
    frames_: list[tuple[int, bytes, bool, int, bool]], read_size: int, implementation: str
) -> None:
    """Any frame sequence, valid or not, yields the same events and error either way."""
    if implementation == "python":
        return  # one comparison per example is enough; it runs both readers itself
    data = b"".join(
        client_frame(opcode, payload, fin=fin, rsv=rsv, masked=masked)
        for opcode, payload, fin, rsv, masked in frames_
    )

    def run() -> tuple[list[frames.Event], int | None]:
        one = reader(max_frame=150, max_message=400)
        events: list[frames.Event] = []
        for at in range(0, len(data), read_size):
            try:
                events += one.feed(data[at : at + read_size])
            except FrameError as exc:
                return [*events, *exc.events], exc.code
        return events, None

    with_c = run()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(frames, "_speedups", None)
        assert run() == with_c


@pytest.mark.parametrize("opcode", [TEXT, BINARY])
def test_large_frames_split_across_reads(opcode: int) -> None:
    """A frame of several MiB arriving read by read (received into a buffer of its own) is
    exact, and the frames after it in the same read follow."""
    payload = os.urandom(3 * 1024 * 1024 // 2).hex().encode()  # 3 MiB of ASCII
    data = client_frame(opcode, payload) + client_frame(TEXT, b"next") + client_frame(PING, b"p")
    one = reader(max_frame=1 << 23, max_message=1 << 23)
    events = []
    for at in range(0, len(data), 65536):
        events += one.feed(data[at : at + 65536])
    assert len(events) == 3
    assert isinstance(events[0], Message)
    assert bytes(events[0].data) == payload
    assert events[0].text is (opcode == TEXT)
    assert events[1:] == [Message(b"next", True), Ping(b"p")]


def test_a_large_frame_is_checked_when_complete() -> None:
    """Invalid UTF-8 at the end of a large text frame, reserved bits on a large frame, and a
    large first fragment followed by continuations, each as frame-by-frame parsing has it."""
    big = b"a" * (2 * 1024 * 1024)
    for data, code in (
        (client_frame(TEXT, big + b"\xff"), 1007),
        (client_frame(BINARY, big, rsv=0x40), 1002),
    ):
        one = reader(max_frame=1 << 23, max_message=1 << 23)
        cut = len(data) - 50_000
        assert one.feed(data[:100_000]) == []
        assert one.feed(data[100_000:cut]) == []
        with pytest.raises(FrameError) as info:
            one.feed(data[cut:])
        assert info.value.code == code
    one = reader(max_frame=1 << 23, max_message=1 << 23)
    data = client_frame(TEXT, big, fin=False) + client_frame(CONT, b"\xc3", fin=False)
    data += client_frame(CONT, b"\xa9") + client_frame(TEXT, b"after")
    events = []
    for at in range(0, len(data), 100_000):
        events += one.feed(data[at : at + 100_000])
    assert events == [Message(big + "é".encode(), True), Message(b"after", True)]
