"""The sandbox network: the executor-run proxy and the private network namespaces it serves.

The proxy (docs/proxy.md) speaks HTTP (CONNECT and plain) and SOCKS5 on one port and
connects only where a ``NetworkPolicy`` allows: ``policy`` decides a destination (the name,
then every address it resolves to), ``relay`` moves the bytes of a tunnel, ``httpproxy``
and ``socks`` speak the client's protocol, and ``server`` ties them to a listening socket
the caller provides.
"""

from __future__ import annotations

from executor.netproxy.policy import Decision, ProxyPolicy, Refused, Unreachable, Vetted, resolve
from executor.netproxy.server import ProxyLimits, ProxyServer

__all__ = [
    "Decision",
    "ProxyLimits",
    "ProxyPolicy",
    "ProxyServer",
    "Refused",
    "Unreachable",
    "Vetted",
    "resolve",
]
