"""Project layers: the ``.codex/config.toml`` files between the project root and ``cwd``.

What the reference (0.171.0) does, probed and kept here:

* the project root is the nearest directory at or above ``cwd`` holding one of
  ``project_root_markers`` (default ``[".git"]``, taken from the system, user and managed
  config merged; ``[]`` makes ``cwd`` the root); with no marker found it is ``cwd``;
* every directory from the root down to ``cwd`` with a ``.codex`` directory contributes its
  ``config.toml`` (lowest precedence first), except a ``.codex`` that is ``CODEX_HOME``;
* a directory's layer is used only if it is trusted: ``[projects."<dir>"] trust_level =
  "trusted"`` for the directory itself, else for the project root, else for the main
  repository of its git checkout — looked up by canonical path, then by the path as given;
  ``untrusted`` or no entry leaves the layer out (its file is still read, and unreadable
  text still fails the read; invalid TOML in an untrusted file does not);
* keys a project may not set are dropped (``PROJECT_DENYLIST``); paths stay as written;
* in a linked git worktree, ``hooks`` come from the main checkout's matching ``.codex``
  directory instead, as a separate layer right after the worktree's own.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from executor.environment_config import git
from executor.environment_config.typed import TypeMismatch, describe, enum_value

__all__ = ["PROJECT_DENYLIST", "ProjectLayer", "TrustContext", "markers_from", "trust_map"]

#: Top-level keys a project-local config may not set (credentials' destinations, commands).
PROJECT_DENYLIST: Final = (
    "openai_base_url",
    "chatgpt_base_url",
    "apps_mcp_product_sku",
    "model_provider",
    "model_providers",
    "notify",
    "profile",
    "profiles",
    "experimental_realtime_webrtc_call_base_url",
    "experimental_realtime_ws_base_url",
    "otel",
)
_TRUST_LEVELS: Final = ("trusted", "untrusted")
_MARKERS_ERROR: Final = "project_root_markers must be an array of strings"


class ProjectConfigError(Exception):
    """A project layer that cannot be used; the message is the reference's."""


def markers_from(discovery: dict[str, Any]) -> list[str]:
    """``project_root_markers`` of the merged discovery config (``[".git"]`` if unset)."""
    markers = discovery.get("project_root_markers")
    if markers is None:
        return [".git"]
    if not isinstance(markers, list) or not all(isinstance(m, str) for m in markers):
        raise ProjectConfigError(_MARKERS_ERROR)
    return markers


def trust_map(discovery: dict[str, Any]) -> dict[str, str]:
    """``projects.<path>.trust_level`` of the merged discovery config, by path."""
    projects = discovery.get("projects")
    if projects is None:
        return {}
    if not isinstance(projects, dict):
        raise TypeMismatch(f"invalid type: {describe(projects)}, expected a map", "projects")
    levels: dict[str, str] = {}
    for key, entry in projects.items():
        if not isinstance(entry, dict):
            raise TypeMismatch(
                f"invalid type: {describe(entry)}, expected struct ProjectConfig", f"projects.{key}"
            )
        level = entry.get("trust_level")
        if level is not None:
            levels[key] = enum_value(level, _TRUST_LEVELS, f"projects.{key}.trust_level")
    return levels


def _trust_keys(path: str) -> list[str]:
    try:
        canonical = os.path.realpath(path, strict=True)
    except OSError:
        canonical = path
    return [canonical] if canonical == path else [canonical, path]


def _is_root_marker(directory: str, marker: str) -> bool:
    if marker == ".git":
        return git.has_git_entry(directory)
    return os.path.exists(posixpath.join(directory, marker))


@dataclass(frozen=True, slots=True)
class ProjectLayer:
    """One project layer: its ``.codex`` directory and its (sanitized) table."""

    dot_codex: str
    table: dict[str, Any]


class TrustContext:
    """Which directories of ``cwd``'s project are trusted, and where their hooks come from."""

    def __init__(self, cwd: str, markers: list[str], trust: dict[str, str]) -> None:
        self.cwd = cwd
        self.trust = trust
        self.root = self._project_root(markers)
        self.checkout = git.checkout_root(cwd)
        self.repo = git.repo_root_for_trust(cwd)
        self._root_keys = _trust_keys(self.root)
        self._repo_keys = _trust_keys(self.repo) if self.repo is not None else []

    def _project_root(self, markers: list[str]) -> str:
        for directory in git.ancestors(self.cwd):
            if any(_is_root_marker(directory, marker) for marker in markers):
                return directory
        return self.cwd

    def is_trusted(self, directory: str) -> bool:
        """The first trust entry found for the directory, the project root, the repository."""
        for key in (*_trust_keys(directory), *self._root_keys, *self._repo_keys):
            level = self.trust.get(key)
            if level is not None:
                return level == "trusted"
        return False

    def hooks_folder(self, directory: str) -> str | None:
        """In a linked worktree, the main checkout's ``.codex`` for ``directory``."""
        if self.checkout is None or self.repo is None or self.checkout == self.repo:
            return None
        relative = posixpath.relpath(directory, self.checkout)
        if relative == ".." or relative.startswith("../"):
            return None
        return posixpath.normpath(posixpath.join(self.repo, relative, ".codex"))

    def directories(self) -> list[str]:
        """From the project root down to ``cwd``."""
        chain: list[str] = []
        for directory in git.ancestors(self.cwd):
            chain.append(directory)
            if directory == self.root:
                break
        return chain[::-1]


#: Loads a project file: (path, trusted, what it is called in errors) -> table or ``None``.
ConfigLoader = Callable[[str, bool, str], "dict[str, Any] | None"]


def project_layers(
    context: TrustContext, codex_home: str, load: ConfigLoader
) -> list[ProjectLayer]:
    """The trusted project layers, lowest precedence first, hooks layers included."""
    home_canonical = _canonical(codex_home)
    layers: list[ProjectLayer] = []
    for directory in context.directories():
        dot_codex = posixpath.join(directory, ".codex")
        if not os.path.isdir(dot_codex):
            continue
        if dot_codex == codex_home or _canonical(dot_codex) == home_canonical:
            continue
        trusted = context.is_trusted(directory)
        table = load(posixpath.join(dot_codex, "config.toml"), trusted, "project config file") or {}
        for key in PROJECT_DENYLIST:
            table.pop(key, None)
        features = table.get("features")
        if isinstance(features, dict):
            features.pop("respect_system_proxy", None)
        if not trusted:
            continue
        hooks_folder = context.hooks_folder(directory)
        if hooks_folder is not None:
            table.pop("hooks", None)
        layers.append(ProjectLayer(dot_codex, table))
        if hooks_folder is None:
            continue
        hooks_file = posixpath.join(hooks_folder, "config.toml")
        root_table = load(hooks_file, True, "project hooks config file") or {}
        if "hooks" in root_table:
            layers.append(ProjectLayer(hooks_folder, {"hooks": root_table["hooks"]}))
    return layers


def _canonical(path: str) -> str:
    try:
        return os.path.realpath(path, strict=True)
    except OSError:
        return path
