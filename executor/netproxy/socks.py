"""SOCKS5 (RFC 1928) as the proxy speaks it: no authentication, CONNECT only.

The destination may be a name (``socks5h://``: the proxy resolves it, as it must to apply
the policy), an IPv4 or an IPv6 address (IP literals, allowed only when listed). BIND and
UDP ASSOCIATE are answered "command not supported" (0x07), a refused destination "not
allowed by ruleset" (0x02). SOCKS4 gets its own "request rejected".
"""

from __future__ import annotations

import asyncio
import ipaddress
import struct
from typing import Final

from executor.netproxy.conn import Conn
from executor.netproxy.policy import Refused, Unreachable
from executor.netproxy.relay import Dialer

__all__ = ["serve_socks4", "serve_socks5"]

VERSION: Final = 5
_NO_AUTH: Final = 0x00
_NO_ACCEPTABLE: Final = 0xFF
_CONNECT, _BIND, _UDP_ASSOCIATE = 1, 2, 3
_IPV4, _NAME, _IPV6 = 1, 3, 4

SUCCEEDED: Final = 0x00
GENERAL_FAILURE: Final = 0x01
NOT_ALLOWED: Final = 0x02
NETWORK_UNREACHABLE: Final = 0x03
HOST_UNREACHABLE: Final = 0x04
CONNECTION_REFUSED: Final = 0x05
COMMAND_NOT_SUPPORTED: Final = 0x07
ADDRESS_TYPE_NOT_SUPPORTED: Final = 0x08

_UNREACHABLE_CODE: Final = {
    "resolve": HOST_UNREACHABLE,
    "refused": CONNECTION_REFUSED,
    "network": NETWORK_UNREACHABLE,
    "timeout": HOST_UNREACHABLE,
    "unreachable": HOST_UNREACHABLE,
}
_COMMANDS: Final = {_BIND: "BIND", _UDP_ASSOCIATE: "UDP ASSOCIATE"}


class _Malformed(Exception):
    """Not SOCKS5: the connection is dropped without an answer."""


def reply(code: int, bound: tuple[str, int] | None = None) -> bytes:
    """A SOCKS5 reply; ``bound`` is the proxy's end of the upstream connection."""
    address, port = bound or ("0.0.0.0", 0)
    packed = ipaddress.ip_address(address.partition("%")[0]).packed
    kind = _IPV4 if len(packed) == 4 else _IPV6
    return bytes((VERSION, code, 0, kind)) + packed + struct.pack("!H", port)


async def _request(client: Conn) -> tuple[int, str, int] | None:
    """``(command, host, port)`` after the method negotiation, or None when the client was
    answered already (no acceptable method, unknown address type)."""
    version, count = await client.read_exactly(2)
    if version != VERSION or count == 0:
        raise _Malformed
    methods = await client.read_exactly(count)
    if _NO_AUTH not in methods:
        await client.send(bytes((VERSION, _NO_ACCEPTABLE)))
        return None
    await client.send(bytes((VERSION, _NO_AUTH)))
    version, command, _reserved, kind = await client.read_exactly(4)
    if version != VERSION:
        raise _Malformed
    if kind == _IPV4:
        host = str(ipaddress.IPv4Address(await client.read_exactly(4)))
    elif kind == _IPV6:
        host = str(ipaddress.IPv6Address(await client.read_exactly(16)))
    elif kind == _NAME:
        (length,) = await client.read_exactly(1)
        raw = await client.read_exactly(length)
        # Not a host name either way; kept readable for the refusal's log line.
        host = raw.decode("ascii", "backslashreplace")
    else:
        await client.send(reply(ADDRESS_TYPE_NOT_SUPPORTED))
        return None
    (port,) = struct.unpack("!H", await client.read_exactly(2))
    return command, host, port


async def serve_socks5(client: Conn, dialer: Dialer, deadline: float) -> None:
    """Negotiate (before ``deadline``, loop time), connect and relay; or answer and close.
    The caller closes ``client`` unless it became a tunnel."""
    try:
        async with asyncio.timeout_at(deadline):
            request = await _request(client)
    except (TimeoutError, asyncio.IncompleteReadError, _Malformed) as exc:
        dialer.reject(f"SOCKS5 handshake: {type(exc).__name__}")
        return
    if request is None:
        return
    command, host, port = request
    if command != _CONNECT:
        name = _COMMANDS.get(command, f"command {command}")
        dialer.refuse(host, port, "socks5", f"SOCKS5 {name} is not supported")
        await client.send(reply(COMMAND_NOT_SUPPORTED))
        return
    try:
        upstream = await dialer.open(host, port, "socks5")
    except Refused:
        await client.send(reply(NOT_ALLOWED))
        return
    except Unreachable as exc:
        await client.send(reply(_UNREACHABLE_CODE.get(exc.kind, GENERAL_FAILURE)))
        return
    try:
        bound = upstream.sock.getsockname()
        await client.send(reply(SUCCEEDED, (bound[0], bound[1])))
    except BaseException:
        upstream.close()
        raise
    await dialer.tunnel(client, upstream)


async def serve_socks4(client: Conn) -> None:
    """SOCKS4/4a is not offered (it cannot carry IPv6 and has no method negotiation):
    "request rejected or failed" (0x5B)."""
    await client.send(b"\x00\x5b" + bytes(6))
