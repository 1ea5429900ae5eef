"""Where a plugin manifest says its MCP and apps configurations are (``mcpServers``, ``apps``).

Capability discovery reads a root manifest's two declarations the way the reference's serde
does, so that the same manifest leads to the same files:

* the text must be strict JSON (no ``NaN``), an object or an array of at most two elements
  (serde reads a struct from a sequence, in field order); anything else, or a declaration
  given twice, or a declared value nested deeper than serde's recursion limit or holding a
  lone surrogate, means "no declarations" (the default ``.mcp.json`` is still looked for),
  silently. Other fields are ignored however they look, except that Python's parser gives
  up on nesting near 1,000 levels where serde skips any depth (docs/capabilities.md);
* ``mcpServers`` as an object is inline: no MCP file is read at all;
* a string must start with ``./`` and stay below the root (no ``..`` component, not empty,
  not absolute), else it is ignored with a warning naming the manifest.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["Declarations", "read_declarations"]

#: Containers a declared value may nest (serde_json's recursion limit, less the manifest's).
_MAX_VALUE_DEPTH: Final = 126
_DECLARED: Final = ("mcpServers", "apps")
_SEPARATORS: Final = re.compile(r"[/\\]")


@dataclass(frozen=True, slots=True)
class Declarations:
    """Relative paths (normalized, ``.`` for the root itself) the manifest declares."""

    mcp_config: str | None = None
    mcp_inline: bool = False
    apps_config: str | None = None


class _Object(dict[str, Any]):
    """A JSON object that remembers which of its keys came more than once."""

    __slots__ = ("repeated",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self.repeated: frozenset[str] = frozenset()
        if len(self) != len(pairs):
            counts = Counter(key for key, _ in pairs)
            self.repeated = frozenset(key for key, count in counts.items() if count > 1)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse(text: str) -> tuple[Any, Any] | None:
    """The (mcpServers, apps) values as serde would deserialize them, or None."""
    try:
        value = json.loads(text, object_pairs_hook=_Object, parse_constant=_no_constants)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, _Object):
        if value.repeated.intersection(_DECLARED):
            return None  # serde: duplicate field
        fields = (value.get("mcpServers"), value.get("apps"))
    elif isinstance(value, list) and len(value) <= len(_DECLARED):
        padded = [*value, None, None]
        fields = (padded[0], padded[1])
    else:
        return None
    if not all(_deserializable(field) for field in fields):
        return None
    return fields


def _deserializable(value: Any) -> bool:
    """Whether serde_json turns ``value`` into a ``Value``: nested within its recursion limit
    and free of lone surrogates (a number out of range is fine: infinite, as in serde)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                return False
        elif isinstance(item, dict | list):
            if depth > _MAX_VALUE_DEPTH:
                return False
            if isinstance(item, dict):
                if any(_has_surrogate(key) for key in item):
                    return False
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)
    return True


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(char) <= 0xDFFF for char in text)


def _declared_path(field: str, value: Any, manifest: str, warnings: list[str]) -> str | None:
    if not isinstance(value, str):
        return None
    if not value.startswith("./"):
        warnings.append(f"ignoring {field} in {manifest}: path must start with `./`")
        return None
    relative = value[2:]
    if (
        not relative
        or ".." in _SEPARATORS.split(relative)
        or relative.startswith("/")
        or "\0" in relative
    ):
        warnings.append(
            f"ignoring {field} in {manifest}: path must remain below the capability root"
        )
        return None
    return posixpath.normpath(relative)


def read_declarations(contents: str, manifest: str, warnings: list[str]) -> Declarations:
    """The declarations of the manifest text ``contents`` (at URI ``manifest``)."""
    fields = _parse(contents)
    if fields is None:
        return Declarations()
    mcp, apps = fields
    return Declarations(
        mcp_config=_declared_path("mcpServers", mcp, manifest, warnings),
        mcp_inline=isinstance(mcp, dict),
        apps_config=_declared_path("apps", apps, manifest, warnings),
    )
