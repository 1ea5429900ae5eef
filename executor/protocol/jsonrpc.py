"""JSON-RPC envelopes in the exec-server dialect: JSON-RPC 2.0 without the version marker.

Pure: bytes in, typed envelopes out; typed answers in, bytes out. Classification is structural
(``id``+``method`` is a request, ``method`` alone a notification, ``id``+``result``/``error`` a
response). Anything else is ``Malformed``, answered with id ``-1`` by the caller. orjson is
used when installed; the standard library otherwise.

Both parsers hold the same line on text: a message must be UTF-8 and its strings Unicode
scalar values. A lone surrogate escape (``"\\ud800"``) is valid JSON syntax but no text, so
the message is malformed as a whole, as the reference (serde) has it; the detail names the
field. Nor does encoding fail on text: what the daemon itself decoded byte-exactly
(``surrogateescape``) goes out with U+FFFD in place of each undecodable byte.

The envelopes are ``NamedTuple``s rather than the house's frozen dataclasses: one is built
for every message, and a frozen dataclass's ``__init__`` (``object.__setattr__`` per field)
was a tenth of the daemon's CPU time per request. They are just as immutable and typed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from executor.protocol import b64codec
from executor.protocol.carve import CARVE_MIN, loads_carving

__all__ = [
    "MALFORMED_ID",
    "ClientResponse",
    "Malformed",
    "Notification",
    "Request",
    "RequestFields",
    "RequestId",
    "Spliced",
    "base64_value",
    "dumps",
    "dumps_exact",
    "encode_error",
    "encode_notification",
    "encode_notification_parts",
    "encode_result",
    "encode_result_parts",
    "loads",
    "parse",
    "parse_fields",
    "preencode",
]

RequestId = int | str

#: The id the reference uses when it answers a message it could not decode.
MALFORMED_ID: Final = -1

_I64_MIN: Final = -(2**63)
_I64_MAX: Final = 2**63 - 1

#: ``\uD800``-``\uDFFF`` escapes: only a message holding one can hold a lone surrogate.
_ESCAPED_SURROGATE: Final = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_PATH_SHOWN: Final = 120


class _LoneSurrogateError(ValueError):
    """A string of the message is not Unicode text (the detail names where)."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:40]} is infinity when parsed as double")
    return value


#: The standard library's parser, as strict as orjson about ``NaN`` and overflowing numbers.
_std_loads: Final = json.JSONDecoder(
    parse_constant=_reject_constant, parse_float=_finite_float
).decode

try:  # pragma: no cover - exercised in whichever environment is installed
    import orjson

    _loads: Callable[[bytes | memoryview | str], Any] = orjson.loads  # no wrapper: hot path

    def dumps(value: Any) -> bytes:
        """Serialize ``value`` to compact UTF-8 JSON (lone surrogates become U+FFFD)."""
        try:
            return orjson.dumps(value)
        except orjson.JSONEncodeError:
            # Rare path: a non-UTF-8 name or path in a message. Anything else still raises.
            return orjson.dumps(_scrub(value))

    def dumps_exact(value: Any) -> bytes:
        """``dumps``, but text that is not Unicode (a lone surrogate) or a value JSON has
        no form for raises ``ValueError``: a client must not send another path than it was
        given."""
        try:
            return orjson.dumps(value)
        except orjson.JSONEncodeError as exc:
            raise ValueError(str(exc)) from None

    _DECODE_ERRORS: tuple[type[Exception], ...] = (orjson.JSONDecodeError, RecursionError)
    #: ``encode_result`` tries orjson itself first (one call less per answer), then ``dumps``.
    _dumps_first: Callable[[Any], bytes] = orjson.dumps
    _ENCODE_ERRORS: tuple[type[Exception], ...] = (orjson.JSONEncodeError,)

    def base64_value(data: bytes) -> Any:
        """``data`` as a base64 JSON string, pre-encoded so ``dumps`` copies it unscanned.

        Output chunks are most of what the daemon sends; serializing their base64 text as
        an ordinary string made orjson scan every byte for escapes (profiled: 30% of the
        CPU of a 64 MiB stdout flood). Base64 is plain ASCII, so it can be embedded as is.
        """
        return orjson.Fragment(b'"' + b64codec.encode(data) + b'"')

    def preencode(value: Any) -> Any:
        """``value`` serialized once, to be embedded in many answers (constant results)."""
        return orjson.Fragment(orjson.dumps(value))

    def ascii_string(text: bytes) -> Any:
        """``text`` (ASCII needing no JSON escapes, e.g. base64) as a string, copied unscanned."""
        return orjson.Fragment(b'"' + text + b'"')

except ImportError:  # pragma: no cover
    _std_dumps: Callable[[Any], str] = json.JSONEncoder(
        ensure_ascii=False, separators=(",", ":"), allow_nan=False
    ).encode

    def _loads(data: bytes | memoryview | str) -> Any:
        # Decoded here, strictly: json.loads would take bytes as UTF-16/32 when they look
        # like it and let encoded surrogates through ("surrogatepass").
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        value = _std_loads(text)
        if _ESCAPED_SURROGATE.search(text) or (isinstance(data, str) and _SURROGATE.search(text)):
            detail = _lone_surrogate_detail(value)
            if detail is not None:
                raise _LoneSurrogateError(detail)
        return value

    def dumps(value: Any) -> bytes:
        """Serialize ``value`` to compact UTF-8 JSON (lone surrogates become U+FFFD)."""
        text = _std_dumps(value)
        try:
            return text.encode()
        except UnicodeEncodeError:
            return _SURROGATE.sub("\ufffd", text).encode()

    def dumps_exact(value: Any) -> bytes:
        """``dumps``, but text that is not Unicode (a lone surrogate) or a value JSON has
        no form for raises ``ValueError``."""
        try:
            return _std_dumps(value).encode()
        except TypeError as exc:
            raise ValueError(str(exc)) from None

    _DECODE_ERRORS = (ValueError, RecursionError)
    _dumps_first = dumps
    _ENCODE_ERRORS = ()

    def base64_value(data: bytes) -> Any:
        """``data`` as a base64 JSON string."""
        return b64codec.encode(data).decode("ascii")

    def preencode(value: Any) -> Any:
        """Without orjson there is nothing to gain: the value itself."""
        return value

    def ascii_string(text: bytes) -> Any:
        """``text`` (ASCII needing no JSON escapes) as a string."""
        return text.decode("ascii")


class Request(NamedTuple):
    """A call that expects an answer with the same ``id``."""

    id: RequestId
    method: str
    params: Any


class Notification(NamedTuple):
    """A call that expects no answer."""

    method: str
    params: Any


class ClientResponse(NamedTuple):
    """A response or error object sent by the client; this server never sends requests."""

    id: RequestId


class Malformed(NamedTuple):
    """A message that is not one JSON-RPC object; ``detail`` says why."""

    detail: str


Message = Request | Notification | ClientResponse | Malformed
_new_tuple: Final = tuple.__new__


def loads(data: bytes | memoryview | str) -> Any:
    """One JSON value, as strictly as ``parse`` reads messages (orjson when installed)."""
    return _loads(data)


def parse(data: bytes | memoryview | str) -> Message:
    """Decode one transport message into its envelope."""
    message = parse_fields(data)
    if type(message) is tuple:
        return _new_tuple(Request, message)
    return message  # type: ignore[return-value]  # an envelope: not narrowed by mypy


#: A well-formed request's ``(id, method, params)``, as ``parse_fields`` returns it.
RequestFields = tuple[RequestId, str, Any]


def parse_fields(data: bytes | memoryview | str) -> RequestFields | Message:
    """``parse``, but a well-formed request is a plain ``(id, method, params)`` tuple.

    The connection's per-request path: a plain tuple is built by one opcode, a ``Request``
    by a call that allocates a tuple subclass (and frees it through the generic path).
    """
    try:
        # A large fs/writeFile's base64 is taken as it is (carve.py: the same result).
        value = loads_carving(data, _loads) if len(data) >= CARVE_MIN else None
        if value is None:
            value = _loads(data)
    except _DECODE_ERRORS as exc:
        return Malformed(_describe_decode_error(exc, data))
    if type(value) is not dict:
        return Malformed("expected a JSON-RPC object")
    # Fast path for the commonest message, a well-formed request (same result as _classify).
    method = value.get("method")
    request_id = value.get("id")
    if (
        type(method) is str
        and "trace" not in value
        and (
            type(request_id) is str
            or (type(request_id) is int and _I64_MIN <= request_id <= _I64_MAX)
        )
    ):
        return (request_id, method, value.get("params"))
    return _classify(value)


def _describe_decode_error(exc: Exception, data: bytes | memoryview | str) -> str:
    if isinstance(exc, RecursionError):
        return "recursion limit exceeded"
    if not isinstance(exc, _LoneSurrogateError):
        # orjson refuses lone surrogates with a position only; name the field instead.
        detail = _lone_surrogate_in(data)
        if detail is not None:
            return detail
    text = str(exc)
    return text or type(exc).__name__


def _lone_surrogate_in(data: bytes | memoryview | str) -> str | None:
    """Where ``data`` holds a lone surrogate, if that is what made it unparseable."""
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            return None
    if not _ESCAPED_SURROGATE.search(text):
        return None
    try:
        # The standard library's parser keeps lone surrogates, so they can be located.
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return _lone_surrogate_detail(value)


def _lone_surrogate_detail(value: Any) -> str | None:
    """The first string or key of ``value``, in document order, holding a lone surrogate."""
    stack: list[tuple[str, Any, bool]] = [("", value, False)]
    while stack:
        path, item, is_key = stack.pop()
        if type(item) is str:
            found = _SURROGATE.search(item)
            if found is not None:
                what = "key in" if is_key else "string at"
                where = f"{what} `{_shown(path)}`" if path else ("key" if is_key else "string")
                return (
                    f"invalid {where}: lone surrogate U+{ord(found.group()):04X} "
                    "(not a Unicode scalar value)"
                )
        elif type(item) is dict:
            for key, child in reversed(item.items()):
                child_path = f"{path}.{key}" if path else key
                stack.append((child_path, child, False))
                stack.append((path, key, True))
        elif type(item) is list:
            for index in range(len(item) - 1, -1, -1):
                stack.append((f"{path}[{index}]", item[index], False))
    return None


def _shown(path: str) -> str:
    return path if len(path) <= _PATH_SHOWN else path[:_PATH_SHOWN] + "…"


def _scrub(value: Any) -> Any:
    """``value`` with every lone surrogate replaced by U+FFFD (for encoding)."""
    if type(value) is str:
        return _SURROGATE.sub("\ufffd", value)
    if type(value) is dict:
        return {_scrub(key): _scrub(child) for key, child in value.items()}
    if type(value) in (list, tuple):
        return [_scrub(child) for child in value]
    return value


def _classify(obj: dict[str, Any]) -> Message:
    trace = obj.get("trace")
    if trace is not None and not isinstance(trace, dict):
        return Malformed("invalid type for `trace`, expected a trace context object")
    has_id = "id" in obj
    if has_id and not _valid_id(obj["id"]):
        return Malformed("data did not match any variant of untagged enum RequestId")
    if "method" in obj:
        method = obj["method"]
        if not isinstance(method, str):
            return Malformed("invalid type for `method`, expected a string")
        params = obj.get("params")
        if has_id:
            # tuple.__new__ skips the NamedTuple's generated Python-level __new__ (hot path).
            return _new_tuple(Request, (obj["id"], method, params))
        return Notification(method, params)
    if has_id and ("result" in obj or "error" in obj):
        return ClientResponse(obj["id"])
    return Malformed("data did not match any variant of untagged enum JSONRPCMessage")


def _valid_id(value: object) -> bool:
    if isinstance(value, str):
        return True
    # bool is an int subclass in Python but a distinct JSON type.
    return type(value) is int and _I64_MIN <= value <= _I64_MAX


class Spliced(NamedTuple):
    """A result given as ready JSON byte parts (e.g. ``{"dataBase64":"``, the text, ``"}``).

    Large answers (whole files) are written part by part, without being encoded, joined or
    copied again: every copy of a 90 MB answer costs tens of milliseconds of page faults.
    """

    parts: tuple[bytes | bytearray | memoryview, ...]


def encode_result_parts(
    request_id: RequestId, result: Spliced
) -> list[bytes | bytearray | memoryview]:
    """A success response whose result is ``result``, as parts to write in order."""
    return [b'{"id":' + dumps(request_id) + b',"result":', *result.parts, b"}"]


def encode_result(request_id: RequestId, result: Any) -> bytes:
    """Encode a success response."""
    try:
        return _dumps_first({"id": request_id, "result": result})
    except _ENCODE_ERRORS:  # text that is not Unicode: see ``dumps``
        return dumps({"id": request_id, "result": result})


def encode_error(
    request_id: RequestId, code: int, message: str, data: dict[str, object] | None = None
) -> bytes:
    """Encode an error response; ``data`` only where the reference sends one (a failed
    ``process/start``'s kind, since v0.171)."""
    error: dict[str, object] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return dumps({"error": error, "id": request_id})


def encode_notification(method: str, params: Any) -> bytes:
    """Encode a server-to-client notification."""
    return dumps({"method": method, "params": params})


def encode_notification_parts(method: str, params: Spliced) -> list[bytes | bytearray | memoryview]:
    """A notification whose params are ``params``, as parts to write in order."""
    return [b'{"method":' + dumps(method) + b',"params":', *params.parts, b"}"]
