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

from executor.addresses import (
    METADATA_ADDRESSES,
    IPAddress,
    IPNetwork,
    address_kind,
    parse_network,
)
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

#: Largest buffered response body, like ``fs/readFile``'s cap; bigger bodies need streaming.
DEFAULT_MAX_BUFFERED_BYTES: Final = 256 * 1024 * 1024


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
