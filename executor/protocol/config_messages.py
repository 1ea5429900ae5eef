"""Typed params and result of ``environmentConfig/read`` (protocol.md §5.3).

The client names TOML key paths; the executor answers with its own Codex configuration
layers, each cut down to those paths and rendered back to TOML text. ``cwd`` stays a
``file:`` URI string here: the handler parses it, so URI errors keep the reference's plain
messages (no field path), and come before the key-path checks, as in the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "ConfigLayer",
    "ConfigLayerStack",
    "EnvironmentConfigReadParams",
    "EnvironmentConfigReadResult",
]

#: One TOML key path, e.g. ``("mcp_servers",)`` or ``("features", "web_search")``.
KeyPath = tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvironmentConfigReadParams:
    """``environmentConfig/read`` params; all three fields are required."""

    cwd: str
    config_paths: tuple[KeyPath, ...]
    requirements_paths: tuple[KeyPath, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigLayer:
    """One configuration source: where it came from, its base directory, the selected TOML."""

    source: str
    base_dir: str
    toml: str

    def to_wire(self) -> dict[str, str]:
        """Wire form."""
        return {"source": self.source, "baseDir": self.base_dir, "toml": self.toml}


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigLayerStack:
    """Layers from lowest to highest precedence, and where a client inserts cloud layers."""

    layers: tuple[ConfigLayer, ...]
    cloud_insertion_index: int

    def to_wire(self) -> dict[str, Any]:
        """Wire form."""
        return {
            "layers": [layer.to_wire() for layer in self.layers],
            "cloudInsertionIndex": self.cloud_insertion_index,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvironmentConfigReadResult:
    """``environmentConfig/read`` result, fields in the reference's order."""

    user_home_dir: str | None
    codex_home_dir: str
    hostname: str | None
    config: ConfigLayerStack
    requirements: ConfigLayerStack

    def to_wire(self) -> dict[str, Any]:
        """Wire form (``userHomeDir`` and ``hostname`` are ``null`` when unknown)."""
        return {
            "userHomeDir": self.user_home_dir,
            "codexHomeDir": self.codex_home_dir,
            "hostname": self.hostname,
            "config": self.config.to_wire(),
            "requirements": self.requirements.to_wire(),
        }
