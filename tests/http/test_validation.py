"""http/request validation errors, worded as the reference words them (probed on v0.169.0)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.http.helpers import request
from tests.support.client import RpcError, WsClient

URL = "http://127.0.0.1:9/"


def _refusal(client: WsClient, **params: Any) -> tuple[int, str]:
    with pytest.raises(RpcError) as error:
        request(client, params.pop("url", URL), **params)
    return error.value.code, error.value.message


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "http/request url is invalid: relative URL without a base"),
        ("example.com/x", "http/request url is invalid: relative URL without a base"),
        ("http://", "http/request url is invalid: empty host"),
        ("http://:80/", "http/request url is invalid: empty host"),
        ("http://host:99999/", "http/request url is invalid: invalid port number"),
        ("http://host:abc/", "http/request url is invalid: invalid port number"),
        ("http://[zz]/", "http/request url is invalid: invalid IPv6 address"),
        ("http://256.1.1.1/", "http/request url is invalid: invalid IPv4 address"),
        ("http://a b/", "http/request url is invalid: invalid international domain name"),
        ("ftp://x/", "http/request only supports http and https URLs, got ftp"),
        ("file:///etc/passwd", "http/request only supports http and https URLs, got file"),
    ],
    ids=[
        "empty",
        "no-scheme",
        "no-host",
        "empty-host",
        "port-range",
        "port-text",
        "ipv6",
        "ipv4",
        "space-in-host",
        "ftp",
        "file",
    ],
)
def test_bad_urls(client: WsClient, url: str, message: str) -> None:
    """Every bad URL is -32602 with the reference's detail."""
    assert _refusal(client, url=url) == (-32602, message)


@pytest.mark.parametrize(
    "method",
    ["", "G T", "GET\n", "GÉT", "(GET)"],
    ids=["empty", "space", "newline", "non-ascii", "separator"],
)
def test_bad_methods(client: WsClient, method: str) -> None:
    """A method that is not an HTTP token is refused (checked before the URL)."""
    assert _refusal(client, method=method, url="nope") == (
        -32602,
        "http/request method is invalid: invalid HTTP method",
    )


@pytest.mark.parametrize("name", ["", "X A", "X:A", "Xé"], ids=["empty", "space", "colon", "é"])
def test_bad_header_names(client: WsClient, name: str) -> None:
    """A header name that is not a token is refused."""
    headers = [{"name": name, "value": "v"}]
    assert _refusal(client, headers=headers) == (
        -32602,
        "http/request header name is invalid: invalid HTTP header name",
    )


@pytest.mark.parametrize(
    "value", ["a\nb", "a\rb", "a\x00b", "\x7f"], ids=["lf", "cr", "nul", "del"]
)
def test_bad_header_values(client: WsClient, value: str) -> None:
    """Control characters in a header value are refused, naming the header."""
    headers = [{"name": "X-Bad", "value": value}]
    assert _refusal(client, headers=headers) == (
        -32602,
        "http/request header value is invalid for X-Bad: failed to parse header value",
    )


def test_bad_base64_body(client: WsClient) -> None:
    """Invalid base64 in bodyBase64 is -32602, like every base64 param of the daemon."""
    code, message = _refusal(client, bodyBase64="!!")
    assert code == -32602
    assert "bodyBase64" in message


def test_bad_redirect_policy_and_missing_request_id(client: WsClient) -> None:
    """Enum and required fields decode strictly."""
    assert _refusal(client, redirectPolicy="none")[0] == -32602
    with pytest.raises(RpcError) as error:
        client.request("http/request", {"method": "GET", "url": URL})
    assert (error.value.code, error.value.message) == (-32602, "missing field `requestId`")
