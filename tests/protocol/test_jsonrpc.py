"""The sans-I/O JSON-RPC envelope codec (protocol.md §2.1, §2.4) as unit tests."""

from __future__ import annotations

import json

import pytest

from executor.protocol import jsonrpc
from executor.protocol.jsonrpc import ClientResponse, Malformed, Notification, Request


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"id":1,"method":"m"}', Request(1, "m", None)),
        ('{"id":"a","method":"m","params":{"x":1}}', Request("a", "m", {"x": 1})),
        ('{"id":-5,"method":"m","params":[1]}', Request(-5, "m", [1])),
        ('{"id":9223372036854775807,"method":"m"}', Request(2**63 - 1, "m", None)),
        ('{"id":-9223372036854775808,"method":"m"}', Request(-(2**63), "m", None)),
        ('{"jsonrpc":"1.0","id":1,"method":"m"}', Request(1, "m", None)),
        ('{"id":1,"method":"m","trace":{"traceparent":"00-x"}}', Request(1, "m", None)),
        ('{"id":1,"method":"m","extra":[1,2]}', Request(1, "m", None)),
        ('{"method":"initialized"}', Notification("initialized", None)),
        ('{"method":"n","params":{}}', Notification("n", {})),
        ('{"id":3,"result":{}}', ClientResponse(3)),
        ('{"id":"x","error":{"code":1,"message":"m"}}', ClientResponse("x")),
    ],
    ids=[
        "int-id",
        "string-id",
        "negative-id",
        "i64-max",
        "i64-min",
        "jsonrpc-any-value",
        "trace-object",
        "unknown-top-field",
        "notification",
        "notification-params",
        "response",
        "error-response",
    ],
)
def test_parse_classifies_structurally(raw: str, expected: jsonrpc.Message) -> None:
    """Requests, notifications and responses are told apart by which members they have."""
    for data in (raw, raw.encode()):
        parsed = jsonrpc.parse(data)
        assert type(parsed) is type(expected)
        assert parsed == expected
        # The connection's variant: the same request as a plain tuple (the one that took
        # the general classification may stay a Request), anything else the same envelope.
        fields = jsonrpc.parse_fields(data)
        if type(expected) is Request:
            assert type(fields) in (tuple, Request)
            assert tuple(fields) == tuple(expected)
        else:
            assert type(fields) is type(expected)
            assert fields == expected


@pytest.mark.parametrize(
    ("raw", "detail"),
    [
        ("{", None),
        ("", None),
        ("42", "expected a JSON-RPC object"),
        ('"text"', "expected a JSON-RPC object"),
        ("null", "expected a JSON-RPC object"),
        ('[{"id":1,"method":"m"}]', "expected a JSON-RPC object"),
        ("[]", "expected a JSON-RPC object"),
        ("{}", "data did not match any variant of untagged enum JSONRPCMessage"),
        ('{"id":1}', "data did not match any variant of untagged enum JSONRPCMessage"),
        ('{"id":null,"method":"m"}', "data did not match any variant of untagged enum RequestId"),
        ('{"id":1.5,"method":"m"}', "data did not match any variant of untagged enum RequestId"),
        ('{"id":1.0,"method":"m"}', "data did not match any variant of untagged enum RequestId"),
        ('{"id":true,"method":"m"}', "data did not match any variant of untagged enum RequestId"),
        ('{"id":{},"method":"m"}', "data did not match any variant of untagged enum RequestId"),
        ('{"id":[1],"method":"m"}', "data did not match any variant of untagged enum RequestId"),
        (
            '{"id":9223372036854775808,"method":"m"}',
            "data did not match any variant of untagged enum RequestId",
        ),
        ('{"id":1,"method":5}', "invalid type for `method`, expected a string"),
        ('{"method":null}', "invalid type for `method`, expected a string"),
        (
            '{"id":1,"method":"m","trace":"x"}',
            "invalid type for `trace`, expected a trace context object",
        ),
        ('{"id":1,"method":"m"}\n{"id":2,"method":"m"}', None),
        ("[" * 5000 + "]" * 5000, None),
        (b'{"id":1,"method":"\xff"}', None),
    ],
    ids=[
        "truncated",
        "empty",
        "number",
        "string",
        "null",
        "batch",
        "empty-batch",
        "empty-object",
        "id-only",
        "null-id",
        "float-id",
        "integral-float-id",
        "bool-id",
        "object-id",
        "array-id",
        "id-beyond-i64",
        "method-not-string",
        "method-null",
        "trace-not-object",
        "two-objects",
        "deep-nesting",
        "invalid-utf8",
    ],
)
def test_parse_rejects_malformed(raw: str | bytes, detail: str | None) -> None:
    """Anything that is not one JSON-RPC object is ``Malformed`` with a reason."""
    message = jsonrpc.parse(raw)
    assert isinstance(message, Malformed)
    assert message.detail
    if detail is not None:
        assert message.detail == detail


@pytest.mark.parametrize(
    ("encoded", "expected"),
    [
        (jsonrpc.encode_result(1, {"a": 1}), {"id": 1, "result": {"a": 1}}),
        (jsonrpc.encode_result("s", None), {"id": "s", "result": None}),
        (
            jsonrpc.encode_error(-1, -32600, "bad"),
            {"error": {"code": -32600, "message": "bad"}, "id": -1},
        ),
        (jsonrpc.encode_notification("n", {"x": "é"}), {"method": "n", "params": {"x": "é"}}),
    ],
    ids=["result", "null-result", "error", "notification"],
)
def test_encoders_never_emit_the_version_marker(encoded: bytes, expected: object) -> None:
    """Encoded messages are compact JSON without ``jsonrpc`` and without ``data``."""
    assert json.loads(encoded) == expected
    assert b"jsonrpc" not in encoded
    assert b" " not in encoded.replace(b"\xc3\xa9", b"")


def test_error_encoding_puts_error_before_id() -> None:
    """Errors are encoded error-first like the reference (byte-compatible for simple clients)."""
    assert jsonrpc.encode_error(4, -32601, "x") == b'{"error":{"code":-32601,"message":"x"},"id":4}'
