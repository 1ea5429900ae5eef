"""Typed params and result of ``capabilityRoots/discoverV1`` (protocol.md §5.4).

A root's ``path`` is checked while the params decode, as the reference's serde does: a URI
that is not an absolute ``file:`` URI fails the whole request (``-32602``), while one naming
another host or a Windows drive is that root's own ``error``. Every URI the result shows is
spelled the way the reference spells it: the request's URI in its WHATWG serialization
(``echo_uri``), and below it names appended in ``to_uri``'s encoding (``child_uri``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, Final
from urllib.parse import unquote_to_bytes

from executor.errors import InvalidParams
from executor.protocol.decode import DecodeError, Parsed, describe
from executor.protocol.intent import WireSandbox
from executor.protocol.paths import ForeignPathError, parse_path_uri

__all__ = [
    "CapabilityRootsDiscoverParams",
    "DiscoverResult",
    "DiscoveredPlugin",
    "DiscoveredSkill",
    "RootDiscovery",
    "RootRequest",
    "RootUri",
    "TextFile",
    "child_uri",
    "echo_uri",
    "parse_root_uri",
]

_SCHEME: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_SINGLE_DOT: Final = frozenset({".", "%2e"})
_DOUBLE_DOT: Final = frozenset({"..", ".%2e", "%2e.", "%2e%2e"})
#: What a WHATWG URL path percent-encodes besides controls and non-ASCII.
_PATH_ESCAPED: Final = frozenset(' "#<>?`{}')


def _escape(segment: str) -> str:
    out: list[str] = []
    for char in segment:
        if char in _PATH_ESCAPED or not 0x20 <= ord(char) <= 0x7E:
            out.extend(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
        else:
            out.append(char)
    return "".join(out)


def echo_uri(uri: str) -> str:
    """``uri`` (an absolute ``file:`` URI) as the reference serializes it.

    The scheme is lower case, an empty or ``localhost`` authority is dropped, ``\\`` is a
    separator, dot segments (also escaped, ``%2e``) are removed, a final one leaving a
    trailing slash, and characters a URL path may not hold are percent-encoded; escapes
    already there, empty segments and a trailing slash are kept as they are.
    """
    match = _SCHEME.match(uri)
    rest = uri[match.end() :] if match else uri
    rest = rest.replace("\\", "/")
    host = ""
    if rest.startswith("//"):
        authority, slash, rest = rest[2:].partition("/")
        rest = slash + rest
        if authority.lower() != "localhost":
            host = authority.lower()
    segments = rest.lstrip("/").split("/")
    kept: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        lowered = segment.lower()
        if lowered in _DOUBLE_DOT:
            if kept:
                kept.pop()
            if last:
                kept.append("")
        elif lowered in _SINGLE_DOT:
            if last:
                kept.append("")
        else:
            kept.append(_escape(segment))
    return f"file://{host}/" + "/".join(kept)


def child_uri(base: str, relative: str) -> str:
    """``base`` (a URI as echoed) joined with ``relative``: ``/``-prefixed, already encoded."""
    return base + relative[1:] if base.endswith("/") else base + relative


@dataclass(frozen=True, slots=True)
class RootUri:
    """A root's ``path``: as the result shows it, and where it is on this host."""

    echo: str
    #: The normalized native path; None when the URI names no path on this host.
    native: str | None
    #: Why ``native`` is None (the reference's wording), else None.
    problem: str | None = None


def parse_root_uri(value: Any, path: str) -> RootUri:
    """Decode a root's ``path``: bad URIs fail the request, foreign ones only the root.

    ``\\`` separates like ``/`` (a ``file:`` URL is "special" to WHATWG parsing).
    """
    if type(value) is not str:
        raise DecodeError(f"invalid type: {describe(value)}, expected a string", path)
    echo = echo_uri(value)
    try:
        native = parse_path_uri(value.replace("\\", "/"))
    except ForeignPathError:  # a valid URI naming another host's path
        return RootUri(echo, None, ForeignPathError(echo).message)
    except InvalidParams:
        if b"\0" in unquote_to_bytes(value):  # the reference's words for a NUL byte
            raise InvalidParams(ForeignPathError(echo).message) from None
        raise
    return RootUri(echo, native)


@dataclass(frozen=True, slots=True, kw_only=True)
class RootRequest:
    """One root to scan: a client-chosen id (echoed, not checked for uniqueness)."""

    id: str
    path: Annotated[RootUri, Parsed(parse_root_uri)]
    sandbox: WireSandbox | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CapabilityRootsDiscoverParams:
    """``capabilityRoots/discoverV1`` params (an empty list is allowed)."""

    roots: tuple[RootRequest, ...]


# --- result ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextFile:
    """A file read whole: its URI and its UTF-8 text."""

    path: str
    contents: str

    def to_wire(self) -> dict[str, Any]:
        """Wire form."""
        return {"path": self.path, "contents": self.contents}


def _optional(file: TextFile | None) -> dict[str, Any] | None:
    return None if file is None else file.to_wire()


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscoveredPlugin:
    """The root's own plugin manifest and the MCP and apps configurations it leads to."""

    manifest: TextFile
    mcp_config: TextFile | None
    apps_config: TextFile | None

    def to_wire(self) -> dict[str, Any]:
        """Wire form."""
        return {
            "manifest": self.manifest.to_wire(),
            "mcpConfig": _optional(self.mcp_config),
            "appsConfig": _optional(self.apps_config),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscoveredSkill:
    """A ``SKILL.md`` and, when there is one, its ``agents/openai.yaml``."""

    instructions: TextFile
    metadata: TextFile | None

    def to_wire(self) -> dict[str, Any]:
        """Wire form."""
        return {"instructions": self.instructions.to_wire(), "metadata": _optional(self.metadata)}


@dataclass(frozen=True, slots=True, kw_only=True)
class RootDiscovery:
    """What one root holds; a root that could not be scanned has only ``error``."""

    id: str
    path: str
    plugin: DiscoveredPlugin | None = None
    skills: tuple[DiscoveredSkill, ...] = ()
    namespace_manifests: tuple[TextFile, ...] = ()
    warnings: tuple[str, ...] = ()
    error: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """Wire form, fields in the reference's order."""
        return {
            "id": self.id,
            "path": self.path,
            "plugin": None if self.plugin is None else self.plugin.to_wire(),
            "skills": [skill.to_wire() for skill in self.skills],
            "namespaceManifests": [file.to_wire() for file in self.namespace_manifests],
            "warnings": list(self.warnings),
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class DiscoverResult:
    """``capabilityRoots/discoverV1`` result: one entry per requested root, in order."""

    roots: tuple[RootDiscovery, ...]

    def to_wire(self) -> dict[str, Any]:
        """Wire form."""
        return {"roots": [root.to_wire() for root in self.roots]}
