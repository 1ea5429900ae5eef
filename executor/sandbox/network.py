"""Network policy of a sandbox beyond on/off (pure): proxy mode, host patterns, local ports.

A profile's ``[network]`` table (or a wire request's managed-network fields) becomes a
``NetworkPolicy``. ``mode``:

* ``none`` — no network at all (``[network] enabled = false``, wire ``restricted``);
* ``full`` — the network as the host has it, minus the host's loopback services unless a
  port is listed in ``local_ports``;
* ``proxy`` — nothing leaves the sandbox but through the executor's own HTTP/SOCKS5 proxy,
  which connects only to hosts ``allow`` matches and ``deny`` does not.

Host patterns: an exact host name (``pypi.org``), ``*.suffix`` (any name strictly below the
suffix), ``*`` (any public host), or an IP literal (IPv6 without brackets). Loopback, private,
link-local and metadata addresses are reached only through a pattern that names the host
exactly — never through a wildcard. Matching is case-insensitive and ignores one trailing dot.

``NetworkRoute`` is what a backend needs to confine a proxied command: the loopback ports it
may reach (macOS renders them into Seatbelt) and, on Linux, the session's network namespace
to join instead of the host's.
"""

from __future__ import annotations

import enum
import ipaddress
import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "NetworkAccess",
    "NetworkPolicy",
    "NetworkRoute",
    "host_pattern_problem",
    "normalize_host",
    "pattern_matches",
]

#: One DNS label: letters, digits, hyphens (not at either end), underscores (SRV-style names).
_LABEL: Final = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
_MAX_NAME: Final = 253


class NetworkAccess(enum.StrEnum):
    """How much network a sandboxed command gets."""

    NONE = "none"
    FULL = "full"
    PROXY = "proxy"


def normalize_host(host: str) -> str:
    """``host`` as patterns compare it: lower case, no trailing dot, no IPv6 brackets."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.endswith(".") and len(host) > 1:
        host = host[:-1]
    return host


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _name_problem(name: str) -> str | None:
    if not name:
        return "is empty"
    if len(name) > _MAX_NAME:
        return f"is longer than {_MAX_NAME} characters"
    for label in name.split("."):
        if not _LABEL.fullmatch(label):
            return f"is not a host name (bad label {label!r})"
    return None


def host_pattern_problem(pattern: object) -> str | None:
    """Why ``pattern`` is not a host pattern (``None``: it is one)."""
    if not isinstance(pattern, str):
        return f"must be a string, got {type(pattern).__name__}"
    if pattern != pattern.strip() or not pattern:
        return "must be a host name, '*.suffix', '*' or an IP address (no spaces)"
    if pattern == "*":
        return None
    text = normalize_host(pattern)
    if text == "*":
        return "'*.' has no suffix"
    if _is_ip(text):
        return None
    if "/" in text or ":" in text:
        return "must be a host name, '*.suffix', '*' or an IP address (no scheme, port or path)"
    if text.startswith("*."):
        problem = _name_problem(text[2:])
        return None if problem is None else f"{pattern!r}: the suffix {problem}"
    if "*" in text:
        return "'*' may only stand alone or as the first label ('*.example.com')"
    problem = _name_problem(text)
    return None if problem is None else f"{pattern!r} {problem}"


def pattern_matches(pattern: str, host: str) -> bool:
    """Whether ``pattern`` (a valid host pattern) matches ``host`` (normalized)."""
    pattern = normalize_host(pattern)
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    if _is_ip(pattern) and _is_ip(host):
        return ipaddress.ip_address(pattern) == ipaddress.ip_address(host)
    return host == pattern


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkPolicy:
    """A sandbox's network: the mode, its host patterns and the host loopback ports it
    may reach. Validated where it is built (profile files, wire requests)."""

    mode: NetworkAccess = NetworkAccess.NONE
    #: Host patterns the proxy connects to (proxy mode only).
    allow: tuple[str, ...] = ()
    #: Host patterns it never connects to; deny wins over allow.
    deny: tuple[str, ...] = ()
    #: Host loopback TCP ports the command may connect to (full and proxy mode).
    local_ports: tuple[int, ...] = ()
    #: Whether the command may listen (TCP) — on its own loopback in proxy mode.
    local_binding: bool = True
    #: Another policy that must allow a host too (an operator's, under a client's).
    within: NetworkPolicy | None = None

    @property
    def enabled(self) -> bool:
        """Whether the command gets any network."""
        return self.mode is not NetworkAccess.NONE

    def allows_host(self, host: str) -> tuple[bool, bool]:
        """``(allowed, explicit)`` for ``host``: ``explicit`` when an allow pattern names it
        exactly (only then may it resolve to a loopback, private or metadata address)."""
        allowed, explicit = self._own(host)
        if self.within is None or not allowed:
            return allowed, explicit
        outer, outer_explicit = self.within.allows_host(host)
        return outer, explicit and outer_explicit

    def _own(self, host: str) -> tuple[bool, bool]:
        name = normalize_host(host)
        if any(pattern_matches(pattern, name) for pattern in self.deny):
            return False, False
        explicit = any(
            "*" not in pattern and pattern_matches(pattern, name) for pattern in self.allow
        )
        if explicit:
            return True, True
        if _is_ip(name):
            return False, False  # IP literals only when listed
        return any(pattern_matches(pattern, name) for pattern in self.allow), False


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkRoute:
    """How a proxied command reaches the network (set by the daemon, enforced by a backend)."""

    #: Loopback TCP ports the command may connect to: the proxy's, then the relayed
    #: ``local_ports`` (on Linux inside the session's network namespace, where the daemon
    #: serves them; on macOS the host's own loopback).
    ports: tuple[int, ...]
    #: Linux: a path the launcher opens to join the session's network namespace, and that
    #: namespace's inode (checked after joining: the path must still name the same one).
    netns_path: str | None = None
    netns_inode: int | None = None
    #: Whether the command may listen on its (private) loopback.
    local_binding: bool = True
