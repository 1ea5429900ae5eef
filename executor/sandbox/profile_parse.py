"""One profile file's tables to the wire form of a permission profile, every problem collected.

``executor.sandbox.profiles`` reads files and follows ``extends``; this module checks the keys
and values of one (merged) profile and compiles them. It never stops at the first mistake:
each check that fails adds a ``Problem`` naming the file and the key path, and the caller
raises ``InvalidProfile`` with all of them, so ``executor profile check`` can list every one.
docs/profiles.md is the reference for the keys.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Final

from executor.errors import ProfileError
from executor.protocol.intent import PROJECT_ROOTS_GLOB_PREFIX
from executor.protocol.paths import to_uri
from executor.sandbox.limits import LIMIT_NAMES, parse_limits
from executor.sandbox.network import NetworkAccess, NetworkPolicy
from executor.sandbox.profile_network import network_table
from executor.sandbox.rules import glob_has_magic

__all__ = [
    "TOP_KEYS",
    "InvalidProfile",
    "Problem",
    "Problems",
    "compile_profile",
    "limits_table",
    "to_wire",
]

_ACCESS: Final = ("read", "write", "deny")
_SPECIALS: Final = {
    ":root": "root",
    ":minimal": "minimal",
    ":tmpdir": "tmpdir",
    ":slash_tmp": "slash_tmp",
}
_ROOTS_KEYS: Final = (":workspace_roots", ":project_roots")
#: Every top-level key a profile file may have.
TOP_KEYS: Final = frozenset(
    {
        "description",
        "extends",
        "replaces_shipped",
        "type",
        "glob_scan_max_depth",
        "filesystem",
        "network",
        "limits",
        "protected_names",
    }
)
_TYPES: Final = ("managed", "disabled", "external")
#: Names a workspace keeps read-only even when missing (the reference's list).
_ALWAYS_PROTECTED: Final = (".git", ".agents", ".codex", ".aws")


@dataclass(frozen=True, slots=True)
class Problem:
    """One mistake in a profile file: the file, the key path (``""``: the file), and what."""

    source: str
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{self.source}: {self.key}" if self.key else self.source
        return f"{where}: {self.message}"


class InvalidProfile(ProfileError):
    """A profile file has one or more problems; the message lists them, one per line."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(problem) for problem in problems))
        self.problems: tuple[Problem, ...] = tuple(problems)


class Problems:
    """The problems found so far in one file."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[Problem] = []

    def add(self, key: str, message: str, *, source: str | None = None) -> None:
        """Record one problem at ``key`` (of this file, unless ``source`` names another)."""
        self.extend([Problem(source or self.source, key, message)])

    def extend(self, problems: tuple[Problem, ...] | list[Problem]) -> None:
        """Record problems, each once (a file read twice on the way reports them once)."""
        self.items.extend(problem for problem in problems if problem not in self.items)

    def raise_any(self) -> None:
        """Raise ``InvalidProfile`` if anything was found."""
        if self.items:
            raise InvalidProfile(self.items)


def limits_table(table: Any, problems: Problems) -> dict[str, int | None]:
    """A ``[limits]`` table, parsed; every bad key or value is recorded and left out."""
    if not isinstance(table, dict):
        problems.add("limits", "must be a table")
        return {}
    parsed: dict[str, int | None] = {}
    for key, value in table.items():
        try:
            parsed.update(parse_limits({key: value}))
        except KeyError:
            known = ", ".join(LIMIT_NAMES)
            problems.add(f"limits.{key}", f"unknown key (known: {known})")
        except ValueError as exc:
            _, _, message = str(exc).partition(": ")
            problems.add(f"limits.{key}", message)
    return parsed


def to_wire(data: dict[str, Any], problems: Problems) -> dict[str, Any]:
    """The wire ``PermissionProfile`` of a merged profile (snake_case keys)."""
    wire, _ = compile_profile(data, problems)
    return wire


def compile_profile(
    data: dict[str, Any], problems: Problems
) -> tuple[dict[str, Any], NetworkPolicy]:
    """A merged profile's wire ``PermissionProfile`` (snake_case keys) and its network
    policy, which says more than the wire's ``network`` (proxy mode is ``enabled`` there)."""
    kind = data.get("type", "managed")
    if kind not in _TYPES:
        problems.add("type", f"must be one of {', '.join(_TYPES)}")
        kind = "managed"  # check the rest as the default would be
    if kind == "disabled":
        # No sandbox: the command has the host's network as it is (the table is not read).
        return {"type": "disabled"}, NetworkPolicy(mode=NetworkAccess.FULL)
    policy = network_table(data.get("network", {}), problems)
    network = "enabled" if policy.enabled else "restricted"
    if kind == "external":
        return {"type": "external", "network": network}, policy
    wire = {"type": "managed", "file_system": _file_system(data, problems), "network": network}
    return wire, policy


def _file_system(data: dict[str, Any], problems: Problems) -> dict[str, Any]:
    entries = _entries(data.get("filesystem", {}), problems)
    fs: dict[str, Any] = {"type": "restricted", "entries": entries}
    depth = data.get("glob_scan_max_depth")
    if depth is not None:
        if type(depth) is not int or depth <= 0:
            problems.add("glob_scan_max_depth", "must be a positive integer")
        else:
            fs["glob_scan_max_depth"] = depth
    names = data.get("protected_names")
    if names is not None:
        if not isinstance(names, list) or not all(
            isinstance(name, str) and name not in ("", ".", "..") and "/" not in name
            for name in names
        ):
            problems.add("protected_names", "must be a list of file names (no '/')")
        else:
            fs["protected_names"] = names
    return fs


def _access(value: Any, problems: Problems, key: str) -> str | None:
    if value not in _ACCESS:
        problems.add(key, f"access must be one of {', '.join(_ACCESS)}, got {value!r}")
        return None
    return str(value)


def _entries(table: Any, problems: Problems) -> list[dict[str, Any]]:
    if not isinstance(table, dict):
        problems.add("filesystem", "must be a table")
        return []
    entries: list[dict[str, Any]] = []
    for key, value in table.items():
        where = f'filesystem."{key}"'
        if key in _ROOTS_KEYS:
            entries.extend(_workspace_entries(value, problems, where))
            continue
        access = _access(value, problems, where)
        path = _path(key, access, problems, where)
        if access is not None and path is not None:
            entries.append({"path": path, "access": access})
    return entries


def _path(key: str, access: str | None, problems: Problems, where: str) -> dict[str, Any] | None:
    if key in _SPECIALS:
        return {"type": "special", "value": {"kind": _SPECIALS[key]}}
    if key.startswith(":"):
        known = ", ".join([*_SPECIALS, *_ROOTS_KEYS])
        problems.add(where, f"unknown special path (known: {known})")
        return None
    if not (key.startswith("/") or key.startswith("~/")):
        problems.add(where, "filesystem paths must be absolute, use ~/..., or start with :")
        return None
    if glob_has_magic(key):
        if access not in ("deny", None):
            problems.add(where, "globs only support deny access")
        return {"type": "glob_pattern", "pattern": key}
    native = os.path.expanduser(key) if key.startswith("~/") else key
    return {"type": "path", "path": to_uri(native)}


def _workspace_entries(table: Any, problems: Problems, where: str) -> list[dict[str, Any]]:
    if isinstance(table, str):  # ":workspace_roots" = "write" means "." = "write"
        table = {".": table}
    if not isinstance(table, dict):
        problems.add(where, "must be an access or a table of relative paths")
        return []
    entries: list[dict[str, Any]] = []
    for key, value in table.items():
        inner = f'{where}."{key}"'
        access = _access(value, problems, inner)
        if key.startswith("/") or ".." in key.split("/"):
            problems.add(inner, "workspace paths must be relative and must not contain ..")
            continue
        if glob_has_magic(key):
            if access not in ("deny", None):
                problems.add(inner, "globs only support deny access")
            elif access is not None:
                glob = {"type": "glob_pattern", "pattern": PROJECT_ROOTS_GLOB_PREFIX + key}
                entries.append({"path": glob, "access": access})
            continue
        if access is None:
            continue
        value_obj: dict[str, Any] = {"kind": "project_roots"}
        if key not in (".", ""):
            value_obj["subpath"] = key
        entry: dict[str, Any] = {"path": {"type": "special", "value": value_obj}, "access": access}
        if key in _ALWAYS_PROTECTED and access == "read":
            entry["missing_path_behavior"] = "skip"
        entries.append(entry)
    return entries
