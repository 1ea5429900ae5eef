"""``decode_base64_strict``: the fast path (decode first, diagnose on failure) accepts and
refuses exactly what checking first did, with the same wording."""

from __future__ import annotations

import base64
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from executor.protocol.fs_messages import decode_base64_strict

_NOT_BASE64 = re.compile(rb"[^A-Za-z0-9+/=]")


def checked_first(text: str) -> bytes:
    """The definition before the fast path: every check, then the decode."""
    raw = text.encode("utf-8", "surrogatepass")
    bad = _NOT_BASE64.search(raw)
    if bad is not None:
        raise ValueError(f"Invalid symbol {raw[bad.start()]}, offset {bad.start()}.")
    body = len(raw.rstrip(b"="))
    misplaced = raw.find(b"=", 0, body)
    if misplaced >= 0:
        raise ValueError(f"Invalid symbol {raw[misplaced]}, offset {misplaced}.")
    if body % 4 == 1:
        raise ValueError("Invalid input length")
    if len(raw) % 4 or len(raw) - body > 2:
        raise ValueError("Invalid padding")
    data = base64.b64decode(raw, validate=True)
    if body % 4 and base64.b64encode(data[-(3 * (body % 4) // 4) :]) != raw[-4:]:
        raise ValueError(f"Invalid last symbol {raw[body - 1]}, offset {body - 1}.")
    return data


def outcome(decode: object, text: str) -> tuple[str, object]:
    try:
        return "ok", decode(text)  # type: ignore[operator]
    except ValueError as exc:
        return "error", str(exc)


_TEXT = st.text(alphabet="AQgwBZaz09+/= \n\xe9-_", max_size=24) | st.binary(max_size=18).map(
    lambda data: base64.b64encode(data).decode()
)


@settings(max_examples=500)
@given(text=_TEXT)
def test_same_answers_as_checking_first(text: str) -> None:
    """Valid, non-canonical, misplaced padding, stray symbols: the same result or message."""
    assert outcome(decode_base64_strict, text) == outcome(checked_first, text)
