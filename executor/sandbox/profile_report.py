"""What a profile means on this host, as data and as text (``executor profile explain``).

``explain`` gathers the facts into plain JSON values — the keys are a stable interface for
scripts (``--json``, documented in docs/profiles.md) — and ``explain_lines`` renders the same
dictionary for people, so the two never disagree.
"""

from __future__ import annotations

from typing import Any

from executor.errors import SandboxUnavailable
from executor.protocol.intent import Access, NetworkMode
from executor.sandbox.api import Command
from executor.sandbox.globscan import (
    GLOB_SCAN_SECONDS,
    MAX_GLOB_MATCHES,
    MAX_GLOB_SCAN_ENTRIES,
    MAX_SCAN_DEPTH,
)
from executor.sandbox.limits import LIMIT_NAMES, ResourceLimits
from executor.sandbox.manager import SandboxManager
from executor.sandbox.network import NetworkAccess, NetworkPolicy
from executor.sandbox.profiles import Profile
from executor.sandbox.rules import PathKind, RuleOrigin, RuleSet

__all__ = [
    "enforcement",
    "explain",
    "explain_lines",
    "limits_json",
    "masking_limits",
    "network_json",
    "network_lines",
    "summary",
]

_SEE_ALSO = 'docs/sandbox.md, "What path rules cannot see"'


def summary(profile: Profile) -> dict[str, Any]:
    """Who a profile is: name, description, where it comes from, what kind."""
    return {
        "name": profile.name,
        "description": profile.description,
        "source": "shipped" if profile.shipped else profile.source,
        "path": profile.source,
        "shipped": profile.shipped,
        "replaces_shipped": profile.replaces_shipped,
        "type": profile.permissions.type.value,
        "network": profile.permissions.network.value,
        "network_mode": profile.network.mode.value,
    }


def network_json(policy: NetworkPolicy) -> dict[str, Any]:
    """A network policy as JSON values: the mode, the proxy's host patterns, the host
    loopback ports the command may reach, whether it may listen."""
    return {
        "mode": policy.mode.value,
        "allow": list(policy.allow),
        "deny": list(policy.deny),
        "local_ports": list(policy.local_ports),
        "local_binding": policy.local_binding,
    }


_MODE_LINES = {
    NetworkAccess.NONE.value: "none (no network at all)",
    NetworkAccess.FULL.value: "full (the host's network)",
    NetworkAccess.PROXY.value: (
        "proxy (only through the executor's HTTP/SOCKS5 proxy, to the hosts allowed"
        " below; HTTP_PROXY, HTTPS_PROXY and ALL_PROXY name it)"
    ),
}


def network_lines(network: dict[str, Any]) -> list[str]:
    """``network_json``'s dictionary for people: the mode, then its rules, indented."""
    mode = network["mode"]
    lines = [f"  mode: {_MODE_LINES.get(mode, mode)}"]
    if mode == NetworkAccess.NONE.value:
        return lines
    if mode == NetworkAccess.PROXY.value:
        lines.append(f"  allow: {', '.join(network['allow']) or 'nothing'}")
        lines.append(f"  deny: {', '.join(network['deny']) or 'nothing'}")
    ports = ", ".join(str(port) for port in network["local_ports"]) or "none"
    lines.append(f"  host loopback ports: {ports}")
    return lines


def limits_json(limits: ResourceLimits) -> dict[str, int | None]:
    """Every limit by name: bytes, seconds or a count; ``None`` is unlimited."""
    return {name: getattr(limits, name) for name in LIMIT_NAMES}


def masking_limits(profile: Profile, rules: RuleSet) -> list[str]:
    """What the profile's deny rules cannot hide from a command (docs/sandbox.md); nothing
    when it denies nothing."""
    denies = any(
        rule.access is Access.DENY and rule.origin is not RuleOrigin.EXECUTOR_STATE
        for rule in rules.rules
    )
    if not denies and not rules.deny_globs:
        return []
    lines = [
        "hard links: deny rules mask paths, not files. A hard link elsewhere in a readable"
        " or writable tree to a denied file (one that existed before the command started:"
        " package stores, backups, your own links) shows its content under the other name;"
        " the sandbox cannot make such a link itself."
    ]
    if rules.deny_globs:
        lines.append(
            "globs are expanded at launch: a matching file created while the command runs is"
            " not masked."
        )
        fs = profile.permissions.file_system
        depth = fs.glob_scan_max_depth if fs else None
        if depth is not None and depth <= MAX_SCAN_DEPTH:
            lines.append(
                f"glob scan depth: matches deeper than {depth} directory levels are not masked"
                " (glob_scan_max_depth)."
            )
        levels = (
            "" if depth is not None and depth <= MAX_SCAN_DEPTH else f"{MAX_SCAN_DEPTH} levels, "
        )
        lines.append(
            f"glob scan caps: a scan that reaches {levels}{MAX_GLOB_MATCHES:,} matches of one"
            f" glob, or {MAX_GLOB_SCAN_ENTRIES:,} entries or {GLOB_SCAN_SECONDS:g} s per launch"
            " refuses the launch rather than mask only part of the matches (the defaults;"
            " EXECUTOR_GLOB_* in the environment raise them)."
        )
    lines.append(
        "the daemon's sandboxed fs/* calls also check files by identity and refuse such"
        " files; commands (process/start, executor run) have only the path rules."
    )
    return lines


def _probe(cwd: str) -> Command:
    return Command(executable="/bin/true", argv=("true",), env={}, cwd=cwd, tty=False)


def enforcement(manager: SandboxManager, rules: RuleSet) -> dict[str, Any]:
    """Whether, and by whom, ``rules`` would be enforced here; ``reason`` says why not."""
    out: dict[str, Any] = {
        "enforceable": False,
        "backend": None,
        "sandbox_type": None,
        "layers": None,
        "reason": None,
    }
    try:
        backend = manager.select(rules)
    except SandboxUnavailable as exc:
        out["reason"] = exc.message
        return out
    out["backend"] = backend.name
    try:
        plan = manager.prepare(backend, rules, _probe(rules.policy_cwd))
    except SandboxUnavailable as exc:
        out["reason"] = exc.message
        return out
    if plan.release is not None:
        plan.release()
    out.update(enforceable=True, sandbox_type=plan.sandbox_type.value, layers=plan.report.summary())
    return out


def explain(profile: Profile, rules: RuleSet | None, manager: SandboxManager) -> dict[str, Any]:
    """The ``profile explain`` report of ``profile`` materialized as ``rules`` (``None``: no
    sandbox at all)."""
    report: dict[str, Any] = {"profile": summary(profile), "sandbox": rules is not None}
    if rules is None:
        report["enforcement"] = {
            "enforceable": True,
            "backend": None,
            "sandbox_type": "none",
            "layers": None,
            "reason": None,
        }
        return report
    # The rules say on or off after any --network override; the profile says how.
    policy = profile.network_policy(rules.network is NetworkMode.ENABLED)
    report |= {
        "policy_cwd": rules.policy_cwd,
        "network": rules.network.value,
        "network_policy": network_json(policy),
        "limits": limits_json(rules.limits),
        "limits_summary": rules.limits.summary(),
        "filesystem": {
            "restricted": rules.filesystem_restricted,
            "rules": [
                {
                    "path": rule.path,
                    "access": rule.access.value,
                    "origin": rule.origin.value,
                    "exists": rule.kind is not PathKind.MISSING,
                }
                for rule in rules.rules
            ]
            if rules.filesystem_restricted
            else [],
            "deny_globs": list(rules.deny_globs),
            "pinned": list(rules.pinned),
        },
        "notes": list(rules.notes),
        "masking_limits": masking_limits(profile, rules),
        "needs": sorted(rules.needs),
        "enforcement": enforcement(manager, rules),
    }
    return report


def explain_lines(report: dict[str, Any]) -> list[str]:
    """``explain``'s report for people."""
    profile = report["profile"]
    source = "shipped, " if profile["shipped"] else ""
    lines = [f"profile {profile['name']} ({source}{profile['path']})"]
    if not report["sandbox"]:
        return [*lines, "sandbox: disabled (the command runs unconfined; sandboxType none)"]
    fs = report["filesystem"]
    lines += [
        f"policy cwd: {report['policy_cwd']}",
        f"network: {report['network']}",
        *network_lines(report["network_policy"]),
        f"limits: {report['limits_summary']}",
    ]
    if not fs["restricted"]:
        lines.append("filesystem: unrestricted")
    else:
        lines.append("filesystem (most specific rule wins; anything not listed is denied):")
        width = max((len(rule["path"]) for rule in fs["rules"]), default=0)
        lines += [
            f"  {rule['path']:<{width}}  {rule['access']:<5}  {rule['origin']}"
            + ("" if rule["exists"] else "  (does not exist yet)")
            for rule in fs["rules"]
        ]
        lines += [f"  deny glob: {glob}" for glob in fs["deny_globs"]]
        lines += [f"  pinned (cannot be moved, removed or replaced): {pin}" for pin in fs["pinned"]]
    lines += [f"note: {note}" for note in report["notes"]]
    if report["masking_limits"]:
        lines.append(f"what deny rules cannot hide (path-based masking; {_SEE_ALSO}):")
        lines += [f"  - {line}" for line in report["masking_limits"]]
    lines.append(f"needs: {', '.join(report['needs']) or 'nothing'}")
    found = report["enforcement"]
    if not found["enforceable"]:
        by = f"by {found['backend']}" if found["backend"] else "here"
        return [*lines, f"enforcement: REFUSED {by} — {found['reason']}"]
    return [
        *lines,
        f"enforcement: {found['backend']} backend, sandboxType {found['sandbox_type']}",
        f"layers: {found['layers']}",
    ]
