"""RFC 6455 server obligations, checked from outside with raw frames against a real daemon.

The frame cases follow the sections of the Autobahn test suite (its case numbers are in the
ids): framing, ping/pong, reserved bits, reserved opcodes, fragmentation, UTF-8, close
handling, masking. Each case sends its frames, then reads what comes back: pongs, answers
(by request id; requests sent before ``initialize`` are answered too, with an error), and
the daemon's close code. A case that leaves the connection open ends with a probe request,
whose answer proves the connection is still served. Every case runs twice: all frames in one
write (so the daemon parses them in one read) and frame by frame.

The HTTP cases check the opening handshake (RFC 6455 §4.2.1) and the request-head limit; the
last tests check that refusals cannot fill the log.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from typing import Any, Final

import pytest

from executor.transports.handshake import MAX_HEAD_BYTES
from tests.support.daemon import RunningDaemon
from tests.support.rawws import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    RawWebSocket,
    client_frame,
    raw_http,
    upgrade_headers,
)

F = client_frame
#: What comes back: ("pong", payload), ("answer", id) or ("close", code or None).
Event = tuple[str, Any]
OPEN: Final[Event] = ("answer", "probe")  # the connection is still served


def request(ident: int | str, pad: bytes = b"") -> bytes:
    """A JSON-RPC request as raw bytes (``pad``, any bytes, in an ignored string field)."""
    head = json.dumps({"id": ident, "method": "environment/status"}).encode()[:-1]
    return head + b',"pad":"' + pad + b'"}'


def sized(ident: int, size: int) -> bytes:
    """A request of exactly ``size`` bytes."""
    return request(ident, b"x" * (size - len(request(ident))))


def close(code: int, reason: bytes = b"") -> bytes:
    """A close frame carrying ``code`` and ``reason``."""
    return F(OP_CLOSE, struct.pack("!H", code) + reason)


@dataclass(frozen=True, slots=True)
class Case:
    """Frames to send and the events expected back, in order."""

    name: str
    frames: list[bytes]
    expected: list[Event]


BAD_UTF8: Final = {
    "invalid-byte": b"\xff",
    "overlong": b"\xc0\xaf",
    "surrogate": b"\xed\xa0\x80",
    "above-10ffff": b"\xf4\x90\x80\x80",
    "five-bytes": b"\xf8\x88\x80\x80\x80",
    "lone-continuation": b"\x80",
}
VALID_CLOSE_CODES: Final = [*range(1000, 1004), *range(1007, 1012), 3000, 3999, 4000, 4999]
INVALID_CLOSE_CODES: Final = [0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535]
CLEF = "𝄞".encode()  # four bytes, split at every boundary below


def _cases() -> list[Case]:
    one, two = request(1), request(2)
    clef = request(1, CLEF)
    at = len(one) - 2  # where the pad's bytes start
    cases = [
        # 1.x framing
        Case("1.1-text", [F(OP_TEXT, one)], [("answer", 1), OPEN]),
        Case("1.2-binary", [F(OP_BINARY, one)], [("answer", 1), OPEN]),
        *(
            Case(f"1.1-length-{size}", [F(OP_TEXT, sized(1, size))], [("answer", 1), OPEN])
            for size in (125, 126, 65535, 65536)
        ),
        Case("1.1-empty-text", [F(OP_TEXT, b"")], [("answer", -1), OPEN]),
        Case(
            "1-two-in-a-row",
            [F(OP_TEXT, one), F(OP_TEXT, two)],
            [("answer", 1), ("answer", 2), OPEN],
        ),
        # 2.x ping / pong
        Case("2.1-ping-empty", [F(OP_PING, b"")], [("pong", b""), OPEN]),
        Case("2.2-ping-text", [F(OP_PING, b"Hello, world!")], [("pong", b"Hello, world!"), OPEN]),
        Case(
            "2.3-ping-binary",
            [F(OP_PING, bytes(range(256))[:8])],
            [("pong", bytes(range(8))), OPEN],
        ),
        Case("2.4-ping-125", [F(OP_PING, b"\xfe" * 125)], [("pong", b"\xfe" * 125), OPEN]),
        Case("2.5-ping-126", [F(OP_PING, b"\xfe" * 126)], [("close", 1002)]),
        Case("2.7-unsolicited-pong", [F(OP_PONG, b"")], [OPEN]),
        Case("2.8-unsolicited-pong-payload", [F(OP_PONG, b"unsolicited")], [OPEN]),
        Case("2.9-pong-then-ping", [F(OP_PONG, b"x"), F(OP_PING, b"y")], [("pong", b"y"), OPEN]),
        Case(
            "2.10-ten-pings",
            [F(OP_PING, b"p%d" % i) for i in range(10)],
            [*(("pong", b"p%d" % i) for i in range(10)), OPEN],
        ),
        # 3.x reserved bits (no extension is ever negotiated)
        Case("3.1-rsv1-text", [F(OP_TEXT, one, rsv=0x40)], [("close", 1002)]),
        Case(
            "3.2-rsv2-after-a-message",
            [F(OP_TEXT, one), F(OP_TEXT, two, rsv=0x20), F(OP_PING, b"")],
            [("answer", 1), ("close", 1002)],
        ),
        Case("3.4-rsv3-text", [F(OP_TEXT, one, rsv=0x10)], [("close", 1002)]),
        Case("3.5-rsv-binary", [F(OP_BINARY, one, rsv=0x50)], [("close", 1002)]),
        Case("3.6-rsv-ping", [F(OP_PING, b"", rsv=0x60)], [("close", 1002)]),
        Case("3.7-rsv-close", [F(OP_CLOSE, b"", rsv=0x70)], [("close", 1002)]),
        # 4.x reserved opcodes, alone and after a valid message
        *(
            Case(f"4-opcode-{opcode:#x}", [F(opcode, b"reserved")], [("close", 1002)])
            for opcode in (0x3, 0x4, 0x5, 0x6, 0x7, 0xB, 0xC, 0xD, 0xE, 0xF)
        ),
        Case(
            "4.1.3-opcode-5-after-a-message",
            [F(OP_TEXT, one), F(0x5, b""), F(OP_PING, b"")],
            [("answer", 1), ("close", 1002)],
        ),
        Case(
            "4.2.3-opcode-0xd-after-a-message",
            [F(OP_TEXT, one), F(0xD, b""), F(OP_PING, b"")],
            [("answer", 1), ("close", 1002)],
        ),
        # 5.x fragmentation
        Case(
            "5.1-fragmented-ping",
            [F(OP_PING, b"a", fin=False), F(OP_CONT, b"b")],
            [("close", 1002)],
        ),
        Case(
            "5.2-fragmented-pong",
            [F(OP_PONG, b"a", fin=False), F(OP_CONT, b"b")],
            [("close", 1002)],
        ),
        Case(
            "5.3-two-fragments",
            [F(OP_TEXT, one[:9], fin=False), F(OP_CONT, one[9:])],
            [("answer", 1), OPEN],
        ),
        Case(
            "5.6-ping-between-fragments",
            [F(OP_TEXT, one[:9], fin=False), F(OP_PING, b"mid"), F(OP_CONT, one[9:])],
            [("pong", b"mid"), ("answer", 1), OPEN],
        ),
        Case("5.9-continuation-of-nothing", [F(OP_CONT, one), F(OP_TEXT, two)], [("close", 1002)]),
        Case("5.12-open-continuation-of-nothing", [F(OP_CONT, one, fin=False)], [("close", 1002)]),
        Case(
            "5.15-continuation-after-the-end",
            [
                F(OP_TEXT, one[:9], fin=False),
                F(OP_CONT, one[9:]),
                F(OP_CONT, two, fin=False),
                F(OP_CONT, b""),
            ],
            [("answer", 1), ("close", 1002)],
        ),
        Case(
            "5.18-text-inside-text",
            [F(OP_TEXT, one[:9], fin=False), F(OP_TEXT, one[9:])],
            [("close", 1002)],
        ),
        Case(
            "5-binary-inside-text",
            [F(OP_TEXT, one[:9], fin=False), F(OP_BINARY, one[9:])],
            [("close", 1002)],
        ),
        Case(
            "5.19-pings-between-many-fragments",
            [
                F(OP_TEXT, one[:4], fin=False),
                F(OP_CONT, one[4:8], fin=False),
                F(OP_PING, b"1"),
                F(OP_CONT, one[8:12], fin=False),
                F(OP_PING, b"2"),
                F(OP_CONT, one[12:]),
            ],
            [("pong", b"1"), ("pong", b"2"), ("answer", 1), OPEN],
        ),
        Case(
            "5-empty-fragments",
            [F(OP_TEXT, b"", fin=False), F(OP_CONT, one, fin=False), F(OP_CONT, b"")],
            [("answer", 1), OPEN],
        ),
        Case(
            "5-binary-fragments",
            [F(OP_BINARY, one[:3], fin=False), F(OP_CONT, one[3:])],
            [("answer", 1), OPEN],
        ),
        Case(
            "5-close-between-fragments",
            [F(OP_TEXT, one[:9], fin=False), close(1000), F(OP_CONT, one[9:])],
            [("close", 1000)],
        ),
        # 6.x UTF-8 in text messages (binary messages are not text: a JSON parse error)
        Case(
            "6-valid-multibyte", [F(OP_TEXT, request(1, "κόσμε €".encode()))], [("answer", 1), OPEN]
        ),
        *(
            Case(
                f"6-char-split-after-byte-{cut}",
                [F(OP_TEXT, clef[: at + cut], fin=False), F(OP_CONT, clef[at + cut :])],
                [("answer", 1), OPEN],
            )
            for cut in (1, 2, 3)
        ),
        *(
            Case(f"6-single-frame-{name}", [F(OP_TEXT, request(1, bad))], [("close", 1007)])
            for name, bad in BAD_UTF8.items()
        ),
        # Fail fast: the fragment that makes the text invalid closes the connection; the
        # message's final fragment is never sent.
        *(
            Case(
                f"6-fragment-{name}",
                [F(OP_TEXT, request(1)[:9], fin=False), F(OP_CONT, bad, fin=False)],
                [("close", 1007)],
            )
            for name, bad in BAD_UTF8.items()
        ),
        Case(
            "6.4.2-invalid-across-fragments",
            [F(OP_TEXT, b'{"pad":"\xf4', fin=False), F(OP_CONT, b"\x90\x80\x80", fin=False)],
            [("close", 1007)],
        ),
        Case(
            "6-truncated-at-the-end",
            [F(OP_TEXT, request(1, b"ok")[:-3], fin=False), F(OP_CONT, b"\xce")],
            [("close", 1007)],
        ),
        Case(
            "6-valid-message-then-invalid-one",
            [F(OP_TEXT, one), F(OP_TEXT, request(2, b"\xff"))],
            [("answer", 1), ("close", 1007)],
        ),
        Case(
            "6-invalid-binary-is-a-parse-error",
            [F(OP_BINARY, request(1, b"\xff"))],
            [("answer", -1), OPEN],
        ),
        # 7.x close handling
        Case("7.1.1-close-empty", [F(OP_CLOSE, b"")], [("close", None)]),
        Case("7.1.2-close-twice", [close(1000), close(1000)], [("close", 1000)]),
        Case("7.1.3-ping-after-close", [close(1000), F(OP_PING, b"late")], [("close", 1000)]),
        Case("7.1.4-text-after-close", [close(1000), F(OP_TEXT, one)], [("close", 1000)]),
        Case(
            "7.1.5-close-inside-a-message",
            [F(OP_TEXT, one[:9], fin=False), close(1000)],
            [("close", 1000)],
        ),
        Case("7.3.2-close-one-byte", [F(OP_CLOSE, b"\x03")], [("close", 1002)]),
        Case("7.3.4-close-with-reason", [close(1000, b"bye")], [("close", 1000)]),
        Case("7.3.5-close-reason-123-bytes", [close(1000, b"r" * 123)], [("close", 1000)]),
        Case("7.3.6-close-reason-124-bytes", [close(1000, b"r" * 124)], [("close", 1002)]),
        Case("7.5.1-close-reason-not-utf8", [close(1000, b"\xce\xba\xff")], [("close", 1007)]),
        *(
            Case(f"7.7-close-code-{code}", [close(code)], [("close", code)])
            for code in VALID_CLOSE_CODES
        ),
        *(
            Case(f"7.9-close-code-{code}", [close(code)], [("close", 1002)])
            for code in INVALID_CLOSE_CODES
        ),
        # masking (RFC 6455 §5.1: a server MUST close on an unmasked client frame)
        Case("unmasked-text", [F(OP_TEXT, one, masked=False)], [("close", 1002)]),
        Case("unmasked-ping", [F(OP_PING, b"", masked=False)], [("close", 1002)]),
        Case("unmasked-close", [F(OP_CLOSE, b"", masked=False)], [("close", 1002)]),
        Case(
            "unmasked-after-two-requests",
            [F(OP_TEXT, one), F(OP_TEXT, two), F(OP_TEXT, request(3), masked=False)],
            [("answer", 1), ("answer", 2), ("close", 1002)],
        ),
    ]
    return cases


CASES: Final = _cases()


def _observe(ws: RawWebSocket, open_expected: bool) -> list[Event]:
    """What the daemon sends until its close frame, or until the probe is answered."""
    if open_expected:
        ws.send_raw(F(OP_TEXT, request("probe")))
    events: list[Event] = []
    while True:
        opcode, payload = ws.recv_frame(timeout=5)
        if opcode == OP_PONG:
            events.append(("pong", payload))
        elif opcode in (OP_TEXT, OP_BINARY):
            ident = json.loads(payload)["id"]
            events.append(("answer", ident))
            if ident == "probe":
                return events
        elif opcode == OP_CLOSE:
            events.append(("close", struct.unpack("!H", payload[:2])[0] if payload else None))
            return events
        else:
            assert opcode == OP_PING, opcode  # keepalive: not expected this fast, but legal


@pytest.mark.parametrize("delivery", ["one-write", "frame-by-frame"])
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_frames(shared_daemon: RunningDaemon, case: Case, delivery: str) -> None:
    """The daemon answers, pongs and closes exactly as the case expects, then ends TCP."""
    with RawWebSocket(shared_daemon.url) as ws:
        assert ws.status == 101
        try:
            if delivery == "one-write":
                ws.send_raw(b"".join(case.frames))
            else:
                for frame in case.frames:
                    ws.send_raw(frame)
        except OSError:
            pass  # the daemon may close before it has read everything; its answer is read below
        events = _observe(ws, case.expected[-1] == OPEN)
        assert events == case.expected
        if events[-1][0] == "close":
            assert ws.wait_closed(timeout=5) < 5


# --- the opening handshake (RFC 6455 §4.2.1) ---------------------------------------------------


def _head(request_line: str, headers: dict[str, str], host: str | None = "127.0.0.1") -> bytes:
    lines = [request_line, *([f"Host: {host}"] if host is not None else [])]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


@pytest.mark.parametrize(
    ("head", "status", "body"),
    [
        (_head("GET / HTTP/1.1", upgrade_headers()), 101, None),
        (
            _head("GET / HTTP/1.0", upgrade_headers()),
            400,
            b"WebSocket upgrade requires HTTP/1.1 or higher",
        ),
        (_head("GET / HTTP/1.1", upgrade_headers(), host=None), 400, b"missing Host header"),
        (_head("GET / HTTP/1.1", upgrade_headers(), host=""), 400, b"missing Host header"),
        (
            _head("GET / HTTP/1.1", {"Host": "other", **upgrade_headers()}),
            400,
            b"more than one Host header",
        ),
        (_head("GET / HTTP/1.x", upgrade_headers()), 400, b"malformed request line"),
        (_head("GET /readyz HTTP/1.0", {}), 200, b""),
        (_head("GET /readyz HTTP/1.1", {}, host=None), 200, b""),
    ],
    ids=[
        "control",
        "http-1.0",
        "no-host",
        "empty-host",
        "two-hosts",
        "bad-version",
        "readyz-1.0",
        "readyz-no-host",
    ],
)
def test_opening_handshake(
    shared_daemon: RunningDaemon, head: bytes, status: int, body: bytes | None
) -> None:
    """Upgrades need HTTP/1.1 or higher and exactly one Host; plain probes are unaffected."""
    answer = raw_http(shared_daemon.url, head)
    assert answer.status == status
    if body is not None:
        assert answer.body == body


def _head_of_size(size: int) -> bytes:
    """A valid upgrade request whose head (blank line included) is ``size`` bytes."""
    base = _head("GET / HTTP/1.1", {**upgrade_headers(), "X-Pad": ""})
    return base[:-4] + b"p" * (size - len(base)) + b"\r\n\r\n"


@pytest.mark.parametrize("chunk", [0, 1000], ids=["one-write", "small-writes"])
@pytest.mark.parametrize(
    ("size", "status"),
    [(MAX_HEAD_BYTES, 101), (MAX_HEAD_BYTES + 1, 431), (64 * 1024, 431)],
    ids=["at-limit", "one-over", "64-kib"],
)
def test_head_limit_is_the_same_on_every_path(
    shared_daemon: RunningDaemon, size: int, status: int, chunk: int
) -> None:
    """The head limit decides alike whether the head arrives in one read or in many."""
    data = _head_of_size(size)
    assert len(data) == size
    assert raw_http(shared_daemon.url, data, chunk=chunk).status == status


# --- refusals and the log -----------------------------------------------------------------------


def test_refusals_cannot_fill_the_log(daemon_factory: type[RunningDaemon]) -> None:
    """A burst of refusals logs a few lines per reason, each refusal is still answered."""
    daemon = daemon_factory()
    for _ in range(30):
        with RawWebSocket(daemon.url) as ws:
            ws.send_raw(F(OP_TEXT, request(1), masked=False))
            assert _observe(ws, open_expected=False) == [("close", 1002)]
        assert raw_http(daemon.url, _head("GET / HTTP/1.0", upgrade_headers())).status == 400
    log = daemon.log()
    assert 1 <= len(re.findall("protocol error", log)) <= 10, log
    assert 1 <= len(re.findall("refused .* 400", log)) <= 10, log
