"""Typed reads of parsed TOML values, failing with the reference's serde wording.

The reference deserializes a few settings into Rust types before it can answer (project
trust, and the legacy ``managed_config.toml`` it turns into requirements); when one has the
wrong shape the whole read fails with serde's message and the key path, e.g.
``unknown variant `bogus`, expected `trusted` or `untrusted`\\nin `projects.x.trust_level```.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

__all__ = ["TypeMismatch", "describe", "enum_value", "expected_variants"]


class TypeMismatch(Exception):
    """A value of the wrong shape; ``str()`` is serde's message with the key path."""

    def __init__(self, detail: str, path: str) -> None:
        super().__init__(f"{detail}\nin `{path}`\n")


def describe(value: Any) -> str:
    """A TOML value as serde names it in ``invalid type`` messages."""
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f'string "{value}"'
    if isinstance(value, list):
        return "sequence"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return "datetime"
    return "value"


def expected_variants(names: Sequence[str]) -> str:
    """serde's list of what an enum accepts: `a`, `a` or `b`, one of `a`, `b`, `c`."""
    quoted = [f"`{name}`" for name in names]
    if len(quoted) == 1:
        return quoted[0]
    if len(quoted) == 2:
        return f"{quoted[0]} or {quoted[1]}"
    return "one of " + ", ".join(quoted)


def enum_value(value: Any, names: Sequence[str], path: str) -> str:
    """A unit-variant enum written as a string (the only form the reference accepts)."""
    if isinstance(value, dict):
        # TOML's enum form: a table of exactly one ``variant = content`` entry.
        if len(value) != 1:
            found = "found 0 elements" if not value else "more than 1 element"
            raise TypeMismatch(f"wanted exactly 1 element, {found}", path)
        (variant,) = value
        if variant not in names:
            raise TypeMismatch(
                f"unknown variant `{variant}`, expected {expected_variants(names)}", path
            )
        raise TypeMismatch("invalid type: newtype variant, expected unit variant", path)
    if not isinstance(value, str):
        raise TypeMismatch("invalid type: unit variant, expected string only", path)
    if value not in names:
        raise TypeMismatch(f"unknown variant `{value}`, expected {expected_variants(names)}", path)
    return value
