"""Bad input at a live server: thousands of random and mutated messages never break it.

Each hypothesis example sends a burst of hostile messages on one long-lived connection, then
a sentinel request; the sentinel must be answered, which proves the connection is alive and
every earlier message was consumed. At the end a fresh connection must work too. Programs a
mutated ``process/start`` may name are drawn from a harmless list; the daemon runs in a
private directory with a low process limit.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.daemon import RunningDaemon
from tests.support.rawws import OP_BINARY, OP_CLOSE, OP_TEXT, RawWebSocket

SAFE_PROGRAMS = ["/bin/true", "/bin/echo", "true", "/no/such/program", "", "sleep"]
_sentinels = itertools.count()

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
methods = st.sampled_from(
    [
        "initialize",
        "initialized",
        "environment/info",
        "environment/status",
        "process/start",
        "process/read",
        "process/write",
        "process/signal",
        "process/terminate",
        "process/output",
        "fs/readFile",
    ]
) | st.text(max_size=20)
process_ids = st.sampled_from(["p", "q", "", "ü"]) | st.text(max_size=8)


@st.composite
def valid_requests(draw: st.DrawFn) -> dict[str, Any]:
    """A well-formed request of a routed method with plausible params."""
    pid = draw(process_ids)
    params: dict[str, dict[str, Any]] = {
        "environment/info": {},
        "environment/status": {},
        "process/start": {
            "processId": pid,
            "argv": [
                draw(st.sampled_from(SAFE_PROGRAMS)),
                *draw(st.lists(st.text(max_size=5), max_size=2)),
            ],
            "cwd": draw(
                st.sampled_from(["file:///tmp", "file:///nope", "/tmp", "file://h/tmp", "http://x"])
            ),
            "env": draw(st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2)),
            "tty": draw(st.booleans()),
            "pipeStdin": draw(st.booleans()),
        },
        "process/read": {
            "processId": pid,
            "afterSeq": draw(st.integers(0, 2**64 + 5)),
            "maxBytes": draw(st.none() | st.integers(-1, 2**64 + 5)),
            "waitMs": draw(st.sampled_from([0, 1, 5, None, -1, 2**64])),
        },
        "process/write": {
            "processId": pid,
            "chunk": draw(st.sampled_from(["aGkK", "!!", "", "a"])),
            "writeId": "w",
        },
        "process/signal": {
            "processId": pid,
            "signal": draw(st.sampled_from(["interrupt", "kill", 3])),
        },
        "process/terminate": {"processId": pid},
        "initialize": {
            "clientName": draw(st.text(max_size=5)),
            "resumeSessionId": draw(st.none() | st.text(max_size=5)),
        },
    }
    method = draw(st.sampled_from(sorted(params)))
    return {
        "id": draw(st.integers(1, 10**6) | st.text(max_size=6)),
        "method": method,
        "params": params[method],
    }


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid request with one structural or textual mutation."""
    request = draw(valid_requests())
    kind = draw(
        st.sampled_from(
            ["drop", "replace", "method", "id", "extra", "wrap", "cut", "byte", "params"]
        )
    )
    if kind == "drop":
        request.pop(draw(st.sampled_from(sorted(request))))
    elif kind == "replace" and isinstance(request.get("params"), dict) and request["params"]:
        key = draw(st.sampled_from(sorted(request["params"])))
        request["params"][key] = draw(json_values)
    elif kind == "method":
        request["method"] = draw(json_values | methods)
    elif kind == "id":
        request["id"] = draw(json_values)
    elif kind == "extra":
        request[draw(st.text(max_size=8))] = draw(json_values)
    elif kind == "params":
        request["params"] = draw(json_values)
    text = json.dumps(request).encode()
    if kind == "wrap":
        return b"[" + text + b"]"
    if kind == "cut":
        return text[: draw(st.integers(0, len(text)))]
    if kind == "byte":
        index = draw(st.integers(0, len(text) - 1))
        return text[:index] + bytes([draw(st.integers(0, 127))]) + text[index + 1 :]
    return text


deep = (
    st.integers(1, 3000)
    .flatmap(
        lambda n: st.sampled_from(
            [
                "[" * n + "]" * n,
                '{"a":' * n + "1" + "}" * n,
                '{"id":1,"method":"m","params":' + "[" * n + "]" * n + "}",
            ]
        )
    )
    .map(str.encode)
)
huge_numbers = st.sampled_from(
    [
        b'{"id":1e400,"method":"environment/status"}',
        b'{"id":' + b"9" * 400 + b',"method":"x"}',
        b'{"id":1,"method":"process/read","params":{"processId":"p","afterSeq":'
        + b"9" * 100
        + b"}}",
    ]
)
messages = st.one_of(
    st.binary(max_size=64),
    json_values.map(lambda v: json.dumps(v).encode()),
    valid_requests().map(lambda v: json.dumps(v).encode()),
    mutated(),
    mutated(),
    deep,
    huge_numbers,
    st.builds(lambda m, p: json.dumps({"method": m, "params": p}).encode(), methods, json_values),
)
# Each message goes out as a text frame when it is valid UTF-8, else as a binary frame
# (invalid UTF-8 in a text frame legitimately ends the connection; see the test below).
bursts = st.lists(st.tuples(messages, st.booleans()), min_size=6, max_size=14)


@pytest.fixture(scope="module")
def fuzz_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDaemon]:
    """A daemon for hostile input: private cwd, few processes, short retention."""
    cwd = Path(tmp_path_factory.mktemp("fuzz"))
    daemon = RunningDaemon(
        ["--max-processes", "40", "--process-retention", "1", "--log-level", "warning"],
        cwd=str(cwd),
    )
    yield daemon
    daemon.stop()


def _send(ws: RawWebSocket, payload: bytes, binary: bool) -> None:
    try:
        payload.decode("utf-8")
    except UnicodeDecodeError:
        binary = True
    ws.send_frame(OP_BINARY if binary else OP_TEXT, payload)


def _sync(ws: RawWebSocket) -> None:
    """Send a sentinel and read until its answer: everything before it was consumed."""
    sentinel = f"sentinel-{next(_sentinels)}"
    ws.send_json({"id": sentinel, "method": "fuzz/sentinel"})
    while True:
        answer = ws.recv_json(timeout=15)
        if answer.get("id") == sentinel:
            assert answer["error"]["code"] == -32601
            return


def test_random_and_mutated_messages_never_break_the_server(fuzz_daemon: RunningDaemon) -> None:
    """Thousands of hostile messages: every connection stays usable and new ones work."""
    ws = RawWebSocket(fuzz_daemon.url)
    ws.request({"id": 0, "method": "initialize", "params": {"clientName": "fuzz"}})
    ws.send_json({"method": "initialized"})
    sent = [0]

    @settings(
        max_examples=400,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(burst=bursts)
    def run(burst: list[tuple[bytes, bool]]) -> None:
        for payload, binary in burst:
            _send(ws, payload, binary)
            sent[0] += 1
        _sync(ws)

    try:
        run()
    finally:
        ws.close()
    assert sent[0] >= 2000  # 400 examples of at least 6 messages
    with fuzz_daemon.session() as fresh:
        assert fresh.request("environment/status") == {"status": "ready"}
        _result, events = fresh.run("after-fuzz", ["/bin/echo", "alive"])
        assert events[-1]["method"] == "process/closed"
    log = fuzz_daemon.log()
    assert "Traceback" not in log, log[-5000:]
    assert "internal error" not in log


@pytest.mark.parametrize(
    "payload",
    [b"\xff", b'{"id":1,"method":"\xc0\xaf"}', b"\xed\xa0\x80", b'"\x80"'],
    ids=["lone-ff", "overlong", "surrogate", "continuation"],
)
def test_invalid_utf8_text_frames_end_only_that_connection(
    fuzz_daemon: RunningDaemon, payload: bytes
) -> None:
    """Invalid UTF-8 in a text frame closes that connection (1007); the server serves others."""
    with RawWebSocket(fuzz_daemon.url) as ws:
        ws.send_frame(OP_TEXT, payload)
        opcode, data = ws.recv_frame()
        assert opcode == OP_CLOSE
        assert int.from_bytes(data[:2], "big") == 1007
    with fuzz_daemon.session() as fresh:
        assert fresh.request("environment/status") == {"status": "ready"}
