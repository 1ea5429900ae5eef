"""Where an address leads (loopback, private, metadata, ...) and name resolution (pure + I/O).

Shared by the daemon's own egress (``http/request``) and the sandbox's proxy: both resolve a
name once, judge every address it has, and connect to an address they judged — so DNS that
answers differently the second time (rebinding) has no second time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import ipaddress
import socket
from typing import Final

__all__ = [
    "METADATA_ADDRESSES",
    "IPAddress",
    "IPNetwork",
    "LookupFailed",
    "address_kind",
    "parse_network",
    "resolve",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Cloud instance metadata and credential endpoints (AWS IMDS v4/v6, ECS and EKS pod
#: identity, Alibaba; GCP, Azure and OpenStack use 169.254.169.254 too, Oracle also
#: 192.0.0.192). ``--http-allow-private`` does not open these: only a CIDR that names them.
METADATA_ADDRESSES: Final = frozenset(
    ipaddress.ip_address(text)
    for text in (
        "169.254.169.254",
        "169.254.170.2",
        "169.254.170.23",
        "100.100.100.200",
        "192.0.0.192",
        "fd00:ec2::254",
        "fd00:ec2::23",
    )
)
_NAT64: Final = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


def parse_network(text: str) -> IPNetwork:
    """An address (``10.0.0.5``, ``[::1]``) or a CIDR (``10.0.0.0/8``); ``ValueError`` if
    neither. Host bits are allowed (``10.1.2.3/8`` means ``10.0.0.0/8``)."""
    return ipaddress.ip_network(text.strip().removeprefix("[").replace("]", ""), strict=False)


def _embedded(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one leads to through 6to4, Teredo or NAT64, if any."""
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if any(address in prefix for prefix in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_kind(address: IPAddress) -> str | None:
    """Why ``address`` is not a public destination (``"loopback"``, ``"private"``, ...), or
    None when it is one. An IPv6 address that carries an IPv4 one is judged by that too."""
    plain: IPAddress = address
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address_kind(address.ipv4_mapped)
        inner = _embedded(address)
        if inner is not None and (kind := address_kind(inner)) is not None:
            return kind
        if address.scope_id:
            plain = ipaddress.IPv6Address(int(address))
    if plain in METADATA_ADDRESSES:
        return "cloud metadata"
    if plain.is_loopback:
        return "loopback"
    if plain.is_unspecified:
        return "unspecified"
    if plain.is_link_local:
        return "link-local"
    if plain.is_multicast:
        return "multicast"
    if plain.is_private:
        return "private"
    if not plain.is_global:
        return "non-public"
    return None


class LookupFailed(OSError):
    """A name has no address (no such name, or no resolver)."""


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
        raise LookupFailed(f"cannot resolve {host}: {exc}") from exc
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
