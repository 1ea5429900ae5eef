"""ProxyPolicy: a NetworkPolicy applied to a host name and to what it resolves to.

Names resolve through an injected table, so public addresses and DNS answers that lead
somewhere else can be tested without a network; the real resolver is used for
``localhost``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest

from executor.netproxy import ProxyPolicy, Refused, Unreachable
from executor.netproxy.policy import IPAddress
from executor.sandbox.network import NetworkAccess, NetworkPolicy

PUBLIC = "93.184.215.14"
DNS = {
    "pypi.org": [PUBLIC],
    "files.pythonhosted.org": ["151.101.0.223", "2a04:4e42::223"],
    "rebind.example": ["10.0.0.7"],
    "mixed.example": ["10.0.0.8", PUBLIC],
    "meta.example": ["169.254.169.254"],
    "mapped.example": ["::ffff:127.0.0.1"],
    "db.corp.example": ["10.1.2.3"],
    "internal.example": ["10.9.9.9"],
    "nat64.example": ["64:ff9b::7f00:1"],
}


async def table(host: str, port: int) -> list[IPAddress]:
    if host not in DNS:
        raise Unreachable(f"cannot resolve {host}: no such name", kind="resolve")
    return [ipaddress.ip_address(text) for text in DNS[host]]


def policy(allow: tuple[str, ...], deny: tuple[str, ...] = ()) -> ProxyPolicy:
    network = NetworkPolicy(mode=NetworkAccess.PROXY, allow=allow, deny=deny)
    return ProxyPolicy(network, resolver=table)


def vet(proxy_policy: ProxyPolicy, host: str, port: int = 443) -> list[str]:
    vetted = asyncio.run(proxy_policy.vet(host, port))
    return [str(address) for address in vetted.addresses]


def refusal(proxy_policy: ProxyPolicy, host: str, port: int = 443) -> str:
    with pytest.raises(Refused) as caught:
        asyncio.run(proxy_policy.vet(host, port))
    return caught.value.reason


def test_listed_names_and_wildcards_are_allowed_others_not() -> None:
    rules = policy(("pypi.org", "*.pythonhosted.org"))
    assert vet(rules, "pypi.org") == [PUBLIC]
    assert vet(rules, "PyPI.org.") == [PUBLIC]  # case and a trailing dot do not matter
    assert vet(rules, "files.pythonhosted.org") == ["151.101.0.223", "2a04:4e42::223"]
    assert asyncio.run(rules.vet("pypi.org", 443)).reason == "allowed by pypi.org"
    assert refusal(rules, "pythonhosted.org") == "not in allow list"  # the apex is not below
    assert refusal(rules, "evil.example") == "not in allow list"


def test_unlisted_names_are_not_even_resolved() -> None:
    looked_up: list[str] = []

    async def spy(host: str, port: int) -> list[IPAddress]:
        looked_up.append(host)
        return await table(host, port)

    rules = ProxyPolicy(NetworkPolicy(mode=NetworkAccess.PROXY, allow=("pypi.org",)), resolver=spy)
    with pytest.raises(Refused):
        asyncio.run(rules.vet("evil.example", 443))
    assert vet(rules, "pypi.org") == [PUBLIC]
    assert looked_up == ["pypi.org"]


def test_deny_wins_over_allow() -> None:
    rules = policy(("*", "db.corp.example"), deny=("*.corp.example",))
    assert refusal(rules, "db.corp.example") == "denied by *.corp.example"
    assert vet(rules, "pypi.org") == [PUBLIC]


def test_a_denied_address_is_refused_whatever_name_leads_there() -> None:
    rules = policy(("*", "internal.example"), deny=("10.9.9.9",))
    assert refusal(rules, "internal.example") == "resolves to 10.9.9.9, denied by 10.9.9.9"
    assert refusal(rules, "10.9.9.9") == "denied by 10.9.9.9"


@pytest.mark.parametrize(
    ("host", "kind", "address"),
    [
        ("rebind.example", "private", "10.0.0.7"),
        ("meta.example", "cloud metadata", "169.254.169.254"),
        ("mapped.example", "loopback", "::ffff:127.0.0.1"),
        ("nat64.example", "loopback", "64:ff9b::7f00:1"),
    ],
)
def test_non_public_addresses_need_the_host_listed_explicitly(
    host: str, kind: str, address: str
) -> None:
    shown = str(ipaddress.ip_address(address))  # Python versions spell mapped ones apart
    wildcard = policy(("*",))
    assert refusal(wildcard, host) == f"resolves to {kind} {shown} (list the host explicitly)"
    assert vet(policy((host,)), host) == [shown]


def test_only_the_public_addresses_of_a_mixed_answer_are_used() -> None:
    assert vet(policy(("*",)), "mixed.example") == [PUBLIC]


def test_an_address_listed_as_such_admits_a_wildcard_name_leading_to_it() -> None:
    assert vet(policy(("*.corp.example", "10.1.2.3")), "db.corp.example") == ["10.1.2.3"]
    assert refusal(policy(("*.corp.example",)), "db.corp.example").startswith(
        "resolves to private 10.1.2.3"
    )


def test_ip_literals_only_when_listed() -> None:
    rules = policy(("*", "127.0.0.1", "::1"))
    assert vet(rules, "127.0.0.1") == ["127.0.0.1"]
    assert vet(rules, "[::1]") == ["::1"]
    assert refusal(rules, PUBLIC) == "IP literal not listed"
    assert refusal(rules, "127.0.0.2") == "IP literal not listed"
    assert refusal(rules, "::2") == "IP literal not listed"


@pytest.mark.parametrize("spelling", ["127.1", "0x7f.1", "2130706433", "0177.0.0.1"])
def test_legacy_ipv4_spellings_are_ip_literals(spelling: str) -> None:
    """What a resolver reads as an address is one: ``*`` does not admit ``127.1``."""
    assert refusal(policy(("*",)), spelling) == "IP literal not listed"
    assert vet(policy(("127.0.0.1",)), spelling) == ["127.0.0.1"]


@pytest.mark.parametrize("host", ["", "a b", "*.pypi.org", "*", "ex ample.org", "a..b", "x/y"])
def test_what_is_not_a_host_name_is_refused(host: str) -> None:
    assert refusal(policy(("*",)), host) == "not a host name"


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_ports_out_of_range(port: int) -> None:
    assert "out of range" in refusal(policy(("*",)), "pypi.org", port)


def test_an_allowed_name_that_does_not_resolve_is_unreachable_not_refused() -> None:
    with pytest.raises(Unreachable) as caught:
        asyncio.run(policy(("*",)).vet("nxdomain.example", 443))
    assert caught.value.kind == "resolve"
    assert caught.value.allowed_by == "allowed by *"


def test_localhost_through_the_real_resolver() -> None:
    """``localhost`` is loopback: listed, it is allowed; through ``*``, refused."""
    explicit = ProxyPolicy(NetworkPolicy(mode=NetworkAccess.PROXY, allow=("localhost",)))
    addresses = asyncio.run(explicit.vet("localhost", 80)).addresses
    assert addresses and all(address.is_loopback for address in addresses)
    wildcard = ProxyPolicy(NetworkPolicy(mode=NetworkAccess.PROXY, allow=("*",)))
    with pytest.raises(Refused, match=r"resolves to loopback .* \(list the host explicitly\)"):
        asyncio.run(wildcard.vet("localhost", 80))


def test_loopback_only_at_the_given_ports_however_the_host_was_allowed() -> None:
    network = NetworkPolicy(
        mode=NetworkAccess.PROXY, allow=("localhost", "127.0.0.1", "0.0.0.0", "mapped.example")
    )
    rules = ProxyPolicy(network, resolver=real_or_table, loopback_ports=(5432,))
    assert [str(a) for a in asyncio.run(rules.vet("localhost", 5432)).addresses] == ["127.0.0.1"]
    assert refusal(rules, "localhost", 8765) == (
        "loopback 127.0.0.1 is reached only at the profile's local_ports"
    )
    assert refusal(rules, "127.0.0.1", 8765).startswith("loopback 127.0.0.1")
    assert refusal(rules, "0.0.0.0", 8765).startswith("loopback 0.0.0.0")  # means this host
    assert refusal(rules, "mapped.example", 8765).startswith("loopback ")
    unlimited = ProxyPolicy(network, resolver=real_or_table)
    assert vet(unlimited, "127.0.0.1", 8765) == ["127.0.0.1"]


def test_the_hosts_own_addresses_count_as_its_loopback() -> None:
    """A service bound to every address answers on the host's own ones: with local ports
    given, those are reached only at them too (listed or not), other addresses as before."""
    own = ["::1"]  # always this host's; and its IPv4 address on the default route, if any
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.123", 9))  # sends nothing: picks the source address
            own.append(probe.getsockname()[0])
        except OSError:
            pass
    network = NetworkPolicy(mode=NetworkAccess.PROXY, allow=(*own, PUBLIC))
    rules = ProxyPolicy(network, resolver=table, loopback_ports=(5432,))
    for address in own:
        assert vet(rules, address, 5432) == [address]
        assert "local_ports" in refusal(rules, address, 8765)
    assert vet(rules, PUBLIC, 8765) == [PUBLIC]


async def real_or_table(host: str, port: int) -> list[IPAddress]:
    if host == "localhost":
        return [ipaddress.ip_address("127.0.0.1")]
    return await table(host, port)
