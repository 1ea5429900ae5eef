"""Where http/request may connect: public addresses only, unless the operator allows more.

The check is on the address actually connected to (after resolution, on every redirect
hop), so a name, a redirect or an exotic spelling of an address cannot lead a request to the
executor's loopback, its private networks or a cloud metadata endpoint. Each refusal is
paired with its allowed counterpart, and the servers assert they were never reached.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

import pytest

from executor.http.policy import HttpPolicy, address_kind
from tests.http.helpers import body, request
from tests.http.servers import HttpServer, serve
from tests.support.client import RpcError, WsClient
from tests.support.daemon import RunningDaemon


@pytest.fixture(scope="module")
def strict_daemon() -> Iterator[RunningDaemon]:
    """A daemon with the default policy (no --http-allow-* option)."""
    daemon = RunningDaemon()
    yield daemon
    daemon.stop()


def _refused(client: WsClient, url: str) -> str:
    with pytest.raises(RpcError) as error:
        request(client, url, timeoutMs=5000)
    assert error.value.code == -32602
    return error.value.message


@pytest.mark.parametrize(
    ("host", "shown", "address"),
    [
        ("127.0.0.1", "127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1", "127.0.0.1"),  # WHATWG: one decimal number
        ("0.0.0.0", "0.0.0.0", "0.0.0.0"),  # connect() to it reaches this host
        ("[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "127.0.0.1"),  # IPv4-mapped IPv6
    ],
    ids=["literal", "decimal", "unspecified", "v4-mapped"],
)
def test_default_refuses_loopback_addresses(
    strict_daemon: RunningDaemon,
    client: WsClient,
    server: HttpServer,
    host: str,
    shown: str,
    address: str,
) -> None:
    """By default a loopback destination is refused before connecting; the same URL works
    from a daemon started with --http-allow-private (``client``)."""
    with strict_daemon.session() as strict:
        message = _refused(strict, server.url("/echo", host=host))
    assert message.startswith(f"http/request to {shown} is not allowed on this executor: ")
    assert message.endswith(" address")
    assert address in message
    assert server.recorder.requests == []
    if host != "[::ffff:127.0.0.1]":  # the server listens on IPv4 only
        assert request(client, server.url("/echo", host=host))["status"] == 200


def test_default_refuses_a_name_that_resolves_to_loopback(
    strict_daemon: RunningDaemon, client: WsClient, server: HttpServer
) -> None:
    """``localhost`` is refused by its addresses, not its name."""
    with strict_daemon.session() as strict:
        message = _refused(strict, server.url("/echo", host="localhost"))
    assert message.startswith("http/request to localhost is not allowed on this executor: ")
    assert message.endswith("is a loopback address")
    assert server.recorder.requests == []
    assert request(client, server.url("/echo", host="localhost"))["status"] == 200


@pytest.fixture
def allowed_server() -> Iterator[HttpServer]:
    """A server on 127.0.0.2: the one loopback address the ``cidr_daemon`` may reach."""
    with serve(address="127.0.0.2") as running:
        yield running


def test_allowed_origin_cannot_redirect_to_a_refused_one(
    daemon_factory: type[RunningDaemon], allowed_server: HttpServer, server: HttpServer
) -> None:
    """With --http-allow-cidr 127.0.0.2 only that address is reachable: a redirect from it
    to 127.0.0.1 (by address or by a name) is refused at the hop, a redirect to itself is
    followed."""
    daemon = daemon_factory(["--http-allow-cidr", "127.0.0.2"])
    refused = [server.url("/echo"), server.url("/echo", host="localhost")]
    with daemon.session() as client:
        inside = allowed_server.url("/echo")
        echo = body(request(client, allowed_server.url(f"/redirect/302?to={inside}")))
        assert b'"path": "/echo"' in echo
        for target in refused:
            message = _refused(client, allowed_server.url(f"/redirect/302?to={target}"))
            assert message.endswith("is a loopback address"), message
        assert _refused(client, server.url("/echo")).endswith("127.0.0.1 is a loopback address")
    assert server.recorder.requests == []
    assert [seen.path for seen in allowed_server.recorder.requests] == [
        f"/redirect/302?to={inside}",
        "/echo",
        *(f"/redirect/302?to={target}" for target in refused),
    ]


@pytest.mark.parametrize("url", ["http://169.254.169.254/", "http://[fd00:ec2::254]/"])
def test_metadata_endpoints_stay_refused_with_allow_private(client: WsClient, url: str) -> None:
    """--http-allow-private does not open the cloud metadata endpoints (refused before any
    connection is attempted)."""
    message = _refused(client, url)
    assert message.endswith("is a cloud metadata address")


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("8.8.8.8", None),
        ("2606:4700::1111", None),
        ("127.0.0.2", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.1", "private"),
        ("fd12::1", "private"),
        ("100.64.0.1", "non-public"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("169.254.169.254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("224.0.0.1", "multicast"),
        ("::ffff:10.0.0.1", "private"),
        ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
        ("64:ff9b::808:808", None),  # NAT64 of 8.8.8.8
        ("2002:a9fe:a9fe::", "cloud metadata"),  # 6to4 of 169.254.169.254
    ],
)
def test_address_kinds(address: str, kind: str | None) -> None:
    assert address_kind(ipaddress.ip_address(address)) == kind


def test_address_policy_rules() -> None:
    """What each option opens, checked without the network."""
    loopback = ipaddress.ip_address("127.0.0.1")
    metadata = ipaddress.ip_address("169.254.169.254")
    public = ipaddress.ip_address("8.8.8.8")
    assert HttpPolicy().address_refusal("x", public) is None
    assert HttpPolicy().address_refusal("x", loopback) == "127.0.0.1 is a loopback address"
    assert HttpPolicy(allow_private=True).address_refusal("x", loopback) is None
    assert HttpPolicy(allow_private=True).address_refusal("x", metadata) is not None
    cidr = HttpPolicy(allowed_networks=(ipaddress.ip_network("169.254.169.254/32"),))
    assert cidr.address_refusal("x", metadata) is None
    assert cidr.address_refusal("x", loopback) is not None
    named = HttpPolicy(allowed_hosts=("api.example",))
    assert named.address_refusal("api.example", public) is None
    assert named.address_refusal("api.example", loopback) is not None  # DNS cannot widen it
    assert named.address_refusal("other.example", public) is not None
    listed = HttpPolicy(allowed_hosts=("8.8.8.0/24", "127.0.0.1"))
    assert listed.address_refusal("any.name", public) is None
    assert listed.address_refusal("any.name", loopback) is None  # named, so allowed
    assert listed.address_refusal("any.name", ipaddress.ip_address("8.8.4.4")) is not None
