"""``environmentConfig/read``: the executor's Codex configuration, selected and rendered.

One request: parse ``cwd`` (a bad URI is ``-32602``, before anything else), check the key
paths, find ``CODEX_HOME``, load the layers (``layers``), keep the requested keys of each
(``selection``; a layer left empty is dropped and the cloud insertion index follows) and
render what is left as TOML text (``toml_text``). Failures after the checks are ``-32603``
with the reference's messages. Everything here blocks on the filesystem; the route runs it
in a worker thread.
"""

from __future__ import annotations

import os
import pwd
import socket
from collections.abc import Mapping, Sequence
from typing import Final

from executor.environment_config.layers import LayerStack, LoadError, load_layers
from executor.environment_config.selection import Selector
from executor.environment_config.toml_text import dumps
from executor.errors import InternalError, InvalidParams
from executor.protocol.config_messages import (
    ConfigLayer,
    ConfigLayerStack,
    EnvironmentConfigReadParams,
    EnvironmentConfigReadResult,
)
from executor.protocol.paths import ForeignPathError, parse_path_uri, to_uri

__all__ = ["SYSTEM_DIR_ENV", "EnvironmentConfigService"]

#: Where the system-wide Codex files are read from instead of ``/etc/codex`` (for tests).
SYSTEM_DIR_ENV: Final = "EXECUTOR_CODEX_SYSTEM_DIR"
_DEFAULT_SYSTEM_DIR: Final = "/etc/codex"


class EnvironmentConfigService:
    """Answers ``environmentConfig/read`` from this host's files and environment."""

    def __init__(
        self, system_dir: str = _DEFAULT_SYSTEM_DIR, environ: Mapping[str, str] = os.environ
    ) -> None:
        self.system_dir = system_dir
        self.environ = environ

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> EnvironmentConfigService:
        """The service for this process (``EXECUTOR_CODEX_SYSTEM_DIR`` or ``/etc/codex``)."""
        return cls(environ.get(SYSTEM_DIR_ENV) or _DEFAULT_SYSTEM_DIR, environ)

    def read(self, params: EnvironmentConfigReadParams) -> EnvironmentConfigReadResult:
        """The answer to one request (blocking)."""
        # A malformed URI fails first, the key paths next, a URI naming another host last.
        foreign: ForeignPathError | None = None
        try:
            cwd = parse_path_uri(params.cwd)
        except ForeignPathError as exc:
            foreign = exc
        _check_paths(params.config_paths, params.requirements_paths)
        if foreign is not None:
            raise InvalidParams(str(foreign))
        codex_home = self._codex_home()
        try:
            config, requirements = load_layers(self.system_dir, codex_home, cwd)
        except LoadError as exc:
            raise InternalError(f"failed to load executor-local config: {exc}") from None
        home = self._home_dir()
        return EnvironmentConfigReadResult(
            user_home_dir=to_uri(home) if home is not None and home.startswith("/") else None,
            codex_home_dir=to_uri(codex_home),
            hostname=_hostname(),
            config=_select(config, params.config_paths),
            requirements=_select(requirements, params.requirements_paths),
        )

    def _home_dir(self) -> str | None:
        home = self.environ.get("HOME")
        if home:
            return home
        try:
            return pwd.getpwuid(os.getuid()).pw_dir or None
        except KeyError:
            return None

    def _codex_home(self) -> str:
        explicit = self.environ.get("CODEX_HOME")
        if not explicit:
            home = self._home_dir()
            if home is None:
                raise InternalError("failed to find Codex home: could not find the home directory")
            return os.path.join(os.path.abspath(home), ".codex")
        try:
            resolved = os.path.realpath(explicit, strict=True)
        except FileNotFoundError:
            raise InternalError(
                f"failed to find Codex home: CODEX_HOME points to {_debug(explicit)}, "
                "but that path does not exist"
            ) from None
        except OSError as exc:
            raise InternalError(f"failed to find Codex home: {exc.strerror}") from None
        if not os.path.isdir(resolved):
            raise InternalError(
                f"failed to find Codex home: CODEX_HOME points to {_debug(explicit)}, "
                "but that path is not a directory"
            )
        return resolved


def _check_paths(config: Sequence[Sequence[str]], requirements: Sequence[Sequence[str]]) -> None:
    if not config and not requirements:
        raise InvalidParams("at least one config or requirements path is required")
    if any(not path for path in (*config, *requirements)):
        raise InvalidParams("TOML paths must contain at least one key segment")


def _select(stack: LayerStack, paths: Sequence[Sequence[str]]) -> ConfigLayerStack:
    selector = Selector.of(paths)
    layers: list[ConfigLayer] = []
    cloud_index = 0
    for index, layer in enumerate(stack.layers):
        selected = selector.select(layer.table)
        if selected is None:
            continue
        if index < stack.cloud_index:
            cloud_index += 1
        try:
            text = dumps(selected)
        except (TypeError, ValueError) as exc:
            raise InternalError(f"failed to serialize executor-local config: {exc}") from None
        layers.append(ConfigLayer(source=layer.source, base_dir=to_uri(layer.base_dir), toml=text))
    return ConfigLayerStack(layers=tuple(layers), cloud_insertion_index=cloud_index)


def _hostname() -> str | None:
    try:
        return socket.gethostname() or None
    except OSError:
        return None


def _debug(text: str) -> str:
    """A path quoted as Rust's ``{:?}`` quotes it."""
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif char == "\n":
            escaped.append("\\n")
        elif char == "\r":
            escaped.append("\\r")
        elif char == "\t":
            escaped.append("\\t")
        elif char < " " or char == "\x7f":
            escaped.append(f"\\u{{{ord(char):x}}}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'
