"""executor: a sandbox-enforcing remote executor daemon speaking Codex's exec-server protocol."""

from __future__ import annotations

import functools

__all__ = ["__version__"]


@functools.cache
def _version() -> str:
    # Looked up on first use: importlib.metadata costs a short command (`executor exec`) a
    # large share of its start-up, and only `--version` and the daemon's info need it.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("executor-daemon")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'executor' has no attribute {name!r}")
