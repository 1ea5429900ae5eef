"""``networkProxy``: the client asks the executor to run a proxy for the command (typed).

Shape and error texts as the reference 0.171 decodes them (measured): ``proxy`` is required,
and in it, in this order, ``enabled``, ``enableSocks5``, ``enableSocks5Udp``,
``allowUpstreamProxy``, ``dangerouslyAllowAllUnixSockets``, ``mode``, ``allowLocalBinding``;
``domains`` maps a host pattern to ``none``/``allow``/``deny``; unknown keys are ignored.
What the executor makes of it is ``executor.process.network``'s business.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from executor.protocol.decode import U64

__all__ = ["DomainRule", "NetworkProxyLaunch", "ProxyConfig", "ProxyMode"]


class ProxyMode(enum.StrEnum):
    """``limited``: read-only methods only; ``full``: anything the domain rules allow."""

    LIMITED = "limited"
    FULL = "full"


class DomainRule(enum.StrEnum):
    """What a ``domains`` entry says about its host pattern."""

    NONE = "none"
    ALLOW = "allow"
    DENY = "deny"


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyConfig:
    """``networkProxy.proxy`` (field order is the order of "missing field" errors)."""

    enabled: bool
    enable_socks5: bool
    enable_socks5_udp: bool
    allow_upstream_proxy: bool
    dangerously_allow_all_unix_sockets: bool
    mode: ProxyMode
    allow_local_binding: bool
    domains: dict[str, DomainRule] | None = None
    unix_sockets: dict[str, DomainRule] | None = None
    transparent_tcp: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkProxyLaunch:
    """``networkProxy``: the proxy to launch, and what to tag its decisions with."""

    proxy: ProxyConfig
    audit_metadata: dict[str, Any] | None = None
    environment_id: str | None = None
    execution_id: str | None = None
    policy_decision_timeout_ms: U64 | None = None
