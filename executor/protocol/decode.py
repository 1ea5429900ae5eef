"""Typed decoding of JSON values into frozen dataclasses, with serde-style error messages.

The reference decodes params with serde, so clients see messages such as
``missing field `processId``` or ``invalid type: string "x", expected u64``. We produce the
same family of messages, plus the path of the offending field, and raise ``InvalidParams``.

A dataclass is decoded field by field from its type hints. Wire names are the camelCase form
of the Python names unless the class sets ``__wire_case__ = "snake"`` (the sandbox permission
profile is snake_case on the wire) or a field sets ``metadata={"wire": "name"}``. Fields with
defaults are optional; absent and ``null`` both take the default for optional fields. Unknown
keys are ignored, as the reference ignores them. Decoders are compiled once per class.
"""

from __future__ import annotations

import binascii
import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar, Union, get_args, get_origin

from executor.errors import InvalidParams
from executor.protocol import b64codec

__all__ = [
    "U16",
    "U64",
    "Base64",
    "Base64Bytes",
    "DecodeError",
    "IntRange",
    "Parsed",
    "Usize",
    "camel",
    "decode",
    "decode_unit",
    "describe",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class IntRange:
    """Marks an ``int`` field with the bounds (and the serde name) of its wire type."""

    low: int
    high: int
    name: str


class Base64:
    """Marks a ``bytes`` field carried as standard padded base64 text."""


@dataclass(frozen=True, slots=True)
class Parsed:
    """Marks a field whose wire form has its own parser, ``parse(value, path)``.

    For values too irregular for field-by-field decoding (the ``sandbox`` context mixes
    snake_case and camelCase, aliases and cross-field rules); the parser raises
    ``DecodeError`` with the path it is given, so its messages read like every other field's.
    """

    parse: Callable[[Any, str], Any]


Base64Bytes = typing.Annotated[bytes, Base64]
U64 = typing.Annotated[int, IntRange(0, 2**64 - 1, "u64")]
Usize = typing.Annotated[int, IntRange(0, 2**64 - 1, "usize")]
U16 = typing.Annotated[int, IntRange(0, 2**16 - 1, "u16")]


class DecodeError(InvalidParams):
    """A value did not match its declared type; the message names the field path."""

    def __init__(self, detail: str, path: str) -> None:
        super().__init__(f"{detail} at `{path}`" if path else detail)
        self.detail = detail
        self.path = path


Decoder = Callable[[Any, str], Any]
_MISSING: Final = object()


def camel(name: str) -> str:
    """``process_id`` -> ``processId``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def describe(value: object) -> str:
    """Describe a JSON value the way serde does in ``invalid type`` messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f'string "{value[:80]}"'
    if isinstance(value, list):
        return "sequence"
    return "map"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def decode(cls: type[T], value: Any, path: str = "") -> T:
    """Decode ``value`` into ``cls`` or raise ``DecodeError`` naming the field path."""
    result: T = _decoder_for(cls)(value, path)
    return result


def decode_unit(value: Any) -> None:
    """Params of methods that take none: absent, ``null`` or ``{}``."""
    if value is None or value == {}:
        return
    found = "sequence" if isinstance(value, list) else "map" if isinstance(value, dict) else None
    raise DecodeError(f"invalid type: {found or describe(value)}, expected unit", "")


_CACHE: dict[Any, Decoder] = {}


def _decoder_for(tp: Any) -> Decoder:
    cached = _CACHE.get(tp)
    if cached is None:
        cached = _CACHE[tp] = _build(tp)
    return cached


def _build(tp: Any) -> Decoder:
    origin = get_origin(tp)
    if origin is typing.Annotated:
        base, *marks = get_args(tp)
        return _annotated(base, marks)
    if origin in (Union, types.UnionType):
        return _optional(tp)
    if origin in (list, tuple):
        return _sequence(get_args(tp)[0])
    if origin is dict:
        return _mapping(get_args(tp)[1])
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _struct(tp)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum(tp)
    if tp is str:
        return _scalar(str, "a string")
    if tp is bool:
        return _scalar(bool, "a boolean")
    if tp is int:
        return _integer(IntRange(-(2**63), 2**63 - 1, "i64"))
    if tp is Any or tp is object:
        return lambda value, path: value
    raise TypeError(f"unsupported wire type {tp!r}")


def _scalar(kind: type, expected: str) -> Decoder:
    def check(value: Any, path: str) -> Any:
        if type(value) is not kind:
            raise DecodeError(f"invalid type: {describe(value)}, expected {expected}", path)
        return value

    return check


def _integer(bounds: IntRange) -> Decoder:
    def check(value: Any, path: str) -> int:
        if type(value) is not int:
            raise DecodeError(f"invalid type: {describe(value)}, expected {bounds.name}", path)
        if not bounds.low <= value <= bounds.high:
            raise DecodeError(f"invalid value: {describe(value)}, expected {bounds.name}", path)
        return value

    return check


def _base64(value: Any, path: str) -> bytes:
    if type(value) is not str:
        raise DecodeError(f"invalid type: {describe(value)}, expected a base64 string", path)
    try:
        return b64codec.decode(value)
    except (binascii.Error, ValueError) as exc:
        raise DecodeError(f"invalid base64: {exc}", path) from exc


def _annotated(base: Any, marks: list[Any]) -> Decoder:
    for mark in marks:
        if isinstance(mark, IntRange):
            return _integer(mark)
        if mark is Base64 or isinstance(mark, Base64):
            return _base64
        if isinstance(mark, Parsed):
            return mark.parse
    return _decoder_for(base)


def _optional(tp: Any) -> Decoder:
    members = [arg for arg in get_args(tp) if arg is not type(None)]
    if len(members) != 1:
        raise TypeError(f"only `X | None` unions are supported, got {tp!r}")
    inner = _decoder_for(members[0])

    def check(value: Any, path: str) -> Any:
        return None if value is None else inner(value, path)

    return check


def _sequence(item_type: Any) -> Decoder:
    item = _decoder_for(item_type)
    strings = item_type is str

    def check(value: Any, path: str) -> tuple[Any, ...]:
        if type(value) is not list:
            raise DecodeError(f"invalid type: {describe(value)}, expected a sequence", path)
        if strings and all(type(element) is str for element in value):
            return tuple(value)  # (an argv: no element's path is needed)
        return tuple(item(element, f"{path}[{index}]") for index, element in enumerate(value))

    return check


def _mapping(value_type: Any) -> Decoder:
    item = _decoder_for(value_type)
    strings = value_type is str

    def check(value: Any, path: str) -> dict[str, Any]:
        if type(value) is not dict:
            raise DecodeError(f"invalid type: {describe(value)}, expected a map", path)
        if strings and all(type(element) is str for element in value.values()):
            return dict(value)  # (an environment: no entry's path is needed)
        return {key: item(element, _join(path, key)) for key, element in value.items()}

    return check


def _enum(tp: type[enum.Enum]) -> Decoder:
    by_value = {member.value: member for member in tp}
    aliases: dict[str, Any] = getattr(tp, "__wire_aliases__", {})
    names = [f"`{member.value}`" for member in tp]
    # serde's wording: "expected `a`", "expected `a` or `b`", "expected one of `a`, `b`, `c`"
    expected = " or ".join(names) if len(names) <= 2 else "one of " + ", ".join(names)

    def check(value: Any, path: str) -> Any:
        if type(value) is not str:
            raise DecodeError(f"invalid type: {describe(value)}, expected {expected}", path)
        member = by_value.get(value) or aliases.get(value)
        if member is None:
            raise DecodeError(f"unknown variant `{value}`, expected {expected}", path)
        return member

    return check


def _struct(cls: type) -> Decoder:
    hints = typing.get_type_hints(cls, include_extras=True)
    snake = getattr(cls, "__wire_case__", "camel") == "snake"
    plan: list[tuple[str, str, Decoder, bool]] = []
    # What absent optional fields get (a request names few of them): copied, then overlaid.
    defaults: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        wire = field.metadata.get("wire") or (field.name if snake else camel(field.name))
        if field.default is not dataclasses.MISSING:
            defaults[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            defaults[field.name] = field.default_factory()
        plan.append((field.name, wire, _decoder_for(hints[field.name]), field.name in defaults))
    name = cls.__name__

    def check(value: Any, path: str) -> Any:
        if type(value) is not dict:
            raise DecodeError(f"invalid type: {describe(value)}, expected struct {name}", path)
        kwargs = defaults.copy()
        for attr, wire, field_decoder, optional in plan:
            raw = value.get(wire, _MISSING)
            if raw is _MISSING or raw is None:
                if optional:
                    continue  # absent and null both take the default
                if raw is _MISSING:
                    raise DecodeError(f"missing field `{wire}`", path)
            kwargs[attr] = field_decoder(raw, _join(path, wire))
        return cls(**kwargs)

    return check
