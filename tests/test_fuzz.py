"""Bad input at a live server: thousands of random and mutated messages never break it.

Each hypothesis example sends a burst of hostile messages on one long-lived connection. Every
string field may hold lone surrogates, non-characters, NUL or tens of kilobytes. Each
message must get exactly one answer (none for the ``initialized`` notification; the oracle
is ``tests.support.wire_oracle``); then a sentinel request must be answered, and nothing
else, which proves the connection is alive and every earlier message was consumed. At the
end a fresh connection must work too. Both JSON backends (orjson, the standard library) are
fuzzed. Programs a mutated ``process/start`` may name are drawn from a harmless list; the
daemon runs in a private directory with a low process limit.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.daemon import RunningDaemon
from tests.support.json_backends import BACKENDS, daemon_env
from tests.support.rawws import OP_BINARY, OP_CLOSE, OP_TEXT, RawWebSocket
from tests.support.wire_oracle import expectation_of_payload

#: Programs that end at once, whatever their arguments.
SAFE_PROGRAMS = ["/bin/true", "/bin/echo", "true", "/no/such/program", ""]
_sentinels = itertools.count()

#: Text that is not text (lone surrogates) and text that is unusual (NUL, non-characters).
edge_chars = st.sampled_from(
    ["\x00", "\ufffe", "\uffff", "\ufdd0", "\U0010ffff", "\u2028", "\ufeff", "\udc00\ud800"]
) | st.integers(0xD800, 0xDFFF).map(chr)
edged_text = st.builds(
    lambda head, char, tail: head + char + tail,
    st.text(max_size=4),
    edge_chars,
    st.text(max_size=4),
)
overlong_text = st.builds(
    lambda char, size: char * size,
    st.sampled_from(["a", "\x00", "\ud800", "\u00e9", "\U0001f600"]),
    st.sampled_from([2_000, 20_000]),
)
#: Any string field: mostly ordinary, often edged, now and then overlong.
texts = st.one_of(st.text(max_size=8), st.text(max_size=8), edged_text, edged_text, overlong_text)
short_texts = st.text(max_size=5) | edged_text

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
    | edged_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(short_texts, inner, max_size=4),
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
process_ids = st.sampled_from(["p", "q", "", "ü"]) | texts


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
                *draw(st.lists(texts, max_size=2)),
            ],
            "cwd": draw(
                st.sampled_from(["file:///tmp", "file:///nope", "/tmp", "file://h/tmp", "http://x"])
            ),
            "env": draw(st.dictionaries(short_texts, texts, max_size=2)),
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
            "writeId": draw(texts),
        },
        "process/signal": {
            "processId": pid,
            "signal": draw(st.sampled_from(["interrupt", "kill", 3])),
        },
        "process/terminate": {"processId": pid},
        "initialize": {
            "clientName": draw(texts),
            "resumeSessionId": draw(st.none() | texts),
        },
        "fs/readFile": {"path": "file:///nonexistent-fuzz/" + draw(texts)},
    }
    method = draw(st.sampled_from(sorted(params)))
    return {
        "id": draw(st.integers(1, 10**6) | texts),
        "method": method,
        "params": params[method],
    }


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid request with one structural or textual mutation."""
    request = draw(valid_requests())
    kind = draw(
        st.sampled_from(
            ["drop", "replace", "method", "id", "extra", "wrap", "cut", "byte", "params", "text"]
        )
    )
    if kind == "text":
        _poison_a_string(draw, request)
    elif kind == "drop":
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
    text = json.dumps(request).encode()  # lone surrogates go out as \\u escapes
    if kind == "wrap":
        return b"[" + text + b"]"
    if kind == "cut":
        return text[: draw(st.integers(0, len(text)))]
    if kind == "byte":
        index = draw(st.integers(0, len(text) - 1))
        return text[:index] + bytes([draw(st.integers(0, 127))]) + text[index + 1 :]
    return text


def _poison_a_string(draw: st.DrawFn, value: dict[str, Any]) -> None:
    """Put an edge character into one string (a value or a key) anywhere in ``value``."""
    spots: list[tuple[Any, Any, bool]] = []  # (container, key or index, is a dict key)
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in list(pairs):
            if isinstance(item, dict):
                spots.append((item, key, True))
            if isinstance(child, str):
                spots.append((item, key, False))
            elif isinstance(child, dict | list):
                stack.append(child)
    if not spots:
        return
    container, key, is_key = draw(st.sampled_from(spots))
    char = draw(edge_chars)
    if is_key:
        container[key + char] = container.pop(key)
    else:
        container[key] = container[key] + char


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


@pytest.fixture(scope="module", params=BACKENDS)
def fuzz_daemon(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningDaemon]:
    """A daemon for hostile input (per JSON backend): private cwd, few processes, short
    retention."""
    cwd = Path(tmp_path_factory.mktemp("fuzz"))
    daemon = RunningDaemon(
        ["--max-processes", "40", "--process-retention", "1", "--log-level", "warning"],
        env=daemon_env(request.param, cwd),
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


def _started_ids(payloads: list[bytes]) -> list[str]:
    """The process ids the ``process/start`` requests among ``payloads`` name."""
    ids = []
    for payload in payloads:
        try:
            message = json.loads(payload)
        except ValueError:
            continue
        params = message.get("params") if isinstance(message, dict) else None
        if message.get("method") == "process/start" and isinstance(params, dict):
            process_id = params.get("processId")
            if isinstance(process_id, str):
                ids.append(process_id)
    return ids


def _collect(ws: RawWebSocket, wanted: int, payloads: list[bytes]) -> None:
    """Read until ``wanted`` answers arrived (notifications aside).

    A mutated command may still be running and hold a long poll open: after a few seconds
    the burst's processes are terminated (their answers are counted too), then reading goes on.
    """
    started = time.monotonic()
    # Generous on a loaded 2-core CI machine; the burst's processes are stopped after 5 s.
    got, deadline, terminated = 0, started + 60, False
    while got < wanted:
        if not terminated and time.monotonic() > started + 5:
            terminated = True
            for process_id in _started_ids(payloads):
                ws.send_json(
                    {"id": 0, "method": "process/terminate", "params": {"processId": process_id}}
                )
                wanted += 1
        try:
            answer = ws.recv_json(timeout=min(1.0, max(0.01, deadline - time.monotonic())))
        except TimeoutError:
            if time.monotonic() < deadline:
                continue
            raise AssertionError(f"{wanted - got} of {wanted} answers missing") from None
        got += "method" not in answer


def _sync(ws: RawWebSocket) -> None:
    """Send a sentinel and read until its answer: everything before it was consumed, and no
    answer arrives that no message asked for."""
    sentinel = f"sentinel-{next(_sentinels)}"
    ws.send_json({"id": sentinel, "method": "fuzz/sentinel"})
    while True:
        answer = ws.recv_json(timeout=15)
        if answer.get("id") == sentinel:
            assert answer["error"]["code"] == -32601
            return
        assert "method" in answer, f"an answer no message asked for: {answer}"


def test_random_and_mutated_messages_never_break_the_server(fuzz_daemon: RunningDaemon) -> None:
    """Thousands of hostile messages: every connection stays usable and new ones work."""

    def connect() -> RawWebSocket:
        fresh = RawWebSocket(fuzz_daemon.url)
        fresh.request({"id": 0, "method": "initialize", "params": {"clientName": "fuzz"}})
        fresh.send_json({"method": "initialized"})
        return fresh

    # One connection for every example: it must stay usable through all of them. After a
    # failing example (hypothesis then shrinks it) a fresh one, so that answers the failed
    # example left unread are not blamed on the next.
    holder = [connect()]
    sent = [0]

    @settings(
        max_examples=150,  # per backend
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(burst=bursts)
    def run(burst: list[tuple[bytes, bool]]) -> None:
        ws = holder[0]
        try:
            wanted = 0
            for payload, binary in burst:
                _send(ws, payload, binary)
                wanted += expectation_of_payload(payload).answers
                sent[0] += 1
            _collect(ws, wanted, [payload for payload, _binary in burst])
            _sync(ws)
        except BaseException:
            ws.close()
            holder[0] = connect()
            raise

    try:
        run()
    finally:
        holder[0].close()
    assert sent[0] >= 900  # 150 examples of at least 6 messages
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
