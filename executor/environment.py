"""``environment/info`` and ``environment/status``: what this host looks like to a client."""

from __future__ import annotations

import os
import pwd
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from executor import __version__
from executor.protocol import jsonrpc, methods
from executor.protocol.messages import Capabilities, EnvironmentInfo, ShellInfo
from executor.protocol.paths import to_uri
from executor.routing import RequestContext, Route, route

__all__ = ["STATUS_READY", "describe_host", "environment_routes", "platform_os"]

#: ``environment/status`` has exactly one answer while the daemon serves requests.
STATUS_READY = {"status": "ready"}

_SHELL_NAMES = {"bash", "zsh", "sh", "fish", "dash", "ksh", "tcsh", "csh", "pwsh", "powershell"}


def platform_os() -> str:
    """``linux``, ``macos`` or ``windows``."""
    return {"linux": "linux", "darwin": "macos", "win32": "windows"}.get(sys.platform, sys.platform)


def _user_shell(environ: Mapping[str, str]) -> ShellInfo:
    path = environ.get("SHELL") or _passwd_field("pw_shell") or shutil.which("sh") or "/bin/sh"
    name = os.path.basename(path)
    return ShellInfo(name=name if name in _SHELL_NAMES else "sh", path=path)


def _passwd_field(name: str) -> str | None:
    try:
        value: str = getattr(pwd.getpwuid(os.getuid()), name)
    except KeyError:
        return None
    return value or None


def describe_host(
    capabilities: Capabilities, environ: Mapping[str, str] = os.environ
) -> EnvironmentInfo:
    """Describe this executor's host truthfully (all paths as ``file:`` URIs)."""
    home = environ.get("HOME") or _passwd_field("pw_dir")
    tmpdir = environ.get("TMPDIR")
    try:
        cwd: str | None = to_uri(os.getcwd())
    except OSError:
        cwd = None
    return EnvironmentInfo(
        shell=_user_shell(environ),
        executor_version=__version__,
        cwd=cwd,
        user_home_dir=to_uri(home) if home else None,
        platform_os=platform_os(),
        prepend_path_dirs=(),
        temporary_directories=(to_uri(tmpdir),) if tmpdir else (),
        temp_dir=to_uri(tmpdir or "/tmp"),
        capabilities=capabilities,
    )


def environment_routes(info: EnvironmentInfo) -> list[Route]:
    """``environment/info`` and ``environment/status``: constant answers, serialized once.

    ``environment/info`` is ~1 KiB of JSON and the commonest request after liveness probes.
    """
    info_wire = jsonrpc.preencode(info.to_wire())
    status_wire = jsonrpc.preencode(STATUS_READY)

    def environment_info(_ctx: RequestContext, _params: None) -> Any:
        return info_wire

    def environment_status(_ctx: RequestContext, _params: None) -> Any:
        return status_wire

    return [
        route(methods.ENVIRONMENT_INFO, None, environment_info),
        route(methods.ENVIRONMENT_STATUS, None, environment_status),
    ]
