"""PathUri: ``file:`` URIs on the wire, native absolute paths inside (pure).

Parsing follows the reference's lenient WHATWG-style reading: the scheme is case-insensitive,
``file:/p``, ``file:///p`` and ``file://localhost/p`` are the same, percent-escapes are
decoded, raw spaces and non-ASCII are tolerated, and ``.``/``..`` are removed lexically.
Decoded bytes that are not UTF-8 are kept exactly (``surrogateescape``), so every byte path
round-trips. Output URIs are canonical: ``file://`` + percent-encoded path, no trailing slash.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import sys
from typing import Final
from urllib.parse import quote, unquote_to_bytes

from executor.errors import InvalidParams, InvalidRequest

__all__ = ["ForeignPathError", "parse_path_uri", "to_uri"]

_PLATFORM: Final = {"linux": "linux", "darwin": "macos", "win32": "windows"}.get(
    sys.platform, sys.platform
)
_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_DRIVE: Final = re.compile(r"^/[A-Za-z](:|%3[Aa])(/|$)")
# Characters left as they are in output URIs; everything else is percent-encoded. These are
# the printable ASCII characters a WHATWG URL path keeps, less ``%`` and ``\\`` (observed on
# the reference's ``fs/walk`` and capability discovery, v0.171.0: ``a|b``, ``a[b]``, ``a^b``).
_SAFE: Final = "/!$&'()*+,;=:@~-._[]^|"


class ForeignPathError(InvalidRequest):
    """A well-formed URI that names no path on this host (remote host, Windows drive)."""

    def __init__(self, uri: str) -> None:
        super().__init__(f"'{uri}' is invalid on '{_PLATFORM}'")
        self.uri = uri


def parse_path_uri(uri: str) -> str:
    """Decode a ``file:`` URI to a normalized native absolute path.

    Raises ``InvalidParams`` for URIs that are not absolute ``file:`` URIs (relative, other
    scheme, query, fragment, NUL) and ``ForeignPathError`` for ones naming another host.
    """
    # Clients send the same few URIs again and again (a session's working directory, with
    # every process/start); parsing one walks urllib and posixpath, ~40 µs before a launch
    # when the caches are cold. Only short ones are remembered: the memo stays small
    # whatever a client sends. Refusals are not remembered (lru_cache keeps no exception).
    if len(uri) <= _MEMO_CHARS:
        return _parse_remembered(uri)
    return _parse(uri)


#: The longest URI ``parse_path_uri`` remembers, and how many it remembers.
_MEMO_CHARS: Final = 512
_MEMO_SIZE: Final = 256


def _parse(uri: str) -> str:
    match = _SCHEME.match(uri)
    if match is None:
        raise InvalidParams("invalid URI: relative URL without a base")
    scheme = match.group(1).lower()
    if scheme != "file":
        raise InvalidParams(f"unsupported path URI scheme `{scheme}`")
    rest = uri[match.end() :]
    if "#" in rest:
        raise InvalidParams("fragments are not allowed in path URIs")
    if "?" in rest:
        raise InvalidParams("query parameters are not allowed in path URIs")
    path = _strip_authority(uri, rest.replace("\\", "/") if _PLATFORM == "windows" else rest)
    if _DRIVE.match(path) and _PLATFORM != "windows":
        raise ForeignPathError(uri)
    raw = unquote_to_bytes(path)
    if b"\0" in raw:
        raise InvalidParams("path URIs must not contain NUL bytes")
    return _normalize(os.fsdecode(raw))


_parse_remembered = functools.lru_cache(maxsize=_MEMO_SIZE)(_parse)


def _strip_authority(uri: str, rest: str) -> str:
    if not rest.startswith("//"):
        return rest if rest.startswith("/") else "/" + rest
    authority, slash, path = rest[2:].partition("/")
    if authority.lower() not in ("", "localhost"):
        raise ForeignPathError(uri)
    return slash + path if slash else "/"


def _normalize(path: str) -> str:
    # posixpath.normpath keeps a leading "//"; the URI form never means a network path here.
    normalized = posixpath.normpath(path)
    if normalized.startswith("//"):
        normalized = "/" + normalized.lstrip("/")
    return normalized


def to_uri(path: str) -> str:
    """Render a native absolute path as a canonical ``file:`` URI."""
    normalized = _normalize(path)
    return "file://" + quote(os.fsencode(normalized), safe=_SAFE)
