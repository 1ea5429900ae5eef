"""Text on the wire is Unicode: lone surrogates are refused at parse time, with both backends.

``"\\ud800"`` is valid JSON syntax but not a Unicode scalar value. The reference (serde)
refuses such a message as a whole (``-32600``, id ``-1``); so do we, naming the field, with
orjson and with the standard library alike. Before, the standard-library backend let the
text through, and encoding an answer that echoed it failed: the request was never answered
(or, in the fast path, the connection died). Non-characters, NUL and astral characters are
text, and are accepted as the reference accepts them. Answers never fail to encode either:
text the daemon decoded byte-exactly (a non-UTF-8 file name) goes out with U+FFFD.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.client import WsClient
from tests.support.daemon import RunningDaemon
from tests.support.json_backends import (
    BACKENDS,
    STDLIB_TRUNCATED_DETAIL,
    daemon_env,
    jsonrpc_module,
)

PARSE_PREFIX = "failed to parse websocket JSON-RPC message from exec-server websocket "


@pytest.fixture(scope="module", params=BACKENDS)
def codec(request: pytest.FixtureRequest) -> ModuleType:
    """``executor.protocol.jsonrpc`` with each JSON backend."""
    return jsonrpc_module(request.param)


# --- the codec ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (r'{"id":1,"method":"process/read","params":{"processId":"\ud800"}}', "`params.processId`"),
        (r'{"id":1,"method":"m","params":{"argv":["a","x\uDC00"]}}', "`params.argv[1]`"),
        (r'{"id":1,"method":"m","params":{"env":{"\udfff":"v"}}}', "key in `params.env`"),
        (r'{"id":"\ud800","method":"m"}', "`id`"),
        (r'{"id":1,"method":"\udbff"}', "`method`"),
        (r'{"id":1,"method":"m","params":"\ud800\u0041"}', "`params`"),
        (r'{"\udc00":1}', "invalid key:"),
        (r'"\ud800"', "invalid string:"),
    ],
    ids=["value", "list-item", "key", "id", "method", "high-then-letter", "top-key", "top"],
)
def test_lone_surrogates_make_the_message_malformed(
    codec: ModuleType, raw: str, where: str
) -> None:
    """Every lone surrogate escape is refused, and the detail says where it is."""
    for data in (raw, raw.encode()):
        message = codec.parse(data)
        assert type(message).__name__ == "Malformed", message
        assert "lone surrogate U+D" in message.detail and where in message.detail, message


def test_the_first_lone_surrogate_in_document_order_is_named(codec: ModuleType) -> None:
    """Two bad strings: the earlier one is reported."""
    raw = r'{"id":1,"method":"m","params":{"a":[1,{"b":"ok","c":"\udead"}],"z":"\ud800"}}'
    assert "`params.a[1].c`" in codec.parse(raw).detail


@pytest.mark.parametrize(
    "text",
    ["\U0001f600", "a\x00b", "\ufffe\uffff\ufdd0", "\U0010ffff", "\u2028\ufeff", "\\ud800"],
    ids=["pair", "nul", "non-characters", "last-scalar", "separators", "escaped-backslash"],
)
def test_text_that_is_unicode_is_accepted(codec: ModuleType, text: str) -> None:
    """Pairs, NUL and non-characters are scalar values; a literal backslash-u is no escape."""
    for ensure_ascii in (True, False):
        raw = json.dumps({"id": 1, "method": "m", "params": {"s": text}}, ensure_ascii=ensure_ascii)
        message = codec.parse(raw.encode())
        assert type(message).__name__ == "Request", message
        assert message.params == {"s": text}


@pytest.mark.parametrize(
    "data",
    [
        b'{"id":1,"method":"m","params":"\xed\xa0\x80"}',  # a surrogate, UTF-8 encoded
        b'{"id":1,"method":"m","params":"\xc0\xaf"}',  # an overlong encoding
        '{"id":1,"method":"m"}'.encode("utf-16-le"),  # the stdlib parser would guess UTF-16
        '{"id":1,"method":"m","params":"\ud800"}',  # a raw surrogate in a str
    ],
    ids=["encoded-surrogate", "overlong", "utf-16", "raw-surrogate"],
)
def test_bytes_that_are_not_utf8_are_malformed(codec: ModuleType, data: bytes | str) -> None:
    """Only UTF-8 is JSON text on this wire (binary frames and stdio lines included)."""
    assert type(codec.parse(data)).__name__ == "Malformed"


@pytest.mark.parametrize(
    "raw", ['{"id":1,"method":"m","params":NaN}', '{"id":1e400,"method":"m"}', "[-Infinity]"]
)
def test_numbers_that_are_not_json_are_malformed(codec: ModuleType, raw: str) -> None:
    """Both backends refuse NaN, Infinity and numbers that overflow a double."""
    assert type(codec.parse(raw)).__name__ == "Malformed"


def test_answers_with_undecodable_text_still_encode(codec: ModuleType) -> None:
    """Text with lone surrogates (from byte-exact decoding) is sent with U+FFFD instead."""
    encoded = codec.encode_error(7, -32600, "path `/w/\udcff` is not a file")
    assert json.loads(encoded.decode("utf-8")) == {
        "error": {"code": -32600, "message": "path `/w/\ufffd` is not a file"},
        "id": 7,
    }
    result = json.loads(codec.encode_result(1, {"\udc80k": ["\ud800", "ok"]}).decode("utf-8"))
    assert result == {"id": 1, "result": {"\ufffdk": ["\ufffd", "ok"]}}


# --- a live daemon, with each backend ---------------------------------------------------------


@pytest.fixture(scope="module", params=BACKENDS)
def text_daemon(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningDaemon]:
    """A daemon per JSON backend (the stdlib one proves it runs without orjson)."""
    scratch = tmp_path_factory.mktemp(f"text-{request.param}")
    daemon = RunningDaemon(
        ["--log-level", "warning"], env=daemon_env(request.param, scratch), cwd=str(scratch)
    )
    try:
        with daemon.session() as probe:
            probe.send_raw("{")
            detail = probe.out_of_band()["error"]["message"]
        assert (STDLIB_TRUNCATED_DETAIL in detail) == (request.param == "stdlib"), detail
        yield daemon
    finally:
        daemon.stop()
    log = daemon.log()
    assert "Traceback" not in log and "internal error" not in log, log[-3000:]


def _answers_after(client: WsClient, count: int) -> list[dict[str, Any]]:
    """Wait for a canary answer; return every answer (not notification) since ``count``."""
    canary = client.call("environment/status")
    assert canary["result"] == {"status": "ready"}
    arrivals = client.inbox.arrivals[count:]
    return [m for m in arrivals if "method" not in m and m is not canary]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (
            r'{"id":1,"method":"process/read","params":{"processId":"\ud800","afterSeq":0}}',
            "`params.processId`",
        ),
        (
            r'{"id":2,"method":"process/start","params":{"processId":"p","argv":["/bin/echo",'
            r'"\udc00"],"cwd":"file:///tmp","env":{},"tty":false}}',
            "`params.argv[1]`",
        ),
        (
            r'{"id":3,"method":"fs/readFile","params":{"path":"file:///tmp/\ud800"}}',
            "`params.path`",
        ),
        (r'{"id":"\ud800","method":"environment/info"}', "`id`"),
        (
            r'{"id":5,"method":"process/write","params":{"processId":"p","chunk":"",'
            r'"writeId":"\udbff"}}',
            "`params.writeId`",
        ),
        (
            r'{"id":6,"method":"process/start","params":{"processId":"p","argv":["/bin/echo"],'
            r'"cwd":"file:///tmp","env":{"\ud800":"v"},"tty":false}}',
            "key in `params.env`",
        ),
    ],
    ids=["read", "start", "readFile", "id", "write", "env-key"],
)
def test_each_such_request_gets_exactly_one_answer_naming_the_field(
    text_daemon: RunningDaemon, raw: str, field: str
) -> None:
    """One ``-32600`` answer with id ``-1``; nothing runs; the connection keeps working."""
    with text_daemon.session() as client:
        before = len(client.inbox.arrivals)
        client.send_raw(raw)
        answers = _answers_after(client, before)
        assert len(answers) == 1, answers
        error = answers[0]["error"]
        assert answers[0]["id"] == -1 and error["code"] == -32600
        assert error["message"].startswith(PARSE_PREFIX)
        assert "lone surrogate U+D" in error["message"] and field in error["message"]
        # Nothing was started under the id the refused start named.
        read = client.call("process/read", {"processId": "p"})
        assert read["error"]["message"] == "unknown process id p"


def test_non_characters_and_nul_are_echoed_like_any_text(text_daemon: RunningDaemon) -> None:
    """Scalar values outside the usual are text: answered with the request id, as the reference."""
    odd = "a\x00\ufffe\uffff\ufdd0\U0010ffff\U0001f600"
    with text_daemon.session() as client:
        answer = client.call("process/read", {"processId": odd})
        assert answer["error"] == {"code": -32600, "message": f"unknown process id {odd}"}
        odd_id = f"id-{odd}"
        client.send({"id": odd_id, "method": "environment/status"})
        assert client.response(odd_id)["result"] == {"status": "ready"}


def test_undecodable_file_names_in_answers_become_replacement_characters(
    text_daemon: RunningDaemon, tmp_path: Path
) -> None:
    """A path given as %FF bytes that is echoed in an error is answered, with U+FFFD."""
    (tmp_path / os.fsdecode(b"dir\xff")).mkdir()
    with text_daemon.session() as client:
        answer = client.call("fs/readFile", {"path": f"file://{tmp_path}/dir%FF"})
        assert answer["error"]["code"] == -32600
        assert answer["error"]["message"] == f"path `{tmp_path}/dir\ufffd` is not a file"
