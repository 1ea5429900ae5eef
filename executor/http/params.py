"""``http/request`` params (protocol.md §5.26) and their validation into an outgoing request.

Validation follows the reference's order and wording: the method token, then the URL (parse,
then scheme), then each header in order (name, ``valueEnvVar``, value). What this executor's
policy adds (the host allow-list, allowed ``valueEnvVar`` names) comes in the same pass, and
so does its one rule the reference lacks: the request's framing (``content-length``,
``transfer-encoding``, ``host``, the hop-by-hop headers) is the executor's to write. A
client that could set it could make one request carry two, and its extra response would be
read as the answer to whatever is sent next on that connection.
"""

from __future__ import annotations

import base64
import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from executor.errors import InvalidParams
from executor.http.policy import HttpPolicy
from executor.http.url import UnsupportedScheme, Url, UrlError, parse_url
from executor.protocol.decode import U64, Base64Bytes

__all__ = [
    "Header",
    "HttpRequestParams",
    "OutgoingRequest",
    "RedirectPolicy",
    "prepare",
]

# RFC 9110 ``token``: what a method and a header name may be made of.
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# A header value may hold any byte but controls (tab excepted) and DEL; non-ASCII goes as UTF-8.
_BAD_VALUE: Final = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
#: Headers that frame the message or manage the connection: never taken from the client.
_FRAMING: Final = frozenset(
    {
        "transfer-encoding",
        "te",
        "trailer",
        "connection",
        "keep-alive",
        "proxy-connection",
        "upgrade",
        "http2-settings",
    }
)


class RedirectPolicy(enum.StrEnum):
    """Whether redirects are followed (up to ten) or the 3xx is returned."""

    FOLLOW = "follow"
    STOP = "stop"


@dataclass(frozen=True, slots=True, kw_only=True)
class Header:
    """One request header; with ``valueEnvVar`` the value is ``value`` + that variable."""

    name: str
    value: str
    value_env_var: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpRequestParams:
    """``http/request`` params."""

    method: str
    url: str
    request_id: str
    headers: tuple[Header, ...] = ()
    body_base64: Base64Bytes | None = None
    timeout_ms: U64 | None = None
    redirect_policy: RedirectPolicy = RedirectPolicy.FOLLOW
    stream_response: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class OutgoingRequest:
    """A validated request, ready for the client: no JSON, no policy left to apply."""

    method: str
    url: Url
    #: Lowercase names (as the reference sends them), in the caller's order, duplicates kept.
    #: Never ``host`` (computed for each hop) nor ``_FRAMING``; a ``content-length`` here
    #: equals the body's length.
    headers: tuple[tuple[str, bytes], ...]
    #: Names of the headers whose value came from the executor's environment (``valueEnvVar``):
    #: dropped, like credentials, when a redirect leaves the origin.
    secret_headers: frozenset[str] = frozenset()
    body: bytes
    follow_redirects: bool
    #: Seconds for the whole exchange, headers and body; None: no deadline.
    timeout: float | None


def prepare(
    params: HttpRequestParams, policy: HttpPolicy, environ: Mapping[str, str]
) -> OutgoingRequest:
    """Validate ``params`` against the wire rules and ``policy``; ``InvalidParams`` otherwise."""
    if not _TOKEN.fullmatch(params.method):
        raise InvalidParams("http/request method is invalid: invalid HTTP method")
    url = _parse(params.url)
    body = params.body_base64 or b""
    headers: list[tuple[str, bytes]] = []
    secret: set[str] = set()
    for header in params.headers:
        name, value = _header(header, policy, environ)
        if _computed(header, name, value, url, body):
            continue
        headers.append((name, value))
        if header.value_env_var is not None:
            secret.add(name)
    policy.check_host(url.host)
    if url.username or url.password is not None:
        headers.insert(0, ("authorization", _basic_auth(url)))
    return OutgoingRequest(
        method=params.method,
        url=url,
        headers=tuple(headers),
        secret_headers=frozenset(secret),
        body=body,
        follow_redirects=params.redirect_policy is RedirectPolicy.FOLLOW,
        timeout=None if params.timeout_ms is None else params.timeout_ms / 1000,
    )


def _parse(text: str) -> Url:
    try:
        return parse_url(text)
    except UrlError as exc:
        raise InvalidParams(f"http/request url is invalid: {exc.detail}") from None
    except UnsupportedScheme as exc:
        raise InvalidParams(
            f"http/request only supports http and https URLs, got {exc.scheme}"
        ) from None


def _header(header: Header, policy: HttpPolicy, environ: Mapping[str, str]) -> tuple[str, bytes]:
    if not _TOKEN.fullmatch(header.name):
        raise InvalidParams("http/request header name is invalid: invalid HTTP header name")
    value = header.value
    if header.value_env_var is not None:
        policy.check_env_var(header.name, header.value_env_var)
        secret = environ.get(header.value_env_var)
        if secret is None:
            raise InvalidParams(
                f"http/request header {header.name} requires executor environment variable "
                f"{header.value_env_var}"
            )
        value += secret
    if _BAD_VALUE.search(value):
        raise InvalidParams(
            f"http/request header value is invalid for {header.name}: failed to parse header value"
        )
    # Surrounding whitespace is not part of a field value (RFC 9110 §5.5); h11 refuses it.
    return header.name.lower(), value.strip(" \t").encode("utf-8", "replace")


def _computed(header: Header, name: str, value: bytes, url: Url, body: bytes) -> bool:
    """Check a header against the framing the client computes. True for a ``host`` that
    names the URL's authority (left out: the computed one is sent, on every hop); a
    ``content-length`` equal to the body's length is kept. ``InvalidParams`` otherwise."""
    if name in _FRAMING:
        raise InvalidParams(
            f"http/request header {header.name} is not allowed: the executor frames requests itself"
        )
    if name == "content-length" and value != str(len(body)).encode():
        raise InvalidParams(
            f"http/request header {header.name} must match the body ({len(body)} bytes)"
            " or be left out: the executor frames requests itself"
        )
    if name == "host":
        if value.lower() != url.authority.encode("ascii"):
            raise InvalidParams(
                f"http/request header {header.name} must match the URL ({url.authority}) or be"
                " left out: the executor frames requests itself"
            )
        return True
    return False


def _basic_auth(url: Url) -> bytes:
    """Credentials in the URL become ``Authorization: Basic`` (percent-decoded), as reqwest does."""
    from urllib.parse import unquote_to_bytes

    user = unquote_to_bytes(url.username)
    password = unquote_to_bytes(url.password or "")
    return b"Basic " + base64.b64encode(user + b":" + password)
