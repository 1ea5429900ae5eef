"""Absolute ``http:``/``https:`` URLs, parsed the way the reference's URL crate parses them.

The reference parses ``http/request`` URLs with a WHATWG URL parser and clients see its
details (``empty host``, ``invalid port number``, ...). This module implements the part of
that algorithm a request URL can reach: special-scheme authority parsing, host
canonicalization (IPv4 in every WHATWG spelling, bracketed IPv6, IDNA for non-ASCII names),
dot-segment removal and the percent-encode sets of path, query and fragment. It is pure.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote_to_bytes

__all__ = ["UnsupportedScheme", "Url", "UrlError", "parse_url"]

DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_C0_OR_SPACE: Final = "".join(map(chr, range(0x21)))
# WHATWG's forbidden domain code points; the reference reports them as an IDNA failure.
_FORBIDDEN_HOST: Final = re.compile(r"[\x00-\x20\x7f#%/:<>?@\[\\\]^|]")
_PATH_SET: Final = frozenset(' "#<>?`{}')
_QUERY_SET: Final = frozenset(" \"#<>'")
_FRAGMENT_SET: Final = frozenset(' "<>`')
_SINGLE_DOT: Final = frozenset({".", "%2e"})
_DOUBLE_DOT: Final = frozenset({"..", ".%2e", "%2e.", "%2e%2e"})


class UrlError(ValueError):
    """The text is not a valid absolute URL; ``detail`` is the reference's wording."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class UnsupportedScheme(ValueError):
    """A valid URL whose scheme is not ``http`` or ``https``."""

    def __init__(self, scheme: str) -> None:
        super().__init__(scheme)
        self.scheme = scheme


@dataclass(frozen=True, slots=True, kw_only=True)
class Url:
    """A parsed, canonical ``http(s)`` URL (every component already percent-encoded)."""

    scheme: str
    username: str
    password: str | None
    #: Serialized host: a lowercase domain, dotted IPv4, or ``[v6]`` in brackets.
    host: str
    port: int
    path: str
    query: str | None
    fragment: str | None

    @property
    def hostname(self) -> str:
        """The host to connect to (IPv6 without brackets)."""
        return self.host[1:-1] if self.host.startswith("[") else self.host

    @property
    def authority(self) -> str:
        """``host[:port]``, the port omitted when it is the scheme's default (``Host`` header)."""
        default = DEFAULT_PORTS.get(self.scheme)
        return self.host if self.port == default else f"{self.host}:{self.port}"

    @property
    def target(self) -> str:
        """The request target: path and query."""
        return self.path if self.query is None else f"{self.path}?{self.query}"

    def origin(self) -> tuple[str, str, int]:
        """What decides whether credentials may follow a redirect."""
        return (self.scheme, self.host, self.port)

    def display(self) -> str:
        """The URL without credentials, as the reference prints it in errors."""
        text = f"{self.scheme}://{self.authority}{self.target}"
        return text if self.fragment is None else f"{text}#{self.fragment}"

    def referer(self) -> str:
        """The URL as a ``Referer``: no credentials, no fragment."""
        return f"{self.scheme}://{self.authority}{self.target}"

    def join(self, reference: str) -> Url:
        """Resolve a ``Location`` header against this URL (RFC 3986 / WHATWG relative forms)."""
        text = reference.strip(_C0_OR_SPACE).replace("\t", "").replace("\n", "").replace("\r", "")
        base = f"{self.scheme}://{self.authority}"
        if _SCHEME.match(text):
            return parse_url(text)
        if text[:2] in ("//", "\\\\", "/\\", "\\/"):
            return parse_url(f"{self.scheme}:{text}")
        if text[:1] in ("/", "\\"):
            return parse_url(base + text)
        if text[:1] == "?":
            return parse_url(base + self.path + text)
        if text[:1] == "#":
            return parse_url(base + self.target + text)
        if not text:
            return parse_url(base + self.target)
        directory = self.path[: self.path.rfind("/") + 1]
        return parse_url(base + directory + text)


#: Longest URL text whose parse is cached. Entries are counted, not sized: without this bound
#: 512 long URLs (a client's, or a fuzzer's) stayed in memory for good (measured: 200 KB URLs
#: kept 197 MiB). With it, 512 URLs of 2 KiB keep under 2 MiB.
CACHED_URL_CHARS: Final = 2048


def parse_url(text: str) -> Url:
    """Parse an absolute URL; ``UrlError`` if invalid, ``UnsupportedScheme`` if not http(s).

    Cached (``Url`` is immutable): clients tend to ask for the same few URLs again and again,
    and the parse is a good part of a small request's CPU time. Long URLs are parsed uncached.
    """
    if len(text) <= CACHED_URL_CHARS:
        return _parse_cached(text)
    return _parse_url(text)


@functools.lru_cache(maxsize=512)
def _parse_cached(text: str) -> Url:
    return _parse_url(text)


def _parse_url(text: str) -> Url:
    text = text.strip(_C0_OR_SPACE).replace("\t", "").replace("\n", "").replace("\r", "")
    match = _SCHEME.match(text)
    if match is None:
        raise UrlError("relative URL without a base")
    scheme = match.group(1).lower()
    if scheme not in DEFAULT_PORTS:
        raise UnsupportedScheme(scheme)
    url = _parse_special(scheme, text[match.end() :])
    if scheme not in ("http", "https"):
        raise UnsupportedScheme(scheme)
    return url


def _parse_special(scheme: str, rest: str) -> Url:
    rest = rest.lstrip("/\\")  # special schemes ignore any number of slashes here
    end = len(rest)
    for index, char in enumerate(rest):
        if char in "/\\?#":
            end = index
            break
    authority, rest = rest[:end], rest[end:]
    username, password = "", None
    if "@" in authority:
        userinfo, _, authority = authority.rpartition("@")
        user, colon, secret = userinfo.partition(":")
        username = _encode(user, _USERINFO_SET)
        password = _encode(secret, _USERINFO_SET) if colon else None
    host_text, port_text = _split_port(authority)
    host = _parse_host(host_text)
    port = _parse_port(port_text, DEFAULT_PORTS[scheme])
    rest, _, fragment = rest.partition("#") if "#" in rest else (rest, "", None)
    path, _, query = rest.partition("?") if "?" in rest else (rest, "", None)
    return Url(
        scheme=scheme,
        username=username,
        password=password,
        host=host,
        port=port,
        path=_normalize_path(path),
        query=None if query is None else _encode(query, _QUERY_SET),
        fragment=None if fragment is None else _encode(fragment, _FRAGMENT_SET),
    )


_USERINFO_SET: Final = frozenset(' "#<>?`{}/:;=@[\\]^|')


def _split_port(authority: str) -> tuple[str, str | None]:
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise UrlError("invalid IPv6 address")
        after = authority[close + 1 :]
        if after and not after.startswith(":"):
            raise UrlError("invalid port number")
        return authority[: close + 1], after[1:] if after else None
    host, colon, port = authority.partition(":")
    return host, port if colon else None


def _parse_port(text: str | None, default: int) -> int:
    if not text:
        return default
    if not text.isascii() or not text.isdigit() or int(text) > 0xFFFF:
        raise UrlError("invalid port number")
    return int(text)


def _parse_host(text: str) -> str:
    if not text:
        raise UrlError("empty host")
    if text.startswith("["):
        try:
            return f"[{ipaddress.IPv6Address(text[1:-1]).compressed}]"
        except ValueError:
            raise UrlError("invalid IPv6 address") from None
    domain = unquote_to_bytes(text).decode("utf-8", "replace")
    try:
        ascii_name = ".".join(_label_to_ascii(label) for label in domain.split("."))
    except UnicodeError:
        raise UrlError("invalid international domain name") from None
    if not ascii_name or _FORBIDDEN_HOST.search(ascii_name):
        raise UrlError("invalid international domain name")
    if _ends_in_number(ascii_name):
        return _parse_ipv4(ascii_name)
    return ascii_name


def _label_to_ascii(label: str) -> str:
    if label.isascii():
        return label.lower()
    return label.encode("idna").decode("ascii")


def _ends_in_number(host: str) -> bool:
    labels = host.split(".")
    if labels[-1] == "" and len(labels) > 1:
        labels.pop()
    last = labels[-1]
    if last.isdigit():
        return True
    return last[:2] in ("0x", "0X") and all(c in "0123456789abcdefABCDEF" for c in last[2:])


def _parse_ipv4(host: str) -> str:
    """WHATWG IPv4: 1-4 parts, each decimal, ``0x`` hex or ``0`` octal; the last fills the rest."""
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if len(parts) > 4:
        raise UrlError("invalid IPv4 address")
    try:
        numbers = [_ipv4_number(part) for part in parts]
    except ValueError:
        raise UrlError("invalid IPv4 address") from None
    if any(number > 255 for number in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise UrlError("invalid IPv4 address")
    value = numbers[-1]
    for index, number in enumerate(numbers[:-1]):
        value += number << (8 * (3 - index))
    return str(ipaddress.IPv4Address(value))


def _ipv4_number(part: str) -> int:
    if part[:2] in ("0x", "0X"):
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part[1:], 8)
    return int(part, 10)


def _normalize_path(path: str) -> str:
    """Split on ``/`` and ``\\``, drop dot segments, percent-encode each remaining segment."""
    segments = re.split(r"[/\\]", path)[1:] if path else []
    out: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        lowered = segment.lower()
        if lowered in _DOUBLE_DOT:
            if out:
                out.pop()
            if last:
                out.append("")
        elif lowered in _SINGLE_DOT:
            if last:
                out.append("")
        else:
            out.append(_encode(segment, _PATH_SET))
    return "/" + "/".join(out)


def _encode(text: str, escape: frozenset[str]) -> str:
    """Percent-encode C0 controls, non-ASCII (as UTF-8) and ``escape``; ``%`` is kept."""
    if text.isascii() and not any(c in escape or c < " " or c == "\x7f" for c in text):
        return text
    out = []
    for char in text:
        if char in escape or char < " " or char == "\x7f" or not char.isascii():
            out.append("".join(f"%{byte:02X}" for byte in char.encode("utf-8", "replace")))
        else:
            out.append(char)
    return "".join(out)
