"""Builders for wire-form sandbox objects (keep the tests readable)."""

from __future__ import annotations

from typing import Any


def special(
    kind: str, access: str, subpath: str | None = None, skip: bool = False
) -> dict[str, Any]:
    """A special-path entry."""
    value: dict[str, Any] = {"kind": kind}
    if subpath is not None:
        value["subpath"] = subpath
    entry: dict[str, Any] = {"path": {"type": "special", "value": value}, "access": access}
    if skip:
        entry["missing_path_behavior"] = "skip"
    return entry


def path(native: str, access: str) -> dict[str, Any]:
    """An explicit-path entry."""
    return {"path": {"type": "path", "path": f"file://{native}"}, "access": access}


def glob(pattern: str) -> dict[str, Any]:
    """A deny glob entry."""
    return {"path": {"type": "glob_pattern", "pattern": pattern}, "access": "deny"}


def managed(
    *entries: dict[str, Any], network: str = "restricted", depth: int | None = None
) -> dict[str, Any]:
    """A managed, filesystem-restricted permission profile."""
    fs: dict[str, Any] = {"type": "restricted", "entries": list(entries)}
    if depth is not None:
        fs["glob_scan_max_depth"] = depth
    return {"type": "managed", "file_system": fs, "network": network}


def context(
    permissions: dict[str, Any],
    *,
    cwd: str | None = None,
    roots: tuple[str, ...] = (),
    **extra: Any,
) -> dict[str, Any]:
    """A ``sandbox`` object."""
    ctx: dict[str, Any] = {"permissions": permissions, "windowsSandboxLevel": "disabled"}
    if cwd is not None:
        ctx["cwd"] = f"file://{cwd}"
    if roots:
        ctx["workspaceRoots"] = [f"file://{root}" for root in roots]
    ctx.update(extra)
    return ctx


#: protocol.md §7.12: the payload a real Codex 0.169.0 client sent (paths shortened to /R).
REAL_CLIENT_SANDBOX: dict[str, Any] = {
    "permissions": {
        "type": "managed",
        "file_system": {
            "type": "restricted",
            "entries": [
                special("root", "read"),
                special("project_roots", "write"),
                special("slash_tmp", "write"),
                special("tmpdir", "write"),
                special("project_roots", "read", ".git", skip=True),
                special("project_roots", "read", ".agents", skip=True),
                special("project_roots", "read", ".codex", skip=True),
                special("project_roots", "read", ".aws", skip=True),
            ],
        },
        "network": "restricted",
    },
    "cwd": "file:///R/workspace",
    "workspaceRoots": ["file:///R/workspace"],
    "windowsSandboxLevel": "disabled",
    "windowsSandboxProxySettingsMode": "reconcile",
    "useLegacyLandlock": False,
}
