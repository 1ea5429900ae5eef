"""A profile's ``[network]`` table: checked key by key, compiled to a ``NetworkPolicy``.

``enabled`` turns the network on; ``mode`` says how (``"full"``, the default, or ``"proxy"``);
``allow`` and ``deny`` are the proxy's host patterns; ``local_ports`` the host loopback ports
the command may reach. Keys that mean nothing in the table's mode are errors, not ignored: a
profile that says ``allow`` without ``mode = "proxy"`` would otherwise read as a restriction
it is not. Through ``extends`` (``merge_network``) a child that turns the network off or
switches the mode drops what only meant something before, and ``deny`` accumulates.
docs/profiles.md is the reference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from executor.sandbox.network import (
    NetworkAccess,
    NetworkPolicy,
    host_pattern_problem,
    normalize_host,
)

if TYPE_CHECKING:  # profile_parse imports this module
    from executor.sandbox.profile_parse import Problems

__all__ = ["MODES", "NETWORK_KEYS", "merge_network", "network_entries", "network_table"]

#: Every key of ``[network]``.
NETWORK_KEYS: Final = ("allow", "deny", "enabled", "local_ports", "mode")
#: The values of ``mode``.
MODES: Final = ("full", "proxy")
_PROXY_ONLY: Final = ("allow", "deny")
_ON_ONLY: Final = ("mode", "local_ports", *_PROXY_ONLY)
_MAX_PORT: Final = 65535


def network_entries(table: Any, problems: Problems) -> None:
    """Check what one file's ``[network]`` says on its own — keys, types, patterns, ports —
    so that a mistake in a profile others extend names that profile's file. Whether the keys
    fit together is for ``network_table``, once ``extends`` has merged the tables."""
    _parse(table, problems)


def network_table(table: Any, problems: Problems) -> NetworkPolicy:
    """The policy of a (merged) ``[network]`` table; every problem is added to ``problems``
    at its key (the policy is then only a placeholder)."""
    parsed = _parse(table, problems)
    if parsed is None or parsed.enabled is None:
        return NetworkPolicy()
    if not parsed.enabled:
        off = "enabled = false" + ("" if "enabled" in table else " (the default)")
        if "mode" in table:
            problems.add(
                "network.mode",
                f"mode = {_toml(table['mode'])} with {off}: a mode applies only to a network"
                " that is on (set enabled = true, or remove mode)",
            )
        _proxy_only(table, off, problems)
        if "local_ports" in table:
            problems.add(
                "network.local_ports",
                f"local ports apply only to a network that is on, and here {off}:"
                " set enabled = true, or remove local_ports",
            )
        return NetworkPolicy()
    if parsed.mode is NetworkAccess.FULL:
        default = "" if "mode" in table else " (the default)"
        _proxy_only(table, f'mode = "full"{default}, the host\'s whole network', problems)
        return NetworkPolicy(mode=parsed.mode, local_ports=parsed.ports)
    if parsed.mode is NetworkAccess.PROXY:
        return NetworkPolicy(
            mode=parsed.mode, allow=parsed.allow, deny=parsed.deny, local_ports=parsed.ports
        )
    return NetworkPolicy()  # not a mode: named already


@dataclass(frozen=True, slots=True)
class _Parsed:
    """A table's values, each ``None`` or left out where it is wrong (and named)."""

    enabled: bool | None
    mode: NetworkAccess | None
    allow: tuple[str, ...]
    deny: tuple[str, ...]
    ports: tuple[int, ...]


def _parse(table: Any, problems: Problems) -> _Parsed | None:
    if not isinstance(table, dict):
        problems.add("network", "must be a table")
        return None
    for key in sorted(set(table) - set(NETWORK_KEYS)):
        problems.add(f"network.{key}", f"unknown key (known: {', '.join(NETWORK_KEYS)})")
    enabled = table.get("enabled", False)
    if type(enabled) is not bool:
        problems.add("network.enabled", "must be true or false")
        enabled = None
    mode = table.get("mode", "full")
    if mode not in MODES:
        choices = " or ".join(f'"{known}"' for known in MODES)
        problems.add("network.mode", f"must be {choices}, got {_toml(mode)}")
    return _Parsed(
        enabled=enabled,
        mode=NetworkAccess(mode) if mode in MODES else None,
        allow=_patterns(table, "allow", problems),
        deny=_patterns(table, "deny", problems),
        ports=_ports(table, problems),
    )


def _toml(value: object) -> str:
    """``value`` as the file spells it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _proxy_only(table: dict[str, Any], here: str, problems: Problems) -> None:
    for key in _PROXY_ONLY:
        if key in table:
            problems.add(
                f"network.{key}", f'host patterns apply only with mode = "proxy", and here {here}'
            )


def _patterns(table: dict[str, Any], key: str, problems: Problems) -> tuple[str, ...]:
    if key not in table:
        return ()
    where, value = f"network.{key}", table[key]
    if not isinstance(value, list):
        problems.add(where, "must be a list of host patterns")
        return ()
    seen: set[str] = set()
    patterns: list[str] = []
    for index, entry in enumerate(value):
        at = f"{where}[{index}]"
        if not isinstance(entry, str):
            problems.add(at, f"must be a host pattern (a string), got {_toml(entry)}")
            continue
        problem = host_pattern_problem(entry)
        if problem is not None:
            shown = problem if problem.startswith(repr(entry)) else f"{entry!r}: {problem}"
            problems.add(at, shown)
            continue
        same = normalize_host(entry)  # as matching compares it
        if same in seen:
            problems.add(at, f"{entry!r} is listed twice")
            continue
        seen.add(same)
        patterns.append(entry)
    return tuple(patterns)


def _ports(table: dict[str, Any], problems: Problems) -> tuple[int, ...]:
    if "local_ports" not in table:
        return ()
    value = table["local_ports"]
    if not isinstance(value, list):
        problems.add("network.local_ports", f"must be a list of port numbers 1..{_MAX_PORT}")
        return ()
    ports: list[int] = []
    for index, port in enumerate(value):
        at = f"network.local_ports[{index}]"
        if type(port) is not int or not 1 <= port <= _MAX_PORT:
            problems.add(at, f"must be a port number 1..{_MAX_PORT}, got {_toml(port)}")
        elif port in ports:
            problems.add(at, f"{port} is listed twice")
        else:
            ports.append(port)
    return tuple(ports)


def merge_network(parent: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """A child's ``[network]`` over its parent's: key by key, except that what the child
    turns off goes — ``enabled = false`` drops the inherited mode, patterns and ports, a
    mode other than ``"proxy"`` the inherited patterns — and ``deny`` accumulates (a child
    can narrow what its parent's proxy reaches, never widen it by forgetting a deny)."""
    merged = dict(parent)
    if own.get("enabled") is False:
        for key in _ON_ONLY:
            merged.pop(key, None)
    if "mode" in own and own["mode"] != "proxy":
        for key in _PROXY_ONLY:
            merged.pop(key, None)
    inherited = merged.get("deny")
    merged.update(own)
    if isinstance(inherited, list) and isinstance(own.get("deny"), list):
        merged["deny"] = list(dict.fromkeys([*inherited, *own["deny"]]))
    return merged
