"""Named sandbox profiles for policy authors: ``sandbox_profiles/*.toml`` (pure given the files).

A profile file is the human form of a permission profile (sandbox.md §1.7)::

    description = "Read everything; write the workspace, /tmp and $TMPDIR; no network."
    extends = "read-only"          # optional: start from another profile
    glob_scan_max_depth = 4        # optional
    protected_names = [".vscode"]  # optional: kept read-only under every writable root (and
                                   # uncreatable), beyond .git .agents .codex .aws (always)

    [filesystem]
    ":root" = "read"               # :root :minimal :tmpdir :slash_tmp, absolute paths, ~/paths
    ":slash_tmp" = "write"
    "~/.ssh" = "deny"
    "/srv/cache/**" = "deny"       # globs are deny-only

    [filesystem.":workspace_roots"]  # keys relative to each workspace root
    "." = "write"
    ".git" = "read"
    "**/*.env" = "deny"

    [network]
    enabled = false

    [limits]                         # optional: caps per command (executor.sandbox.limits)
    processes = 2048                 # tasks, threads included
    memory = "50%"                   # bytes, "4GiB", or a share of physical memory
    open_files = 65536
    file_size = "unlimited"          # bytes or "unlimited"
    cpu_time = "unlimited"           # seconds ("90s", "10m") or "unlimited"

``type = "disabled"`` turns sandboxing off (``danger-full-access``). A profile compiles to the
wire form of a permission profile and is parsed by the same code as a client's request, so
there is one model and one set of rules. ``[limits]`` is not part of the wire form (a client
sends none): keys it leaves out keep the daemon's defaults, and ``extends`` merges it key by
key. Validation is strict: unknown keys, bad access values, non-deny globs, bad limits and
cycles in ``extends`` are errors naming the file and key path.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Final

from executor.errors import ProfileError, RequestError
from executor.protocol.intent import (
    PROJECT_ROOTS_GLOB_PREFIX,
    NetworkMode,
    Permissions,
    ProfileType,
    SandboxIntent,
    parse_permissions,
)
from executor.protocol.paths import to_uri
from executor.sandbox.limits import LIMIT_NAMES, ResourceLimits, default_limits, parse_limits
from executor.sandbox.rules import glob_has_magic

__all__ = ["Profile", "ProfileLibrary", "default_library", "load_file"]

_ACCESS: Final = ("read", "write", "deny")
_SPECIALS: Final = {
    ":root": "root",
    ":minimal": "minimal",
    ":tmpdir": "tmpdir",
    ":slash_tmp": "slash_tmp",
}
_ROOTS_KEYS: Final = (":workspace_roots", ":project_roots")
_TOP_KEYS: Final = {
    "description",
    "extends",
    "type",
    "glob_scan_max_depth",
    "filesystem",
    "network",
    "limits",
    "protected_names",
}
_TYPES: Final = ("managed", "disabled", "external")


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """A loaded profile: its name, where it came from, and its compiled permissions."""

    name: str
    description: str
    source: str
    permissions: Permissions
    #: The wire form it compiles to (``PermissionProfile``, snake_case).
    wire: dict[str, Any]
    #: Resource limits of each command run under it (``executor run``).
    limits: ResourceLimits = field(default_factory=default_limits)

    def intent(
        self,
        *,
        workspace_roots: tuple[str, ...] = (),
        cwd: str | None = None,
        network: bool | None = None,
    ) -> SandboxIntent:
        """The sandbox intent of this profile for a command in ``cwd``.

        ``network`` overrides the profile's network setting (``executor run --network``); a
        disabled profile has none to override.
        """
        permissions = self.permissions
        if network is not None and permissions.type is not ProfileType.DISABLED:
            mode = NetworkMode.ENABLED if network else NetworkMode.RESTRICTED
            permissions = replace(permissions, network=mode)
        return SandboxIntent(
            permissions=permissions,
            cwd=cwd or (workspace_roots[0] if workspace_roots else None),
            workspace_roots=workspace_roots,
        )

    def wire_context(
        self, *, workspace_roots: tuple[str, ...] = (), cwd: str | None = None
    ) -> dict[str, Any]:
        """The ``sandbox`` object a client would send for this profile."""
        context: dict[str, Any] = {"permissions": self.wire, "windowsSandboxLevel": "disabled"}
        if workspace_roots:
            context["workspaceRoots"] = [to_uri(root) for root in workspace_roots]
        policy_cwd = cwd or (workspace_roots[0] if workspace_roots else None)
        if policy_cwd:
            context["cwd"] = to_uri(policy_cwd)
        return context


class _Raw:
    """One parsed file, not yet merged with what it extends."""

    def __init__(self, name: str, source: str, data: dict[str, Any]) -> None:
        self.name, self.source, self.data = name, source, data


def _fail(source: str, key: str, message: str) -> ProfileError:
    where = f"{source}: {key}" if key else source
    return ProfileError(f"{where}: {message}")


def load_file(path: Path) -> _Raw:
    """Parse one profile file (syntax and keys only)."""
    source = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _fail(source, "", f"cannot read: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise _fail(source, "", f"invalid TOML: {exc}") from None
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise _fail(source, unknown[0], f"unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
    if "limits" in data:
        _limits(data["limits"], source)  # here, so that an error names the file that has it
    return _Raw(path.stem, source, data)


class ProfileLibrary:
    """Profiles from one or more directories; later directories override earlier ones."""

    def __init__(self, directories: list[Path]) -> None:
        self._files: dict[str, Path] = {}
        for directory in directories:
            for path in sorted(directory.glob("*.toml")):
                self._files[path.stem] = path

    def names(self) -> list[str]:
        """Every profile name, sorted."""
        return sorted(self._files)

    def __iter__(self) -> Iterator[Profile]:
        return (self.get(name) for name in self.names())

    def get(self, name: str) -> Profile:
        """The compiled profile ``name``."""
        if name not in self._files:
            known = ", ".join(self.names()) or "none"
            raise ProfileError(f"unknown profile {name!r} (known: {known})")
        return self.compile(load_file(self._files[name]))

    def compile(self, raw: _Raw) -> Profile:
        """Merge ``raw`` with what it extends and compile it to permissions."""
        merged = self._merge(raw, [])
        wire = _to_wire(merged, raw.source)
        try:
            permissions = parse_permissions(wire, "permissions")
        except RequestError as exc:
            raise _fail(raw.source, "", exc.message) from None
        description = merged.get("description", "")
        if not isinstance(description, str):
            raise _fail(raw.source, "description", "must be a string")
        if "limits" in merged and wire["type"] == "disabled":
            raise _fail(raw.source, "limits", 'a profile of type "disabled" runs unconfined')
        limits = default_limits().replace(**_limits(merged.get("limits", {}), raw.source))
        return Profile(
            name=raw.name,
            description=description,
            source=raw.source,
            permissions=permissions,
            wire=wire,
            limits=limits,
        )

    def _merge(self, raw: _Raw, chain: list[str]) -> dict[str, Any]:
        if raw.name in chain:
            raise _fail(raw.source, "extends", f"cycle: {' -> '.join([*chain, raw.name])}")
        parent_name = raw.data.get("extends")
        if parent_name is None:
            return raw.data
        if not isinstance(parent_name, str):
            raise _fail(raw.source, "extends", "must be a profile name")
        if parent_name not in self._files:
            raise _fail(raw.source, "extends", f"unknown profile {parent_name!r}")
        parent = self._merge(load_file(self._files[parent_name]), [*chain, raw.name])
        merged = _merge_tables(parent, {k: v for k, v in raw.data.items() if k != "extends"})
        inherited, own = parent.get("protected_names"), raw.data.get("protected_names")
        if isinstance(inherited, list) and isinstance(own, list):
            # Protection accumulates: a profile that extends another can add names, and can
            # never drop one its parent protects by listing others.
            merged["protected_names"] = list(dict.fromkeys([*inherited, *own]))
        return merged


def _merge_tables(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge_tables(merged[key], value)
        else:
            merged[key] = value
    return merged


def _to_wire(data: dict[str, Any], source: str) -> dict[str, Any]:
    kind = data.get("type", "managed")
    if kind not in _TYPES:
        raise _fail(source, "type", f"must be one of {', '.join(_TYPES)}")
    if kind == "disabled":
        return {"type": "disabled"}
    network = _network(data.get("network", {}), source)
    if kind == "external":
        return {"type": "external", "network": network}
    entries = _entries(data.get("filesystem", {}), source)
    fs: dict[str, Any] = {"type": "restricted", "entries": entries}
    depth = data.get("glob_scan_max_depth")
    if depth is not None:
        if type(depth) is not int or depth <= 0:
            raise _fail(source, "glob_scan_max_depth", "must be a positive integer")
        fs["glob_scan_max_depth"] = depth
    names = data.get("protected_names")
    if names is not None:
        if not isinstance(names, list) or not all(
            isinstance(name, str) and name not in ("", ".", "..") and "/" not in name
            for name in names
        ):
            raise _fail(source, "protected_names", "must be a list of file names (no '/')")
        fs["protected_names"] = names
    return {"type": "managed", "file_system": fs, "network": network}


def _network(table: Any, source: str) -> str:
    if not isinstance(table, dict):
        raise _fail(source, "network", "must be a table")
    unknown = sorted(set(table) - {"enabled"})
    if unknown:
        raise _fail(source, f"network.{unknown[0]}", "unknown key (known: enabled)")
    enabled = table.get("enabled", False)
    if type(enabled) is not bool:
        raise _fail(source, "network.enabled", "must be true or false")
    return "enabled" if enabled else "restricted"


def _limits(table: Any, source: str) -> dict[str, int | None]:
    if not isinstance(table, dict):
        raise _fail(source, "limits", "must be a table")
    try:
        return parse_limits(table)
    except KeyError as exc:
        known = ", ".join(LIMIT_NAMES)
        raise _fail(source, f"limits.{exc.args[0]}", f"unknown key (known: {known})") from None
    except ValueError as exc:
        key, _, message = str(exc).partition(": ")
        raise _fail(source, f"limits.{key}", message) from None


def _access(value: Any, source: str, key: str) -> str:
    if value not in _ACCESS:
        raise _fail(source, key, f"access must be one of {', '.join(_ACCESS)}, got {value!r}")
    return str(value)


def _entries(table: Any, source: str) -> list[dict[str, Any]]:
    if not isinstance(table, dict):
        raise _fail(source, "filesystem", "must be a table")
    entries: list[dict[str, Any]] = []
    for key, value in table.items():
        where = f'filesystem."{key}"'
        if key in _ROOTS_KEYS:
            entries.extend(_workspace_entries(value, source, where))
            continue
        access = _access(value, source, where)
        entries.append({"path": _path(key, access, source, where), "access": access})
    return entries


def _path(key: str, access: str, source: str, where: str) -> dict[str, Any]:
    if key in _SPECIALS:
        return {"type": "special", "value": {"kind": _SPECIALS[key]}}
    if key.startswith(":"):
        known = ", ".join([*_SPECIALS, *_ROOTS_KEYS])
        raise _fail(source, where, f"unknown special path (known: {known})")
    if not (key.startswith("/") or key.startswith("~/")):
        raise _fail(source, where, "filesystem paths must be absolute, use ~/..., or start with :")
    if glob_has_magic(key):
        if access != "deny":
            raise _fail(source, where, "globs only support deny access")
        return {"type": "glob_pattern", "pattern": key}
    native = os.path.expanduser(key) if key.startswith("~/") else key
    return {"type": "path", "path": to_uri(native)}


def _workspace_entries(table: Any, source: str, where: str) -> list[dict[str, Any]]:
    if isinstance(table, str):  # ":workspace_roots" = "write" means "." = "write"
        table = {".": table}
    if not isinstance(table, dict):
        raise _fail(source, where, "must be an access or a table of relative paths")
    entries: list[dict[str, Any]] = []
    for key, value in table.items():
        inner = f'{where}."{key}"'
        access = _access(value, source, inner)
        if key.startswith("/") or ".." in key.split("/"):
            raise _fail(source, inner, "workspace paths must be relative and must not contain ..")
        if glob_has_magic(key):
            if access != "deny":
                raise _fail(source, inner, "globs only support deny access")
            entries.append(
                {
                    "path": {"type": "glob_pattern", "pattern": PROJECT_ROOTS_GLOB_PREFIX + key},
                    "access": access,
                }
            )
            continue
        value_obj: dict[str, Any] = {"kind": "project_roots"}
        if key not in (".", ""):
            value_obj["subpath"] = key
        entry: dict[str, Any] = {"path": {"type": "special", "value": value_obj}, "access": access}
        if key in (".git", ".agents", ".codex", ".aws") and access == "read":
            entry["missing_path_behavior"] = "skip"
        entries.append(entry)
    return entries


def shipped_directory() -> Path:
    """The profiles that ship with the executor."""
    return Path(str(resources.files("executor.sandbox_profiles")))


def default_library(extra: list[Path] | None = None) -> ProfileLibrary:
    """Shipped profiles, then ``EXECUTOR_PROFILES_DIR`` (``:``-separated), then ``extra``."""
    directories = [shipped_directory()]
    env = os.environ.get("EXECUTOR_PROFILES_DIR", "")
    directories += [Path(part) for part in env.split(os.pathsep) if part]
    directories += extra or []
    return ProfileLibrary(directories)
