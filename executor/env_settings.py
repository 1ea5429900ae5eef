"""``--env`` values, as ``executor run`` and ``executor exec`` take them.

A module of its own (standard library and ``executor.errors`` only) so that ``executor
exec``, which runs once per remote command, does not import the local runner for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from executor.errors import ConfigError

__all__ = ["env_settings"]


def env_settings(settings: Sequence[str], ours: Mapping[str, str]) -> dict[str, str]:
    """``--env`` values: ``NAME=VALUE``, or ``NAME`` for our own value (left unset if we
    have none)."""
    env: dict[str, str] = {}
    for setting in settings:
        name, sep, value = setting.partition("=")
        if not name or "\0" in setting:
            raise ConfigError(f"--env {setting!r}: expected NAME=VALUE or NAME")
        if sep:
            env[name] = value
        elif name in ours:
            env[name] = ours[name]
    return env
