"""Portable sandbox intent: the wire ``sandbox`` object, parsed and validated (pure).

The orchestrator sends symbolic intent (``:project_roots``, ``:tmpdir``, globs, ``file:`` URIs)
and this module turns it into typed values, still symbolic: binding the symbols to this
host's paths is ``materialize``'s job. Every error is ``InvalidParams`` naming the offending
field (e.g. ``sandbox.permissions.file_system.entries[2].access``). The permission profile is
snake_case on the wire; the surrounding context is camelCase.
"""

from __future__ import annotations

import enum
import marshal
import posixpath
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Annotated, Any, Final

from executor.errors import InvalidParams, SandboxUnavailable, start_failure
from executor.protocol.decode import U16, DecodeError, Parsed, decode, describe
from executor.protocol.paths import parse_path_uri

__all__ = [
    "MAX_ENTRIES",
    "Access",
    "Entry",
    "FileSystemPolicy",
    "GlobTarget",
    "ManagedNetwork",
    "NetworkMode",
    "PathTarget",
    "Permissions",
    "ProfileType",
    "SandboxIntent",
    "SpecialKind",
    "SpecialTarget",
    "Target",
    "WindowsSandboxLevel",
    "WireProcessSandbox",
    "WireSandbox",
    "parse_permissions",
    "parse_process_sandbox",
    "parse_sandbox",
]

#: More entries than any real profile needs; beyond it the request is refused.
MAX_ENTRIES: Final = 4096
MAX_PROTECTED_NAMES: Final = 64
#: A glob that names workspace roots in the reference's config form.
PROJECT_ROOTS_GLOB_PREFIX: Final = "codex-project-roots://"


class Access(enum.StrEnum):
    """What an entry grants. ``write`` implies ``read``; ``deny`` grants nothing."""

    READ = "read"
    WRITE = "write"
    DENY = "deny"

    @property
    def rank(self) -> int:
        """Tie-break order at one path: deny > write > read."""
        return {Access.READ: 0, Access.WRITE: 1, Access.DENY: 2}[self]


# ``none`` is the legacy spelling of ``deny``.
Access.__wire_aliases__ = {"none": Access.DENY}  # type: ignore[attr-defined]


class NetworkMode(enum.StrEnum):
    """Whether the sandboxed command may use the network."""

    RESTRICTED = "restricted"
    ENABLED = "enabled"


class ProfileType(enum.StrEnum):
    """Who builds the sandbox: us (managed), nobody (disabled), or the caller (external)."""

    MANAGED = "managed"
    DISABLED = "disabled"
    EXTERNAL = "external"


class _FsType(enum.StrEnum):
    RESTRICTED = "restricted"
    UNRESTRICTED = "unrestricted"


class SpecialKind(enum.StrEnum):
    """Symbolic locations, bound to native paths by ``materialize``."""

    ROOT = "root"
    MINIMAL = "minimal"
    CURRENT_WORKING_DIRECTORY = "current_working_directory"
    PROJECT_ROOTS = "project_roots"
    TMPDIR = "tmpdir"
    SLASH_TMP = "slash_tmp"
    UNKNOWN = "unknown"


class _Missing(enum.StrEnum):
    SKIP = "skip"


class WindowsSandboxLevel(enum.StrEnum):
    """The Windows sandbox implementation a client asks for (ignored elsewhere, except MXC)."""

    DISABLED = "disabled"
    RESTRICTED_TOKEN = "restricted-token"
    ELEVATED = "elevated"
    MXC = "mxc"


@dataclass(frozen=True, slots=True)
class PathTarget:
    """An explicit native absolute path."""

    path: str


@dataclass(frozen=True, slots=True)
class GlobTarget:
    """A git-style glob (deny only); relative to the policy cwd, ``~/`` to the home dir."""

    pattern: str


@dataclass(frozen=True, slots=True)
class SpecialTarget:
    """A symbolic location; ``subpath`` for project roots, ``token`` for unknown kinds."""

    kind: SpecialKind
    subpath: str | None = None
    token: str | None = None


Target = PathTarget | GlobTarget | SpecialTarget


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One permission entry."""

    target: Target
    access: Access
    skip_if_missing: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class FileSystemPolicy:
    """``restricted``: only the entries apply; ``unrestricted``: the filesystem is open."""

    restricted: bool
    entries: tuple[Entry, ...] = ()
    glob_scan_max_depth: int | None = None
    #: Names kept read-only (and uncreatable) under every writable root, beyond the built-in
    #: ``.git``, ``.agents``, ``.codex``, ``.aws`` (an executor extension: ``protected_names``).
    protected_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Permissions:
    """The permission profile (``file_system`` is None unless managed)."""

    type: ProfileType
    file_system: FileSystemPolicy | None = None
    network: NetworkMode = NetworkMode.ENABLED


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxIntent:
    """The whole sandbox context of a request, paths already native."""

    permissions: Permissions
    cwd: str | None = None
    workspace_roots: tuple[str, ...] = ()
    user_home_dir: str | None = None
    temporary_directories: tuple[str, ...] | None = None
    windows_level: WindowsSandboxLevel = WindowsSandboxLevel.DISABLED
    use_legacy_landlock: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ManagedNetwork:
    """``managedNetwork``: proxy ports and local binding (both optional on the wire)."""

    loopback_ports: tuple[U16, ...] = ()
    allow_local_binding: bool = False


# --- parsing --------------------------------------------------------------------------------


def _object(value: Any, path: str, name: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise DecodeError(f"invalid type: {describe(value)}, expected struct {name}", path)
    return value


def _required(obj: dict[str, Any], key: str, path: str) -> Any:
    if key not in obj:
        raise DecodeError(f"missing field `{key}`", path)
    return obj[key]


def _enum(cls: type[enum.StrEnum], value: Any, path: str) -> Any:
    return decode(cls, value, path)


def _uri(value: Any, path: str, label: str) -> str:
    if type(value) is not str:
        raise DecodeError(f"invalid type: {describe(value)}, expected a string", path)
    try:
        return parse_path_uri(value)
    except InvalidParams as exc:
        raise DecodeError(f"invalid {label} URI: {exc.message}", path) from None
    except Exception as exc:  # ForeignPathError and friends: still the client's input
        raise DecodeError(
            f"{label} URI `{value}` is not valid on this exec-server host: {exc}", path
        ) from None


def _uris(value: Any, path: str, label: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if type(value) is not list:
        raise DecodeError(f"invalid type: {describe(value)}, expected a sequence", path)
    return tuple(_uri(item, f"{path}[{i}]", label) for i, item in enumerate(value))


def _subpath(value: Any, path: str) -> str | None:
    if value is None:
        return None
    if type(value) is not str:
        raise DecodeError(f"invalid type: {describe(value)}, expected a string", path)
    if "\0" in value:
        raise DecodeError("subpath must not contain NUL bytes", path)
    if value.startswith("/"):
        raise DecodeError(f"subpath `{value}` must be relative", path)
    if ".." in value.split("/"):
        raise DecodeError(f"subpath `{value}` must not contain `..`", path)
    normalized = posixpath.normpath(value)
    return None if normalized == "." else normalized


def _target(value: Any, path: str) -> Target:
    obj = _object(value, path, "FileSystemPath")
    kind = _required(obj, "type", path)
    if kind == "path":
        return PathTarget(
            _uri(_required(obj, "path", path), f"{path}.path", "sandbox permission path")
        )
    if kind == "glob_pattern":
        pattern = _required(obj, "pattern", path)
        if type(pattern) is not str or not pattern or "\0" in pattern:
            raise DecodeError(
                "glob pattern must be a non-empty string without NUL bytes", f"{path}.pattern"
            )
        return GlobTarget(pattern)
    if kind == "special":
        special = _object(_required(obj, "value", path), f"{path}.value", "FileSystemSpecialPath")
        value_path = f"{path}.value"
        special_kind = _enum(
            SpecialKind, _required(special, "kind", value_path), f"{value_path}.kind"
        )
        subpath = _subpath(special.get("subpath"), f"{value_path}.subpath")
        token = special.get("path") if special_kind is SpecialKind.UNKNOWN else None
        return SpecialTarget(special_kind, subpath, token if isinstance(token, str) else None)
    raise DecodeError(
        f"unknown variant `{kind}`, expected one of `path`, `glob_pattern`, `special`",
        f"{path}.type",
    )


def _entry(value: Any, path: str) -> Entry:
    obj = _object(value, path, "FileSystemEntry")
    target = _target(_required(obj, "path", path), f"{path}.path")
    access = _enum(Access, _required(obj, "access", path), f"{path}.access")
    missing = obj.get("missing_path_behavior")
    if missing is not None:
        _enum(_Missing, missing, f"{path}.missing_path_behavior")
    if isinstance(target, GlobTarget) and access is not Access.DENY:
        raise DecodeError(
            f"glob file system permissions only support deny-read entries (got `{access}`)",
            f"{path}.access",
        )
    return Entry(target=target, access=access, skip_if_missing=missing is not None)


def _file_system(value: Any, path: str) -> FileSystemPolicy:
    obj = _object(value, path, "FileSystemPermissions")
    kind = _enum(_FsType, _required(obj, "type", path), f"{path}.type")
    if kind is _FsType.UNRESTRICTED:
        return FileSystemPolicy(restricted=False)
    entries = _required(obj, "entries", path)
    if type(entries) is not list:
        raise DecodeError(
            f"invalid type: {describe(entries)}, expected a sequence", f"{path}.entries"
        )
    if len(entries) > MAX_ENTRIES:
        raise DecodeError(
            f"at most {MAX_ENTRIES} entries are accepted, got {len(entries)}", f"{path}.entries"
        )
    depth = obj.get("glob_scan_max_depth")
    if depth is not None and (type(depth) is not int or depth <= 0 or depth >= 2**64):
        raise DecodeError(
            f"invalid value: {describe(depth)}, expected a nonzero usize",
            f"{path}.glob_scan_max_depth",
        )
    return FileSystemPolicy(
        restricted=True,
        entries=tuple(_entry(item, f"{path}.entries[{i}]") for i, item in enumerate(entries)),
        glob_scan_max_depth=depth,
        protected_names=_protected_names(obj.get("protected_names"), f"{path}.protected_names"),
    )


def _protected_names(value: Any, path: str) -> tuple[str, ...]:
    """Extra protected names: single path components, so they apply under every root."""
    if value is None:
        return ()
    if type(value) is not list:
        raise DecodeError(f"invalid type: {describe(value)}, expected a sequence", path)
    if len(value) > MAX_PROTECTED_NAMES:
        raise DecodeError(f"at most {MAX_PROTECTED_NAMES} names are accepted", path)
    names: list[str] = []
    for i, name in enumerate(value):
        if (
            type(name) is not str
            or name in ("", ".", "..")
            or "/" in name
            or "\0" in name
            or len(name.encode("utf-8", "surrogatepass")) > 255
        ):
            raise DecodeError(
                f"invalid value: {describe(name)}, expected a file name (one path component)",
                f"{path}[{i}]",
            )
        if name not in names:
            names.append(name)
    return tuple(names)


def parse_permissions(value: Any, path: str = "permissions") -> Permissions:
    """Parse a ``PermissionProfile`` (snake_case keys)."""
    obj = _object(value, path, "PermissionProfile")
    kind = _enum(ProfileType, _required(obj, "type", path), f"{path}.type")
    if kind is ProfileType.DISABLED:
        return Permissions(type=kind)
    network = _enum(NetworkMode, _required(obj, "network", path), f"{path}.network")
    if kind is ProfileType.EXTERNAL:
        return Permissions(type=kind, network=network)
    fs = _file_system(_required(obj, "file_system", path), f"{path}.file_system")
    return Permissions(type=kind, file_system=fs, network=network)


#: Sandboxes parsed lately, by their exact wire form, and how many (and how long a form).
_PARSED: OrderedDict[bytes, SandboxIntent] = OrderedDict()
_PARSED_SIZE: Final = 64
_PARSED_BYTES: Final = 16384
_PARSED_LOCK = threading.Lock()


def _wire_form(value: Any) -> bytes | None:
    """``value`` exactly, as bytes: ``marshal`` writes each object's exact type and value
    (``True`` is not ``1``, a list is not a tuple, ``1.0`` is not ``1``) and refuses
    subclasses and other objects (None then: not remembered). Version 2 writes no
    back-references, so equal values are written alike."""
    try:
        form = marshal.dumps(value, 2)
    except ValueError:
        return None
    return form if len(form) <= _PARSED_BYTES else None


def parse_sandbox(value: Any, path: str = "sandbox") -> SandboxIntent:
    """Parse the ``sandbox`` object of a request.

    A client sends the same sandbox with every command; parsing it again costs ~0.25 ms
    before a launch when the caches are cold. The result is a pure function of the value
    (types included) and immutable, so one parsed from an exactly equal value is returned
    instead. Refusals are not remembered: they are raised again, from the value at hand."""
    form = _wire_form(value)
    if form is None:
        return _parse_sandbox(value, path)
    with _PARSED_LOCK:
        intent = _PARSED.get(form)
        if intent is not None:
            _PARSED.move_to_end(form)
    if intent is not None:
        return intent
    intent = _parse_sandbox(value, path)
    with _PARSED_LOCK:
        _PARSED[form] = intent
        while len(_PARSED) > _PARSED_SIZE:
            _PARSED.popitem(last=False)
    return intent


def _parse_sandbox(value: Any, path: str) -> SandboxIntent:
    obj = _object(value, path, "FileSystemSandboxContext")
    permissions = parse_permissions(_required(obj, "permissions", path), f"{path}.permissions")
    level = _enum(
        WindowsSandboxLevel,
        _required(obj, "windowsSandboxLevel", path),
        f"{path}.windowsSandboxLevel",
    )
    context = obj.get("policyContext")
    context = (
        _object(context, f"{path}.policyContext", "PolicyContext") if context is not None else {}
    )
    cwd_value = obj.get("cwd") if obj.get("cwd") is not None else context.get("cwd")
    roots_value = obj.get("workspaceRoots")
    if roots_value is None:
        roots_value = context.get("workspaceRoots")
    cwd = _uri(cwd_value, f"{path}.cwd", "sandbox cwd") if cwd_value is not None else None
    home = obj.get("userHomeDir")
    temps = obj.get("temporaryDirectories")
    legacy = obj.get("useLegacyLandlock", False)
    if legacy is not None and type(legacy) is not bool:
        raise DecodeError(
            f"invalid type: {describe(legacy)}, expected a boolean", f"{path}.useLegacyLandlock"
        )
    return SandboxIntent(
        permissions=permissions,
        cwd=cwd,
        workspace_roots=_uris(roots_value, f"{path}.workspaceRoots", "sandbox workspace root"),
        user_home_dir=_uri(home, f"{path}.userHomeDir", "sandbox home")
        if home is not None
        else None,
        temporary_directories=(
            _uris(temps, f"{path}.temporaryDirectories", "sandbox temporary directory")
            if temps is not None
            else None
        ),
        windows_level=level,
        use_legacy_landlock=bool(legacy),
    )


def parse_process_sandbox(value: Any, path: str = "sandbox") -> SandboxIntent:
    """``parse_sandbox`` for ``process/start``, which refuses ``windowsSandboxLevel: "mxc"``
    as the reference does (its filesystem methods ignore the level on Linux, as every other
    Windows level is ignored here)."""
    intent = parse_sandbox(value, path)
    if intent.windows_level is WindowsSandboxLevel.MXC:
        # Decoded with the params, before the route: the kind is added here.
        raise start_failure(SandboxUnavailable("native MXC", message=_NO_MXC))
    return intent


_NO_MXC = "native MXC is unavailable on this executor"

#: The type of a request's ``sandbox`` field: decoded by ``parse_sandbox`` with the params.
WireSandbox = Annotated[SandboxIntent, Parsed(parse_sandbox)]
#: ``process/start``'s: decoded by ``parse_process_sandbox``.
WireProcessSandbox = Annotated[SandboxIntent, Parsed(parse_process_sandbox)]
