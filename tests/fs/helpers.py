"""Helpers for the filesystem tests: URIs, sandbox payloads, error checks."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from executor.protocol.paths import to_uri
from tests.support.client import WsClient


def uri(path: Path | str) -> str:
    """The canonical ``file:`` URI of ``path``."""
    return to_uri(str(path))


def b64(data: bytes | str) -> str:
    """Base64 text of ``data``."""
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def unb64(text: str) -> bytes:
    """Bytes of base64 ``text``."""
    return base64.b64decode(text)


def error(client: WsClient, method: str, params: dict[str, Any]) -> tuple[int, str]:
    """Call ``method`` and return its error (code, message); fails on success."""
    response = client.call(method, params)
    assert "error" in response, f"{method} succeeded: {response}"
    return response["error"]["code"], response["error"]["message"]


def path_entry(path: Path | str, access: str) -> dict[str, Any]:
    """A permission entry for an explicit path."""
    return {"path": {"type": "path", "path": uri(path)}, "access": access}


def special_entry(kind: str, access: str, **extra: Any) -> dict[str, Any]:
    """A permission entry for a special path (``root``, ``minimal``, ``project_roots``...)."""
    return {"path": {"type": "special", "value": {"kind": kind, **extra}}, "access": access}


def glob_entry(pattern: str) -> dict[str, Any]:
    """A deny glob entry."""
    return {"path": {"type": "glob_pattern", "pattern": pattern}, "access": "deny"}


def sandbox(
    *entries: dict[str, Any],
    cwd: Path | None = None,
    roots: tuple[Path, ...] = (),
    **extra: Any,
) -> dict[str, Any]:
    """A managed, filesystem-restricted sandbox context with ``entries``."""
    context: dict[str, Any] = {
        "permissions": {
            "type": "managed",
            "file_system": {"type": "restricted", "entries": list(entries)},
            "network": "restricted",
        },
        "windowsSandboxLevel": "disabled",
    }
    if cwd is not None:
        context["cwd"] = uri(cwd)
    if roots:
        context["workspaceRoots"] = [uri(root) for root in roots]
    context.update(extra)
    return context


def workspace_sandbox(workspace: Path, *more: dict[str, Any]) -> dict[str, Any]:
    """The usual shape: ``/`` readable, ``workspace`` writable (plus ``more`` entries)."""
    return sandbox(
        special_entry("root", "read"),
        special_entry("project_roots", "write"),
        *more,
        cwd=workspace,
        roots=(workspace,),
    )
