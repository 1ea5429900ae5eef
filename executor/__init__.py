"""executor: a sandbox-enforcing remote executor daemon speaking Codex's exec-server protocol."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("executor-daemon")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"
