"""Connecting for ``http/request``: resolve, vet every address, connect to a vetted one.

The address that is checked against the policy is the very address the socket connects to
— the name is resolved once, here — so DNS that answers differently the second time
(rebinding) has no second time. Every redirect hop connects through here too, or reuses a
connection that did.
"""

from __future__ import annotations

import asyncio
import ssl

from executor import addresses
from executor.addresses import IPAddress
from executor.errors import InvalidParams
from executor.http.policy import HttpPolicy
from executor.http.wire import Connection, WireError

__all__ = ["connect", "resolve"]


async def resolve(host: str, port: int) -> list[IPAddress]:
    """The addresses of ``host`` (``addresses.resolve``); ``WireError`` if it has none."""
    try:
        return await addresses.resolve(host, port)
    except addresses.LookupFailed as exc:
        raise WireError(str(exc)) from exc


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
