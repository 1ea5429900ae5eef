"""Which network a sandboxed command gets (``executor.process.network.choose``)."""

from __future__ import annotations

import pytest

from executor.errors import InvalidParams, SandboxUnavailable
from executor.process.network import choose, client_proxy_ports
from executor.protocol.decode import decode
from executor.protocol.intent import ManagedNetwork, NetworkMode
from executor.protocol.messages import StartParams
from executor.sandbox.network import NetworkAccess, NetworkPolicy

PROXY = NetworkPolicy(
    mode=NetworkAccess.PROXY, allow=("pypi.org",), deny=("*.corp",), local_ports=(5432, 6379)
)


def start(*, managed: bool = False, wire: ManagedNetwork | None = None) -> StartParams:
    return StartParams(
        process_id="p",
        argv=("true",),
        cwd="file:///",
        env={},
        tty=False,
        enforce_managed_network=managed,
        managed_network=wire,
    )


def test_restricted_is_no_network_and_enabled_is_the_full_network() -> None:
    assert choose(start(), NetworkMode.RESTRICTED, {}).policy.mode is NetworkAccess.NONE
    full = choose(start(), NetworkMode.ENABLED, {})
    assert full.policy.mode is NetworkAccess.FULL
    assert not full.executor_proxy
    assert full.policy.local_ports == ()


def test_an_operator_proxy_policy_puts_every_networked_command_behind_the_proxy() -> None:
    choice = choose(start(), NetworkMode.ENABLED, {}, operator=PROXY)
    assert choice.executor_proxy
    assert choice.policy == PROXY
    # and no network stays no network
    assert choose(start(), NetworkMode.RESTRICTED, {}, operator=PROXY).policy.mode is (
        NetworkAccess.NONE
    )


def test_client_proxy_variables_cannot_route_around_the_operator_proxy() -> None:
    env = {"HTTPS_PROXY": "http://127.0.0.1:3128"}
    choice = choose(start(managed=True), NetworkMode.ENABLED, env, operator=PROXY)
    assert choice.executor_proxy
    assert choice.policy.allow == PROXY.allow
    assert 3128 not in choice.policy.local_ports


def test_a_managed_request_only_narrows_the_operator_policy() -> None:
    wire = ManagedNetwork(loopback_ports=(6379, 9999), allow_local_binding=True)
    choice = choose(start(managed=True, wire=wire), NetworkMode.ENABLED, {}, operator=PROXY)
    assert choice.policy.local_ports == (6379,)  # 9999 is not the operator's to give
    assert choice.policy.local_binding
    unbound = choose(start(managed=True), NetworkMode.ENABLED, {}, operator=PROXY)
    assert unbound.policy.local_ports == ()
    assert not unbound.policy.local_binding


def test_managed_networking_relays_the_clients_own_proxy() -> None:
    env = {"HTTP_PROXY": "http://127.0.0.1:3128", "all_proxy": "socks5h://localhost:1081"}
    wire = ManagedNetwork(loopback_ports=(1081, 3128, 5432), allow_local_binding=True)
    choice = choose(start(managed=True, wire=wire), NetworkMode.ENABLED, env)
    assert not choice.executor_proxy
    assert choice.policy.mode is NetworkAccess.PROXY
    # loopbackPorts lists where the variables may point; it opens nothing more (reference)
    assert choice.policy.local_ports == (3128, 1081)
    assert choice.policy.local_binding
    assert not choose(start(managed=True), NetworkMode.ENABLED, env).policy.local_binding


def test_managed_networking_routes_even_a_restricted_sandbox() -> None:
    env = {"HTTP_PROXY": "http://127.0.0.1:3128"}
    choice = choose(start(managed=True), NetworkMode.RESTRICTED, env)
    assert choice.policy.mode is NetworkAccess.PROXY


def test_a_proxy_variable_outside_loopback_ports_is_refused() -> None:
    env = {"HTTP_PROXY": "http://127.0.0.1:3128"}
    wire = ManagedNetwork(loopback_ports=(8080,))
    with pytest.raises(SandboxUnavailable, match="outside the managed sandbox context"):
        choose(start(managed=True, wire=wire), NetworkMode.ENABLED, env)


def test_managed_networking_without_a_proxy_is_refused_before_anything_runs() -> None:
    with pytest.raises(SandboxUnavailable, match="requires proxy environment variables"):
        choose(start(managed=True), NetworkMode.ENABLED, {"PATH": "/bin"})


@pytest.mark.parametrize(
    ("value", "port"),
    [
        ("http://127.0.0.1:8080", 8080),
        ("http://[::1]:8081", 8081),
        ("127.0.0.1:3128", 3128),
        ("http://localhost", 80),
        ("https://localhost", 443),
        ("socks5h://127.0.0.1", 1080),
    ],
)
def test_proxy_variables_name_loopback_ports(value: str, port: int) -> None:
    assert client_proxy_ports({"HTTPS_PROXY": value}) == (port,)


@pytest.mark.parametrize(
    "value", ["http://10.0.0.1:3128", "http://proxy.corp:3128", "http://[", "127.0.0.2:3128"]
)
def test_proxies_anywhere_but_this_hosts_loopback_are_not_relayed(value: str) -> None:
    with pytest.raises(SandboxUnavailable, match="parseable loopback proxy endpoints"):
        client_proxy_ports({"HTTP_PROXY": value})
    # beside a loopback one they are left alone (unreachable from the private network)
    assert client_proxy_ports({"HTTP_PROXY": value, "https_proxy": "localhost:9"}) == (9,)


def test_only_the_references_spellings_count() -> None:
    assert client_proxy_ports({"Http_Proxy": "localhost:9", "GRPC_PROXY": "localhost:8"}) is None


def test_no_proxy_variables_is_none() -> None:
    assert client_proxy_ports({"HTTP_PROXY": "  ", "NO_PROXY": "x"}) is None


def launch(**proxy: object) -> StartParams:
    config = {
        "enabled": True,
        "enableSocks5": True,
        "enableSocks5Udp": True,
        "allowUpstreamProxy": True,
        "dangerouslyAllowAllUnixSockets": False,
        "mode": "full",
        "allowLocalBinding": False,
        **proxy,
    }
    params = {"processId": "p", "argv": ["x"], "cwd": "file:///", "env": {}, "tty": False}
    return decode(StartParams, {**params, "networkProxy": {"proxy": config}})


def test_network_proxy_runs_the_executors_proxy_with_the_clients_domains() -> None:
    params = launch(
        domains={"pypi.org": "allow", "**.npmjs.org": "allow", "evil.pypi.org": "deny", "x": "none"}
    )
    choice = choose(params, NetworkMode.ENABLED, {})
    assert choice.executor_proxy and choice.socks
    assert choice.policy.allow == ("pypi.org", "npmjs.org", "*.npmjs.org")
    assert choice.policy.deny == ("evil.pypi.org",)
    assert not choice.policy.local_binding
    assert choice.policy.allows_host("registry.npmjs.org") == (True, False)
    assert choice.policy.allows_host("x") == (False, False)


def test_network_proxy_stays_inside_the_operators_policy() -> None:
    params = launch(domains={"pypi.org": "allow", "example.com": "allow"}, allowLocalBinding=True)
    choice = choose(params, NetworkMode.ENABLED, {}, operator=PROXY)
    assert choice.policy.allows_host("pypi.org")[0]
    assert not choice.policy.allows_host("example.com")[0]  # the operator's list does not
    assert choice.policy.local_binding  # both allow it


@pytest.mark.parametrize(
    ("proxy", "message"),
    [
        ({"enabled": False}, "requires an enabled proxy"),
        ({"mode": "limited"}, "mode `limited`"),
        ({"transparentTcp": True}, "transparentTcp"),
        ({"dangerouslyAllowAllUnixSockets": True}, "dangerouslyAllowAllUnixSockets"),
        ({"domains": {"http://x.com/": "allow"}}, "unsupported domain pattern syntax"),
        ({"domains": {" ": "allow"}}, "domain pattern is empty"),
    ],
)
def test_network_proxy_requests_we_cannot_honour_are_refused(
    proxy: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidParams, match=message):
        choose(launch(**proxy), NetworkMode.ENABLED, {})
