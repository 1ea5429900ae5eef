"""Load the executor's Codex configuration layers, in the reference's order (0.171.0).

Config layers, lowest precedence first: the system ``config.toml``, the user's
``$CODEX_HOME/config.toml``, the trusted project layers (``projects``), and the legacy
``managed_config.toml``. Requirements layers: the system ``requirements.toml``, then the
legacy managed file read as requirements (``managed``). Files that do not exist are empty
layers (later dropped by the selection). The system directory is ``/etc/codex`` as in the
reference; tests point it elsewhere (``EXECUTOR_CODEX_SYSTEM_DIR``).

Files are read in the reference's order and the first failure ends the read with the
reference's wording for that kind of file; the caller prefixes ``failed to load
executor-local config: ``.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from executor.environment_config import projects
from executor.environment_config.managed import requirements_from_managed
from executor.environment_config.toml_read import ReadError, TomlError, parse, read_text
from executor.environment_config.typed import TypeMismatch

__all__ = ["Layer", "LayerStack", "LoadError", "load_layers"]


class LoadError(Exception):
    """The configuration could not be loaded; the message is the reference's detail."""


@dataclass(frozen=True, slots=True)
class Layer:
    """One source: its name on the wire, its base directory (native path), its table."""

    source: str
    base_dir: str
    table: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LayerStack:
    """Layers from lowest to highest precedence; cloud layers go in at ``cloud_index``."""

    layers: list[Layer]
    cloud_index: int


def load_layers(system_dir: str, codex_home: str, cwd: str) -> tuple[LayerStack, LayerStack]:
    """The config and requirements stacks for a client whose working directory is ``cwd``."""
    managed_file = posixpath.join(system_dir, "managed_config.toml")
    managed = _config_file(managed_file, read_prefix="")
    system_file = posixpath.join(system_dir, "config.toml")
    system = _config_file(system_file) or {}
    user_file = posixpath.join(codex_home, "config.toml")
    user = _config_file(user_file) or {}

    discovery: dict[str, Any] = {}
    for table in (system, user, managed or {}):
        _merge(discovery, table)
    try:
        markers = projects.markers_from(discovery)
        requirements = _requirements(system_dir, managed_file, managed)
        trust = projects.trust_map(discovery)
    except (projects.ProjectConfigError, TypeMismatch) as exc:
        raise LoadError(str(exc)) from None
    context = projects.TrustContext(cwd, markers, trust)
    project_layers = projects.project_layers(context, codex_home, _project_file)

    config = [
        Layer(f"system ({system_file})", system_dir, system),
        Layer(f"user ({user_file})", codex_home, user),
        *(
            Layer(f"project ({posixpath.join(p.dot_codex, 'config.toml')})", p.dot_codex, p.table)
            for p in project_layers
        ),
    ]
    if managed is not None:
        config.append(Layer(f"legacy managed_config.toml ({managed_file})", system_dir, managed))
    # Cloud config goes right after the system layer, which is always first.
    return LayerStack(config, 1), requirements


def _requirements(system_dir: str, managed_file: str, managed: dict[str, Any] | None) -> LayerStack:
    system_file = posixpath.join(system_dir, "requirements.toml")
    try:
        text = read_text(system_file)
    except ReadError as exc:
        raise LoadError(f"Failed to read requirements file {system_file}: {exc}") from None
    legacy = None
    if managed is not None:
        try:
            legacy = requirements_from_managed(managed)
        except TypeMismatch as exc:
            raise LoadError(f"Failed to parse config requirements as TOML: {exc}") from None
    layers: list[Layer] = []
    if text is not None:
        try:
            layers.append(Layer(system_file, system_dir, parse(text)))
        except TomlError as exc:
            raise LoadError(
                f"failed to parse requirements layer {system_file}: {exc.snippet()}"
            ) from None
    if legacy is not None:
        layers.append(Layer(managed_file, system_dir, legacy))
    return LayerStack(layers, 1 if text is not None else 0)


def _config_file(path: str, *, read_prefix: str | None = None) -> dict[str, Any] | None:
    """A system, user or managed config file; ``None`` if it does not exist."""
    prefix = f"Failed to read config file {path}: " if read_prefix is None else read_prefix
    try:
        text = read_text(path)
    except ReadError as exc:
        raise LoadError(f"{prefix}{exc}") from None
    if text is None:
        return None
    try:
        return parse(text)
    except TomlError as exc:
        raise LoadError(exc.short(path)) from None


def _project_file(path: str, trusted: bool, what: str) -> dict[str, Any] | None:
    try:
        text = read_text(path)
    except ReadError as exc:
        raise LoadError(f"Failed to read {what} {path}: {exc}") from None
    if text is None:
        return None
    try:
        return parse(text)
    except TomlError as exc:
        if not trusted:
            return {}
        raise LoadError(f"Error parsing {what} {path}: {exc.snippet()}") from None


def _merge(base: dict[str, Any], overlay: dict[str, Any]) -> None:
    """Merge ``overlay`` into ``base`` as the reference merges layers: tables deep, else replace."""
    for key, value in overlay.items():
        current = base.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            _merge(current, value)
        else:
            base[key] = _copy(value)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value
