"""What the operator allows ``http/request`` to do on this executor (``serve --http-*`` flags).

Where a request may go is decided twice: by the URL's host before anything is sent (and on
every redirect hop), and by the address actually connected to, after the name is resolved
(``address_refusal``, called by ``egress`` for each address it is about to connect to).
Only the second check sees where DNS points a name, so only it can keep a request off the
executor's own loopback, its private networks and the cloud metadata endpoints.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Final

from executor.errors import InvalidParams

__all__ = [
    "DEFAULT_MAX_BUFFERED_BYTES",
    "METADATA_ADDRESSES",
    "HttpPolicy",
    "IPAddress",
    "IPNetwork",
    "address_kind",
    "parse_network",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Largest buffered response body, like ``fs/readFile``'s cap; bigger bodies need streaming.
DEFAULT_MAX_BUFFERED_BYTES: Final = 256 * 1024 * 1024

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


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpPolicy:
    """``http/request`` is unsandboxed egress from the executor's host, so it is policy.

    ``valueEnvVar`` is refused unless the variable is named in ``header_env_vars``: otherwise a
    client could read any executor secret by guessing its name and sending it to itself.
    Destinations that are not public addresses are refused unless allowed (see
    ``address_refusal``).
    """

    enabled: bool = True
    #: Executor environment variables a header's ``valueEnvVar`` may name (empty: none).
    header_env_vars: frozenset[str] = frozenset()
    #: Where requests (and every redirect hop) may go: host names (``*.suffix`` for
    #: subdomains), addresses or CIDRs; the latter match the address connected to, whatever
    #: name led there. Empty: anywhere (public, unless allowed below).
    allowed_hosts: tuple[str, ...] = ()
    #: Loopback, private, link-local and other non-public destinations are allowed (cloud
    #: metadata endpoints excepted).
    allow_private: bool = False
    #: Non-public destinations allowed all the same (metadata endpoints too, when covered).
    allowed_networks: tuple[IPNetwork, ...] = ()
    #: Largest response body a buffered request returns.
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES
    _host_names: tuple[str, ...] = field(init=False, default=(), repr=False)
    _host_networks: tuple[IPNetwork, ...] = field(init=False, default=(), repr=False)

    def __post_init__(self) -> None:
        names: list[str] = []
        networks: list[IPNetwork] = []
        for entry in self.allowed_hosts:
            try:
                networks.append(parse_network(entry))
            except ValueError:
                names.append(entry.lower().rstrip("."))
        object.__setattr__(self, "_host_names", tuple(names))
        object.__setattr__(self, "_host_networks", tuple(networks))

    def check_host(self, host: str) -> None:
        """Refuse ``host`` (a serialized URL host) before anything is sent, when the
        allow-list cannot admit it: its name matches no name entry, and it is an address no
        address entry covers (or a name while the list has no address entries)."""
        if not self.allowed_hosts or self.name_allowed(host):
            return
        try:
            address = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            if self._host_networks:
                return  # decided once the name is resolved: it may lead to a listed address
        else:
            if self._listed(address):
                return
        raise InvalidParams(f"http/request to {host} is not allowed on this executor")

    def name_allowed(self, host: str) -> bool:
        """Exact names match exactly; ``*.example.com`` matches any subdomain (not the apex)."""
        name = host.lower().strip("[]").rstrip(".")
        for wanted in self._host_names:
            if wanted.startswith("*."):
                if name.endswith(wanted[1:]) and len(name) > len(wanted) - 1:
                    return True
            elif name == wanted:
                return True
        return False

    def address_refusal(self, host: str, address: IPAddress) -> str | None:
        """Why a request to ``host`` may not connect to ``address`` (None: it may).

        An address entry of the allow-list admits what it covers, non-public or not (the
        operator named it). Otherwise the host must match a name entry (when there is a
        list), and the address must be public, inside ``allowed_networks``, or non-public
        but not a metadata endpoint with ``allow_private``.
        """
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if self._listed(address):
            return None
        if self.allowed_hosts and not self.name_allowed(host):
            return f"{address} is not an allowed address"
        kind = address_kind(address)
        if kind is None or any(address in network for network in self.allowed_networks):
            return None
        if self.allow_private and kind != "cloud metadata":
            return None
        return f"{address} is {'an' if kind[0] in 'aeiou' else 'a'} {kind} address"

    def _listed(self, address: IPAddress) -> bool:
        return any(address in network for network in self._host_networks)

    def check_env_var(self, header: str, variable: str) -> None:
        """Refuse a ``valueEnvVar`` the operator did not allow."""
        if variable not in self.header_env_vars:
            raise InvalidParams(
                f"http/request header {header}: valueEnvVar is not allowed on this executor"
            )
