"""Connecting for ``http/request``: resolve, vet every address, connect to a vetted one.

The address that is checked against the policy is the very address the socket connects to
— the name is resolved once, here — so DNS that answers differently the second time
(rebinding) has no second time. Every redirect hop connects through here too, or reuses a
connection that did.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import ipaddress
import socket
import ssl
from typing import Final

from executor.errors import InvalidParams
from executor.http.policy import HttpPolicy, IPAddress
from executor.http.wire import Connection, WireError

__all__ = ["connect", "resolve"]

#: Name lookups at once. Their own threads: getaddrinfo blocks, and the loop's default pool
#: serves the fs/* methods, which a slow resolver must never hold up.
_LOOKUPS: Final = 8


@functools.cache
def _resolvers() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(_LOOKUPS, thread_name_prefix="http-resolve")


async def resolve(host: str, port: int) -> list[IPAddress]:
    """The addresses of ``host`` in the resolver's order (a literal is its own address)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    lookup = functools.partial(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM)
    try:
        found = await asyncio.get_running_loop().run_in_executor(_resolvers(), lookup)
    except OSError as exc:  # socket.gaierror: no such name, no DNS
        raise WireError(f"cannot resolve {host}: {exc}") from exc
    addresses: list[IPAddress] = []
    for _family, _kind, _protocol, _name, sockaddr in found:
        if not isinstance(sockaddr[0], str):
            continue  # not an IP address (Python built without IPv6 support)
        text = sockaddr[0]
        if len(sockaddr) == 4 and sockaddr[3]:
            text = f"{text.partition('%')[0]}%{sockaddr[3]}"  # keep a link-local's scope
        address = ipaddress.ip_address(text)
        if address not in addresses:
            addresses.append(address)
    return addresses


async def connect(
    policy: HttpPolicy, host: str, port: int, tls: ssl.SSLContext | None
) -> Connection:
    """A connection to ``host`` (TLS-wrapped with ``tls``, verified for ``host``): resolve
    it, keep the addresses ``policy`` allows, connect to the first that answers.

    ``InvalidParams`` when the policy allows none of them (nothing was sent); ``WireError``
    when none could be reached.
    """
    addresses = await resolve(host, port)
    allowed: list[IPAddress] = []
    refusal = ""
    for address in addresses:
        reason = policy.address_refusal(host, address)
        if reason is None:
            allowed.append(address)
        elif not refusal:
            refusal = reason
    if refusal and not allowed:
        shown = f"[{host}]" if ":" in host else host
        raise InvalidParams(f"http/request to {shown} is not allowed on this executor: {refusal}")
    loop = asyncio.get_running_loop()
    failure: Exception = WireError(f"{host} has no address")
    for address in allowed:
        try:
            _transport, connection = await loop.create_connection(
                Connection,
                host=str(address),
                port=port,
                ssl=tls,
                server_hostname=host if tls is not None else None,
            )
        except OSError as exc:  # refused, unreachable, TLS (ssl.SSLError is an OSError)
            failure = exc
            continue
        return connection
    raise WireError(f"cannot connect to {host}:{port}") from failure
