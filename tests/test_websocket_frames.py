"""WebSocket frames (protocol.md §1.1): text and binary, fragments, limits, keepalive, close."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import time
from pathlib import Path

import pytest

from tests.fs.helpers import uri
from tests.support.client import RpcError, WsClient
from tests.support.daemon import RunningDaemon
from tests.support.rawws import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    RawWebSocket,
)

MiB = 1024 * 1024
STATUS = {"id": 7, "method": "environment/status"}


def _initialized(ws: RawWebSocket) -> str:
    answer = ws.request({"id": 1, "method": "initialize", "params": {"clientName": "raw"}})
    ws.send_json({"method": "initialized"})
    session_id: str = answer["result"]["sessionId"]
    return session_id


def _close_code(ws: RawWebSocket) -> int | None:
    """The code of the daemon's close frame, or None if it dropped TCP without one."""
    try:
        while True:
            opcode, payload = ws.recv_frame(timeout=10)
            if opcode == OP_CLOSE:
                code: int = struct.unpack("!H", payload[:2])[0]
                return code
    except (ConnectionError, OSError):
        return None


def _padded(size: int) -> bytes:
    """An ``environment/status`` request padded (with an ignored field) to ``size`` bytes."""
    base = json.dumps({**STATUS, "pad": ""}).encode()
    return base[:-2] + b"x" * (size - len(base)) + base[-2:]


def test_binary_message_is_parsed_like_text_and_answered_as_text(
    shared_daemon: RunningDaemon,
) -> None:
    """A binary message carrying JSON is handled; the answer is a text message."""
    with RawWebSocket(shared_daemon.url) as ws:
        _initialized(ws)
        ws.send_frame(OP_BINARY, json.dumps(STATUS).encode())
        opcode, payload = ws.recv_frame()
        assert opcode == OP_TEXT
        assert json.loads(payload) == {"id": 7, "result": {"status": "ready"}}


def test_fragmented_message_is_reassembled(shared_daemon: RunningDaemon) -> None:
    """A message split over a text frame and continuation frames is one request."""
    data = json.dumps(STATUS).encode()
    with RawWebSocket(shared_daemon.url) as ws:
        _initialized(ws)
        ws.send_frame(OP_TEXT, data[:5], fin=False)
        ws.send_frame(OP_PING, b"in-between")  # control frames may interleave fragments
        ws.send_frame(OP_CONT, data[5:10], fin=False)
        ws.send_frame(OP_CONT, data[10:])
        assert ws.recv_frame() == (OP_PONG, b"in-between")
        assert ws.recv_json() == {"id": 7, "result": {"status": "ready"}}


def test_ping_is_answered_with_pong(shared_daemon: RunningDaemon) -> None:
    """A client ping gets a pong with the same payload."""
    with RawWebSocket(shared_daemon.url) as ws:
        ws.send_frame(OP_PING, b"are-you-there")
        assert ws.recv_frame() == (OP_PONG, b"are-you-there")


def test_client_close_completes_the_closing_handshake(shared_daemon: RunningDaemon) -> None:
    """A client close frame is answered with a close frame, then TCP ends (ours, §10a)."""
    with RawWebSocket(shared_daemon.url) as ws:
        _initialized(ws)
        ws.send_frame(OP_CLOSE, struct.pack("!H", 1000) + b"bye")
        assert _close_code(ws) == 1000
        assert ws.wait_closed(timeout=5) < 5


def test_invalid_utf8_text_message_ends_the_connection(shared_daemon: RunningDaemon) -> None:
    """A text message that is not UTF-8 closes the connection with 1007; the session detaches."""
    with RawWebSocket(shared_daemon.url) as ws:
        session_id = _initialized(ws)
        ws.send_text(b'{"id":2,"method":"environment/status","x":"\xff\xfe"}')
        assert _close_code(ws) == 1007
    with WsClient(shared_daemon.url) as client:
        assert client.initialize(resume=session_id)["sessionId"] == session_id


def test_invalid_utf8_binary_message_is_a_parse_error(shared_daemon: RunningDaemon) -> None:
    """A binary message that is not UTF-8 JSON is malformed (-32600, id -1); the link stays."""
    with RawWebSocket(shared_daemon.url) as ws:
        _initialized(ws)
        ws.send_frame(OP_BINARY, b'{"id":2,"method":"environment/status","x":"\xff"}')
        error = ws.recv_json()
        assert error["id"] == -1
        assert error["error"]["code"] == -32600
        assert ws.request(STATUS) == {"id": 7, "result": {"status": "ready"}}


def test_newline_joined_objects_in_one_message_are_malformed(shared_daemon: RunningDaemon) -> None:
    """Two JSON objects in one message are one parse error (batches of lines are not a thing)."""
    with RawWebSocket(shared_daemon.url) as ws:
        _initialized(ws)
        ws.send_text(json.dumps(STATUS) + "\n" + json.dumps(STATUS))
        error = ws.recv_json()
        assert error["id"] == -1
        assert error["error"]["code"] == -32600
        assert ws.request(STATUS)["result"] == {"status": "ready"}


@pytest.mark.parametrize(
    ("fragments", "accepted"),
    [
        ([1024], True),
        ([1025], False),
        ([1000, 1000, 1000, 1000], True),
        ([1000, 1000, 1000, 1000, 200], False),
    ],
    ids=["frame-at-limit", "frame-over-limit", "message-under-limit", "message-over-limit"],
)
def test_configured_size_limits(
    daemon_factory: type[RunningDaemon], fragments: list[int], accepted: bool
) -> None:
    """Frames above --max-frame-bytes and messages at --max-message-bytes close with 1009."""
    daemon = daemon_factory(["--max-frame-bytes", "1024", "--max-message-bytes", "4199"])
    message = _padded(sum(fragments))
    with RawWebSocket(daemon.url) as ws:
        _initialized(ws)
        offset = 0
        for index, size in enumerate(fragments):
            opcode = OP_TEXT if index == 0 else OP_CONT
            last = index == len(fragments) - 1
            ws.send_frame(opcode, message[offset : offset + size], fin=last)
            offset += size
        if accepted:
            assert ws.recv_json() == {"id": 7, "result": {"status": "ready"}}
        else:
            assert _close_code(ws) == 1009


@pytest.mark.slow
def test_default_frame_limit_is_16_mib(shared_daemon: RunningDaemon) -> None:
    """A single frame just under 16 MiB is served; one just over closes the connection."""
    with RawWebSocket(shared_daemon.url) as ws:
        _initialized(ws)
        ws.send_frame(OP_TEXT, _padded(16 * MiB - 200))
        assert ws.recv_json(timeout=30) == {"id": 7, "result": {"status": "ready"}}
    with RawWebSocket(shared_daemon.url) as ws:
        _initialized(ws)
        try:
            ws.send_frame(OP_TEXT, _padded(16 * MiB + 200))
        except OSError:
            pass  # the daemon may close before it has read the whole frame
        assert _close_code(ws) in (1009, None)


def test_dead_peer_is_dropped_after_missed_pong(daemon_factory: type[RunningDaemon]) -> None:
    """A client that stops answering pings is dropped within interval + timeout, and detached."""
    daemon = daemon_factory(["--ping-interval", "0.3", "--ping-timeout", "0.3"])
    with RawWebSocket(daemon.url) as ws:
        session_id = _initialized(ws)
        waited = ws.wait_closed(timeout=10)  # reads frames, answers nothing
    assert waited < 3
    with WsClient(daemon.url) as client:
        assert client.initialize(resume=session_id)["sessionId"] == session_id
    assert "no pong" in daemon.log()


def test_live_peer_survives_many_ping_intervals(daemon_factory: type[RunningDaemon]) -> None:
    """A client that answers pings stays connected across several keepalive rounds."""
    daemon = daemon_factory(["--ping-interval", "0.2", "--ping-timeout", "0.3"])
    with RawWebSocket(daemon.url) as ws:
        _initialized(ws)
        pings = 0
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            opcode, payload = ws.recv_frame(timeout=2)
            assert opcode == OP_PING
            ws.send_frame(OP_PONG, payload)
            pings += 1
        assert pings >= 3
        assert ws.request(STATUS) == {"id": 7, "result": {"status": "ready"}}


def test_library_client_without_origin_is_accepted(shared_daemon: RunningDaemon) -> None:
    """The websockets client (no Origin header) completes a session."""
    with shared_daemon.session() as client:
        assert client.request("environment/status") == {"status": "ready"}
        with pytest.raises(RpcError) as info:
            client.request("nope/nothing")
        assert info.value.code == -32601


def test_large_answers_to_a_slow_reader_arrive_whole_before_the_close_echo(
    shared_daemon: RunningDaemon, tmp_path: Path
) -> None:
    """Answers the socket cannot take at once wait (uncopied) and arrive whole; the echo of
    a close frame sent meanwhile waits behind them, and TCP ends only after it."""
    data = os.urandom(6 * MiB)
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    with RawWebSocket(shared_daemon.url) as ws:
        _initialized(ws)
        for request_id in (10, 11):
            ws.send_json({"id": request_id, "method": "fs/readFile", "params": {"path": uri(path)}})
        ws.sock.settimeout(30)
        ws.sock.recv(1, socket.MSG_PEEK)  # the first answer is being written
        time.sleep(1.0)  # both are read and queued: 16 MiB behind a full socket
        ws.send_frame(OP_CLOSE, struct.pack("!H", 1000))
        answers = {}
        for _ in range(2):
            answer = ws.recv_json(timeout=30)
            answers[answer["id"]] = answer
        assert sorted(answers) == [10, 11]
        for answer in answers.values():
            assert base64.b64decode(answer["result"]["dataBase64"]) == data
        opcode, payload = ws.recv_frame(timeout=10)
        assert (opcode, payload[:2]) == (OP_CLOSE, struct.pack("!H", 1000))
        ws.wait_closed(timeout=10)
