"""What a message must get back (protocol.md §2), decided without the daemon's own code.

Every message gets exactly one answer, except the ``initialized`` notification: a request
its answer with its id; anything malformed (including text that is not Unicode: a lone
surrogate), a client response and any other notification one answer with id ``-1``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["Expect", "expectation", "expectation_of_payload", "first_lone_surrogate"]

_I64 = range(-(2**63), 2**63)


@dataclass(slots=True)
class Expect:
    """``kind``: ``id`` (an answer with ``request_id``), ``oob`` (id ``-1``) or ``none``."""

    kind: str
    request_id: Any = None
    #: Where the first lone surrogate is (as the daemon's error must say), if there is one.
    surrogate_path: str | None = None
    #: A description for failure messages.
    what: str = ""

    @property
    def answers(self) -> int:
        """How many answers the message gets."""
        return 0 if self.kind == "none" else 1


def first_lone_surrogate(value: Any) -> str | None:
    """What the error for the first lone surrogate (document order) must say, if any.

    ``string at `params.processId```, ``key in `params.env```, or for the top level
    ``invalid key:`` / ``invalid string:``.
    """

    def bad(text: str) -> bool:
        return any(0xD800 <= ord(char) <= 0xDFFF for char in text)

    def walk(item: Any, path: str) -> str | None:
        if isinstance(item, str):
            return (f"string at `{path}`" if path else "invalid string:") if bad(item) else None
        if isinstance(item, dict):
            for key, child in item.items():
                if bad(key):
                    return f"key in `{path}`" if path else "invalid key:"
                found = walk(child, f"{path}.{key}" if path else key)
                if found is not None:
                    return found
        if isinstance(item, list):
            for index, child in enumerate(item):
                found = walk(child, f"{path}[{index}]")
                if found is not None:
                    return found
        return None

    return walk(value, "")


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (type(value) is int and value in _I64)


def expectation(message: Any) -> Expect:
    """The expectation for the JSON value ``message`` (as sent, lone surrogates escaped)."""
    path = first_lone_surrogate(message)
    if path is not None:
        return Expect("oob", surrogate_path=path)
    if not isinstance(message, dict):
        return Expect("oob")
    trace = message.get("trace")
    if trace is not None and not isinstance(trace, dict):
        return Expect("oob")
    if "id" in message and not _valid_id(message["id"]):
        return Expect("oob")
    if "method" not in message or not isinstance(message["method"], str):
        return Expect("oob")
    if "id" in message:
        return Expect("id", request_id=message["id"])
    return Expect("none" if message["method"] == "initialized" else "oob")


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(text)
    return value


def expectation_of_payload(payload: bytes | str) -> Expect:
    """The expectation for raw message bytes: only UTF-8 JSON text is a message at all."""
    try:
        text = payload if isinstance(payload, str) else payload.decode("utf-8")
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError):
        return Expect("oob")
    return expectation(value)
