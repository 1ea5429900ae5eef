"""``loads_carving``: a large ``dataBase64`` taken as it is, and only when a full parse would
give exactly the same value (otherwise None: the caller parses as usual)."""

from __future__ import annotations

import base64
import json
import mmap
import os
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from executor.protocol import carve
from executor.protocol.carve import loads_carving
from executor.protocol.jsonrpc import parse_fields

pytestmark = pytest.mark.skipif(
    carve._is_base64 is None, reason="the shortcut needs pybase64 (the fast extra)"
)

#: Small enough that hypothesis's short base64 strings count as large.
SMALL = 4


def message(params: Any, **fields: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "fs/writeFile", "params": params, **fields}


def full_parse(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "refused"


def test_a_large_write_is_carved_to_the_same_value() -> None:
    data = base64.b64encode(os.urandom(3 << 20)).decode()
    raw = orjson.dumps(message({"path": "file:///w/f", "dataBase64": data}))
    carved = loads_carving(raw, orjson.loads)
    assert carved is not None
    assert carved == orjson.loads(raw)
    # The frame reader hands over a view of a whole mapping: searched in place.
    mapping = mmap.mmap(-1, len(raw))
    mapping[:] = raw
    assert loads_carving(memoryview(mapping), orjson.loads) == carved
    # parse_fields takes the shortcut for what the connection receives.
    assert parse_fields(memoryview(mapping)) == (1, "fs/writeFile", carved["params"])


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b'{"id":1,"params":{"x":{"dataBase64":"QUJD"},"dataBase64":""}}', "a nested key"),
        (b'{"id":1,"params":{"dataBase64":"QUJD","dataBase64":"REVG"}}', "a repeated key"),
        (b'{"id":1,"params":{"dataBase64":"REVG","dataBase64":"QUJD"}}', "the first repeated"),
        (b'{"id":1,"params":{"a\\"dataBase64":"QUJD","dataBase64":""}}', "an escaped quote"),
        (b'{"id":1,"params":{"a\\\\"dataBase64":"QUJD"}}', "not JSON"),
        (b'{"id":1,"params":{"dataBase64":"QU\\/D"}}', "an escape in the value"),
        (b'{"id":1,"params":{"dataBase64":"QU D"}}', "not base64"),
        (b'{"id":1,"params":{"dataBase64":"QUJD"', "cut short"),
        (b'{"id":1,"params":["dataBase64":"QUJD"]}', "not an object"),
        (b'{"id":1,"params":{"dataBase64" :"QUJD"}}', "spaced (not looked for)"),
        (b'{"id":1,"dataBase64":"QUJD","params":{}}', "not in params"),
    ],
)
def test_what_a_full_parse_reads_otherwise_is_not_carved(raw: bytes, why: str) -> None:
    carved = loads_carving(raw, orjson.loads, minimum=SMALL)
    assert carved is None or carved == full_parse(raw), why
    if why in ("a nested key", "the first repeated", "an escaped quote", "not in params"):
        assert carved is None, why


# Strings that look like the key, with quotes and backslashes, next to real base64 values.
BASE64 = st.binary(min_size=3, max_size=24).map(lambda b: base64.b64encode(b).decode())
TRICKY = st.text(alphabet=st.sampled_from('"\\:/ aAdtBs64={}'), max_size=16)
LEAF = st.one_of(st.none(), st.integers(), BASE64, TRICKY, st.just('"dataBase64":"QUJD"'))
KEYS = st.sampled_from(["dataBase64", 'x"dataBase64', "dataBase64\\", "path", "params"])
VALUE = st.recursive(
    LEAF,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=6,
)


@st.composite
def raw_messages(draw: st.DrawFn) -> bytes:
    params = draw(st.dictionaries(KEYS, VALUE, max_size=4))
    if draw(st.booleans()):
        params["dataBase64"] = draw(BASE64)
    text = json.dumps(message(params), separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))
    if draw(st.booleans()):
        text = text.replace("/", "\\/")  # the same value, other bytes
    raw = text.encode()
    if draw(st.booleans()):  # repeat a key by hand (a dict cannot hold it twice)
        raw = raw.replace(b'"params": {', b'"params": {"dataBase64": "QUJD", ', 1)
        raw = raw.replace(b'"params":{', b'"params":{"dataBase64":"QUJD",', 1)
    if draw(st.booleans()):  # or break it somewhere
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from([b'"', b"\\", b"{", b"", b"\n"])) + raw[at:]
    return raw


@given(raw_messages())
@example(b'{"id":1,"params":{"x":{"dataBase64":"QUJD"},"dataBase64":""}}')
def test_a_carved_message_is_always_what_a_full_parse_reads(raw: bytes) -> None:
    carved = loads_carving(raw, orjson.loads, minimum=SMALL)
    if carved is not None:
        assert carved == full_parse(raw)
