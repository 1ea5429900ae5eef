"""Where the proxy may connect: a sandbox's ``NetworkPolicy`` applied to a name and to the
addresses it resolves to.

A request is decided twice. First by its host as the client named it (before any DNS
query, so an unlisted name is never even looked up): deny patterns win, then allow
patterns; an IP literal must be listed as such. Then by every address the name resolves
to: loopback, private, link-local, metadata and other non-public addresses are kept only
when an allow pattern names the host exactly (``localhost``, ``db.internal``), never when
it came in through a wildcard. The proxy connects only to addresses that passed, resolved
here once — a DNS answer that changes later (rebinding) has no later use.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from executor.addresses import IPAddress, LookupFailed, address_kind
from executor.addresses import resolve as lookup
from executor.sandbox.network import (
    NetworkPolicy,
    host_pattern_problem,
    normalize_host,
    pattern_matches,
)

__all__ = [
    "Decision",
    "IPAddress",
    "ProxyPolicy",
    "Refused",
    "Resolver",
    "Unreachable",
    "Vetted",
    "resolve",
]

#: ``(host, port) -> addresses`` in the resolver's order; raises ``Unreachable``.
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """One connection the proxy was asked for, and what became of it: for the log and, when
    refused, as precise denial evidence (``allowed`` is the policy's answer; ``error`` says
    why an allowed connection could not be made, which is not a denial)."""

    host: str
    port: int
    allowed: bool
    #: ``"allowed by pypi.org"``, ``"not in allow list"``, ``"denied by *.corp.example"``,
    #: ``"resolves to loopback 127.0.0.1 (list the host explicitly)"``, ...
    reason: str
    #: The address connected to, or the one refused (``None``: decided by the name).
    address: str | None = None
    #: ``"http"`` (plain proxying), ``"connect"`` (HTTP CONNECT) or ``"socks5"``.
    protocol: str = "connect"
    #: An allowed connection that failed: ``"cannot resolve ..."``, ``"connection refused"``.
    error: str | None = None

    @property
    def target(self) -> str:
        """``host:port`` as a URL would write it (IPv6 in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        verdict = "allowed" if self.allowed else "refused"
        via = f" ({self.address})" if self.address and self.address != self.host else ""
        failed = f"; {self.error}" if self.error else ""
        return f"{self.protocol} {self.target}{via} {verdict}: {self.reason}{failed}"


class Refused(Exception):
    """The policy does not let the proxy connect; ``reason`` is one line for the client."""

    def __init__(self, reason: str, address: IPAddress | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.address = address


class Unreachable(Exception):
    """An allowed destination could not be reached: no such name, refused, timed out."""

    def __init__(self, message: str, *, kind: str = "unreachable") -> None:
        super().__init__(message)
        #: ``"resolve"``, ``"refused"``, ``"timeout"``, ``"network"`` or ``"unreachable"``:
        #: what the proxy answers (SOCKS reply code, HTTP 502 or 504) depends on it.
        self.kind = kind
        #: The policy's reason when the name was allowed before it failed to resolve.
        self.allowed_by: str | None = None


@dataclass(frozen=True, slots=True)
class Vetted:
    """The addresses the proxy may connect to for one request, in the resolver's order."""

    addresses: tuple[IPAddress, ...]
    #: Why: ``"allowed by PATTERN"``.
    reason: str


async def resolve(host: str, port: int) -> list[IPAddress]:
    """The addresses of ``host`` (TCP) in the resolver's order; ``Unreachable`` when it
    has none."""
    try:
        found = await lookup(host, port)
    except (LookupFailed, UnicodeError) as exc:
        raise Unreachable(str(exc), kind="resolve") from exc
    if not found:
        raise Unreachable(f"cannot resolve {host}: no address", kind="resolve")
    return found


def _literal(name: str) -> IPAddress | None:
    """The address ``name`` spells, including the legacy IPv4 forms a resolver accepts
    (``127.1``, ``0x7f000001``, ``2130706433``) that are names to ``ipaddress``."""
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(name))
    except OSError:
        return None


def _addresses(patterns: tuple[str, ...]) -> tuple[IPAddress, ...]:
    """The patterns that are addresses (written as such: ``10`` is a name here)."""
    found: list[IPAddress] = []
    for pattern in patterns:
        try:
            found.append(ipaddress.ip_address(normalize_host(pattern)))
        except ValueError:
            pass
    return tuple(found)


def _is_this_host(address: IPAddress) -> bool:
    """Whether ``address`` is one of this host's own (binding to it works: the kernel's
    answer, current at every request, rather than a list that goes stale)."""
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True


class ProxyPolicy:
    """A sandbox's ``NetworkPolicy`` as the proxy applies it to one request."""

    def __init__(
        self,
        policy: NetworkPolicy,
        *,
        resolver: Resolver = resolve,
        loopback_ports: Collection[int] | None = None,
    ) -> None:
        self.policy = policy
        self._resolver = resolver
        #: When set, the proxy connects to loopback (and unspecified) addresses only at
        #: these ports, however the host was allowed: what the proxy calls loopback is the
        #: host's (the daemon, other users' services), not the command's own.
        self.loopback_ports = None if loopback_ports is None else frozenset(loopback_ports)
        self._deny_literals = _addresses(policy.deny)
        self._allow_literals = _addresses(policy.allow)

    def check_name(self, host: str) -> tuple[str, bool, IPAddress | None]:
        """``(pattern that allows host, explicit, the address if host is an IP literal)``,
        decided by the host alone; ``Refused`` when the name cannot be allowed."""
        name = normalize_host(host)
        literal = _literal(name)
        if literal is None and (
            "*" in name or "%" in name or host_pattern_problem(name) is not None
        ):
            raise Refused("not a host name")
        if literal is not None:
            name = str(literal)
        for pattern in self.policy.deny:
            if pattern_matches(pattern, name):
                raise Refused(f"denied by {pattern}", literal)
        for pattern in self.policy.allow:
            if "*" not in pattern and pattern_matches(pattern, name):
                return pattern, True, literal
        if literal is not None:
            raise Refused("IP literal not listed", literal)
        for pattern in self.policy.allow:
            if pattern_matches(pattern, name):
                return pattern, False, None
        raise Refused("not in allow list")

    def address_refusal(self, address: IPAddress, *, explicit: bool) -> str | None:
        """Why the proxy may not connect to ``address`` for a host allowed as decided by
        ``check_name`` (``None``: it may)."""
        plain = address
        if isinstance(plain, ipaddress.IPv6Address):
            if plain.ipv4_mapped is not None:
                plain = plain.ipv4_mapped
            elif plain.scope_id:
                plain = ipaddress.IPv6Address(int(plain))
        for denied in self._deny_literals:
            if plain == denied:
                return f"resolves to {address}, denied by {denied}"
        if explicit or any(plain == listed for listed in self._allow_literals):
            return None
        kind = address_kind(address)
        if kind is None:
            return None
        return f"resolves to {kind} {address} (list the host explicitly)"

    def _loopback_refusal(self, address: IPAddress, port: int) -> str | None:
        if self.loopback_ports is None or port in self.loopback_ports:
            return None
        if address_kind(address) in ("loopback", "unspecified"):
            return f"loopback {address} is reached only at the profile's local_ports"
        if _is_this_host(address):
            # Services bound to every address answer on the host's own ones as well.
            return f"{address} is this host's own address, reached only at the local_ports"
        return None

    async def vet(self, host: str, port: int) -> Vetted:
        """The addresses the proxy may connect to for ``host:port``: the name checked, then
        resolved once, then every address checked. ``Refused`` when the policy allows none
        (the first refused address names why); ``Unreachable`` when the name has no
        address."""
        if not 0 < port < 65536:
            raise Refused(f"port {port} is out of range")
        pattern, explicit, literal = self.check_name(host)
        reason = f"allowed by {pattern}"
        if literal is not None:  # listed, hence explicit: any address class but these
            if (why := self._loopback_refusal(literal, port)) is not None:
                raise Refused(why, literal)
            return Vetted((literal,), reason)
        try:
            found = await self._resolver(normalize_host(host), port)
        except Unreachable as exc:
            exc.allowed_by = reason
            raise
        allowed: list[IPAddress] = []
        refusal: Refused | None = None
        for address in found:
            why = self._loopback_refusal(address, port) or self.address_refusal(
                address, explicit=explicit
            )
            if why is None:
                allowed.append(address)
            elif refusal is None:
                refusal = Refused(why, address)
        if not allowed:
            raise refusal or Unreachable(f"cannot resolve {host}: no address", kind="resolve")
        return Vetted(tuple(allowed), reason)
