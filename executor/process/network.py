"""Which network a sandboxed command gets: none, the host's, or proxied — and whose proxy.

The inputs, strongest first:

* the operator's policy (the policy floor's profile, ``serve --require-sandbox``): a floor
  in proxy mode puts every command that asked for network behind the executor's proxy with
  the floor's host patterns — the client's wire cannot widen them, not even with proxy
  variables of its own; a floor with no network refuses network (``floor.py``);
* ``enforceManagedNetwork: true`` (the reference's managed networking): the command may use
  the network only through a proxy. Its environment names the client's proxy
  (``HTTP_PROXY``, ``ALL_PROXY``, ... pointing at a loopback port of this host, as the
  reference requires), which it then reaches through a relay and nothing else; without such
  variables and without an operator policy it is refused before anything runs (the
  reference fails the same way, only later, with the same words).
  ``managedNetwork.loopbackPorts``, when given, lists the ports those variables may point at
  (as the reference reads it); ``allowLocalBinding`` decides whether the command may listen
  (absent: it may not — the reference lets it anyway, on Linux);
* the sandbox's own ``network``: ``restricted`` is no network, ``enabled`` the host's
  network with its loopback services out of reach (``full`` mode).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final
from urllib.parse import urlsplit

from executor.errors import InvalidParams, SandboxUnavailable
from executor.protocol.intent import NetworkMode
from executor.protocol.messages import StartParams
from executor.protocol.network_proxy import DomainRule, NetworkProxyLaunch, ProxyMode
from executor.sandbox.network import (
    NetworkAccess,
    NetworkPolicy,
    NetworkRoute,
    host_pattern_problem,
)
from executor.sandbox.rules import RuleSet

__all__ = ["PROXY_VARIABLES", "NetworkChoice", "choose", "client_proxy_ports", "network_rules"]

#: Variables that name a proxy, exactly as the reference reads them (measured on 0.171).
PROXY_VARIABLES: Final = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "FTP_PROXY",
    "WS_PROXY",
    "WSS_PROXY",
    "YARN_HTTP_PROXY",
    "YARN_HTTPS_PROXY",
    "NPM_CONFIG_HTTP_PROXY",
    "NPM_CONFIG_HTTPS_PROXY",
    "NPM_CONFIG_PROXY",
    "BUNDLE_HTTP_PROXY",
    "BUNDLE_HTTPS_PROXY",
    "PIP_PROXY",
    "DOCKER_HTTP_PROXY",
    "DOCKER_HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "ftp_proxy",
    "ws_proxy",
    "wss_proxy",
    "npm_config_http_proxy",
    "npm_config_https_proxy",
    "npm_config_proxy",
)
_LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1"})
_DEFAULT_PORTS: Final = {
    "https": 443,
    "socks5": 1080,
    "socks5h": 1080,
    "socks4": 1080,
    "socks4a": 1080,
}


@dataclass(frozen=True, slots=True)
class NetworkChoice:
    """The network of one command."""

    policy: NetworkPolicy
    #: The executor runs a proxy for it (False in proxy mode: the client's own proxy, which
    #: the command reaches through relays of ``policy.local_ports``).
    executor_proxy: bool = False
    #: ``ALL_PROXY`` names the proxy as SOCKS5 (``networkProxy.proxy.enableSocks5``).
    socks: bool = True


def client_proxy_ports(env: Mapping[str, str]) -> tuple[int, ...] | None:
    """The host loopback ports the proxy variables of ``env`` point at (``None``: none is
    set). Values that point elsewhere are left alone, as the reference does: from the
    command's private network nothing else is reachable anyway. ``SandboxUnavailable``
    when variables are set but none points at this host's loopback."""
    ports: list[int] = []
    found = False
    for name in PROXY_VARIABLES:
        value = env.get(name, "").strip()
        if not value:
            continue
        found = True
        port = _loopback_port(value)
        if port is not None and port not in ports:
            ports.append(port)
    if not found:
        return None
    if not ports:
        raise SandboxUnavailable(
            "managed proxy mode requires parseable loopback proxy endpoints: the proxy "
            "variables point at no port of this host's loopback (localhost, 127.0.0.1, ::1)"
        )
    return tuple(ports)


def _loopback_port(value: str) -> int | None:
    try:
        parts = urlsplit(value if "://" in value else f"http://{value}")
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return None
    if host not in _LOOPBACK_HOSTS:
        return None
    if port is None:
        port = _DEFAULT_PORTS.get(parts.scheme.lower(), 80)
    return port or None


def choose(
    params: StartParams | None,
    network: NetworkMode,
    env: Mapping[str, str],
    *,
    operator: NetworkPolicy | None = None,
) -> NetworkChoice:
    """The network of a command whose sandbox says ``network``, under ``operator``'s policy.

    ``params`` is the start request (``None`` for ``executor run``, whose profile is the
    operator policy itself)."""
    launch = None if params is None else params.network_proxy
    if launch is not None:
        return _launched(launch, operator)
    managed = params is not None and params.enforce_managed_network
    if network is NetworkMode.RESTRICTED and not managed:
        return NetworkChoice(NetworkPolicy(mode=NetworkAccess.NONE))
    if operator is not None and operator.mode is NetworkAccess.NONE:
        return NetworkChoice(operator)
    if operator is not None and operator.mode is NetworkAccess.PROXY:
        return NetworkChoice(_narrowed(operator, params), executor_proxy=True)
    if managed:
        assert params is not None
        wire = params.managed_network
        ports = client_proxy_ports(env)
        if ports is None:
            raise SandboxUnavailable(
                "managed proxy mode requires proxy environment variables (HTTP_PROXY, "
                "HTTPS_PROXY, ALL_PROXY, ... pointing at a proxy on this host's loopback), "
                "or an operator policy in proxy mode (serve --require-sandbox)"
            )
        allowed = () if wire is None else wire.loopback_ports
        outside = [port for port in ports if allowed and port not in allowed]
        if outside:
            raise SandboxUnavailable(
                f"proxy endpoint is outside the managed sandbox context: port {outside[0]} is "
                "not in managedNetwork.loopbackPorts"
            )
        return NetworkChoice(
            NetworkPolicy(
                mode=NetworkAccess.PROXY,
                local_ports=ports,
                local_binding=wire is not None and wire.allow_local_binding,
            )
        )
    if operator is not None:
        return NetworkChoice(operator)
    return NetworkChoice(NetworkPolicy(mode=NetworkAccess.FULL))


def _launched(launch: NetworkProxyLaunch, operator: NetworkPolicy | None) -> NetworkChoice:
    """``networkProxy``: the executor's proxy with the client's domain rules (never advisory:
    the command reaches nothing else), inside the operator's policy if there is one."""
    proxy = launch.proxy
    if not proxy.enabled:
        raise InvalidParams(
            "invalid network proxy config: executor-local network proxy launch requires an "
            "enabled proxy"
        )
    for refused, what in (
        (proxy.mode is ProxyMode.LIMITED, "mode `limited` (read-only methods)"),
        (proxy.transparent_tcp, "transparentTcp"),
        (proxy.dangerously_allow_all_unix_sockets, "dangerouslyAllowAllUnixSockets"),
    ):
        if refused:
            raise InvalidParams(f"networkProxy {what} is not supported by this executor")
    allow: list[str] = []
    deny: list[str] = []
    for pattern, rule in (proxy.domains or {}).items():
        if rule is DomainRule.NONE:
            continue
        (allow if rule is DomainRule.ALLOW else deny).extend(_domain_patterns(pattern))
    if operator is not None and operator.mode is NetworkAccess.NONE:
        return NetworkChoice(operator)
    within = operator if operator is not None and operator.mode is NetworkAccess.PROXY else None
    policy = NetworkPolicy(
        mode=NetworkAccess.PROXY,
        allow=tuple(allow),
        deny=tuple(deny),
        local_binding=proxy.allow_local_binding and (within is None or within.local_binding),
        within=within,
    )
    return NetworkChoice(policy, executor_proxy=True, socks=proxy.enable_socks5)


def _domain_patterns(pattern: str) -> tuple[str, ...]:
    """Our patterns for one of the client's (``**.x``: ``x`` and everything below it)."""
    if not pattern.strip():
        raise InvalidParams("invalid network proxy config: domain pattern is empty")
    patterns = (pattern[3:], f"*.{pattern[3:]}") if pattern.startswith("**.") else (pattern,)
    for each in patterns:
        if host_pattern_problem(each) is not None:
            raise InvalidParams(
                f"invalid network proxy config: unsupported domain pattern syntax: {pattern}"
            )
    return patterns


def _narrowed(operator: NetworkPolicy, params: StartParams | None) -> NetworkPolicy:
    """The operator's proxy policy, with a managed request's wishes where they take away."""
    if params is None or not params.enforce_managed_network:
        return operator
    wire = params.managed_network
    binding = wire is not None and wire.allow_local_binding
    ports = () if wire is None else wire.loopback_ports
    return NetworkPolicy(
        mode=NetworkAccess.PROXY,
        allow=operator.allow,
        deny=operator.deny,
        # Only ports the operator listed: a client cannot open the host's loopback wider.
        local_ports=tuple(port for port in operator.local_ports if port in ports),
        local_binding=operator.local_binding and binding,
    )


def network_rules(
    rules: RuleSet,
    policy: NetworkPolicy,
    *,
    shared_loopback: bool = False,
    scope: str | None = None,
    route: NetworkRoute | None = None,
) -> RuleSet:
    """``rules`` with ``policy``'s network: the wire mode, loopback isolation for the full
    network (unless the operator shares the host's loopback), and the proxy ``route`` (which
    a proxy-mode policy must come with)."""
    if policy.mode is NetworkAccess.PROXY:
        if route is None:
            raise ValueError("a proxy-mode network needs its route")
        return replace(rules, network=NetworkMode.ENABLED, route=route)
    return replace(
        rules,
        network=NetworkMode.ENABLED if policy.enabled else NetworkMode.RESTRICTED,
        local_ports=policy.local_ports,
        network_scope=scope,
        isolate_loopback=policy.mode is NetworkAccess.FULL and not shared_loopback,
    )
