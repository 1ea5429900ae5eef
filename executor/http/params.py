"""``http/request`` params (protocol.md §5.26) and their validation into an outgoing request.

Validation follows the reference's order and wording: the method token, then the URL (parse,
then scheme), then each header in order (name, ``valueEnvVar``, value). What this executor's
policy adds (the host allow-list, allowed ``valueEnvVar`` names) comes in the same pass.
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
    headers: tuple[tuple[str, bytes], ...]
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
    headers = [_header(header, policy, environ) for header in params.headers]
    policy.check_host(url.host)
    if url.username or url.password is not None:
        headers.insert(0, ("authorization", _basic_auth(url)))
    return OutgoingRequest(
        method=params.method,
        url=url,
        headers=tuple(headers),
        body=params.body_base64 or b"",
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
    return header.name.lower(), value.encode("utf-8", "replace")


def _basic_auth(url: Url) -> bytes:
    """Credentials in the URL become ``Authorization: Basic`` (percent-decoded), as reqwest does."""
    from urllib.parse import unquote_to_bytes

    user = unquote_to_bytes(url.username)
    password = unquote_to_bytes(url.password or "")
    return b"Basic " + base64.b64encode(user + b":" + password)
