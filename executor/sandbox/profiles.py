"""Named sandbox profiles for policy authors: ``sandbox_profiles/*.toml`` (pure given the files).

A profile file is the human form of a permission profile (sandbox.md §1.7)::

    description = "Read everything; write the workspace, /tmp and $TMPDIR; no network."
    extends = "read-only"          # optional: start from another profile
    replaces_shipped = true        # only in a file named like a shipped profile, to replace it
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
    enabled = true                   # default false: no network at all
    mode = "proxy"                   # "full" (default): the host's network; "proxy": only
                                     # through the executor's proxy, to hosts allow matches
    allow = ["pypi.org", "*.pythonhosted.org"]   # proxy mode: host patterns
    deny = ["*.corp.example"]        # proxy mode: never these (deny wins)
    local_ports = [5432]             # host loopback ports the command may reach

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
key. Neither is ``[network]``'s ``mode``, ``allow``, ``deny`` and ``local_ports``: the wire
form only says whether the network is on, ``Profile.network`` is the whole ``NetworkPolicy``.
Validation is strict: unknown keys, bad access values, non-deny globs, bad limits, bad host
patterns or ports, keys that mean nothing in the network's mode and cycles in ``extends`` are
errors naming the file and key path, every one of them (``executor.sandbox.profile_parse``).

Profiles are looked up in the shipped directory, then ``EXECUTOR_PROFILES_DIR``; a later
directory's file replaces an earlier one of the same name, except a shipped one: a user file
named like a shipped profile is refused (naming both files) unless it says
``replaces_shipped = true``, so a stray file cannot quietly turn ``read-only`` into something
else. docs/profiles.md is the reference for policy authors.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from executor.errors import ProfileError, RequestError
from executor.protocol.intent import (
    NetworkMode,
    Permissions,
    ProfileType,
    SandboxIntent,
    parse_permissions,
)
from executor.protocol.paths import to_uri
from executor.sandbox.limits import ResourceLimits, default_limits
from executor.sandbox.network import NetworkAccess, NetworkPolicy
from executor.sandbox.profile_network import merge_network, network_entries
from executor.sandbox.profile_parse import (
    TOP_KEYS,
    InvalidProfile,
    Problem,
    Problems,
    compile_profile,
    limits_table,
)

__all__ = [
    "InvalidProfile",
    "Problem",
    "Profile",
    "ProfileLibrary",
    "default_library",
    "load_file",
    "load_profile",
    "read_file",
    "shipped_directory",
]


#: ``Profile.network`` left out: follow ``permissions.network`` (a profile built by hand).
_FROM_PERMISSIONS = NetworkPolicy(mode=NetworkAccess.NONE, local_ports=(0,))


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
    #: It is one of the profiles shipped with the executor.
    shipped: bool = False
    #: It replaces the shipped profile of its name (``replaces_shipped = true``).
    replaces_shipped: bool = False
    #: Its network: ``[network]`` as a whole (``permissions.network`` only says on or off).
    #: Left out, it follows ``permissions.network``: full when on, none when off.
    network: NetworkPolicy = _FROM_PERMISSIONS

    def __post_init__(self) -> None:
        if self.network is _FROM_PERMISSIONS:
            on = (
                self.permissions.type is ProfileType.DISABLED
                or self.permissions.network is NetworkMode.ENABLED
            )
            policy = NetworkPolicy(mode=NetworkAccess.FULL if on else NetworkAccess.NONE)
            object.__setattr__(self, "network", policy)

    def network_policy(self, network: bool | None = None) -> NetworkPolicy:
        """The network of a command run under this profile.

        ``network`` overrides the profile's setting (``executor run --network on|off``):
        ``True`` gives a profile without network the host's (``full``) and keeps a network
        that is on as the profile has it (a proxied one stays proxied); ``False`` takes it
        away. A disabled profile has none to override: its command has the host's network.
        """
        if network is None or self.permissions.type is ProfileType.DISABLED:
            return self.network
        if not network:
            return NetworkPolicy(mode=NetworkAccess.NONE)
        if self.network.enabled:
            return self.network
        return NetworkPolicy(mode=NetworkAccess.FULL)

    def intent(
        self,
        *,
        workspace_roots: tuple[str, ...] = (),
        cwd: str | None = None,
        network: bool | None = None,
    ) -> SandboxIntent:
        """The sandbox intent of this profile for a command in ``cwd``.

        ``network`` overrides the profile's network setting (``executor run --network``; see
        ``network_policy``, which the intent's on/off agrees with); a disabled profile has
        none to override.
        """
        permissions = self.permissions
        if network is not None and permissions.type is not ProfileType.DISABLED:
            on = self.network_policy(network).enabled
            mode = NetworkMode.ENABLED if on else NetworkMode.RESTRICTED
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

    @property
    def replaces_shipped(self) -> bool:
        """The file says it replaces the shipped profile of its name."""
        return self.data.get("replaces_shipped") is True


def read_file(path: Path) -> tuple[_Raw | None, list[Problem]]:
    """Parse one profile file (syntax, top-level keys, ``[limits]``, what ``[network]`` says
    on its own); every problem found.

    The file is ``None`` when it cannot be read or is not TOML.
    """
    problems = Problems(str(path))
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        problems.add("", f"cannot read: {exc.strerror}")
        return None, problems.items
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        problems.add("", f"invalid TOML: {exc}")
        return None, problems.items
    for key in sorted(set(data) - TOP_KEYS):
        problems.add(key, f"unknown key (known: {', '.join(sorted(TOP_KEYS))})")
    if "limits" in data:
        limits_table(data["limits"], problems)  # here, so that an error names the file
    if "network" in data and data.get("type") != "disabled":  # (which reads no [network])
        network_entries(data["network"], problems)  # so does one in a host pattern or port
    if type(data.get("replaces_shipped", False)) is not bool:
        problems.add("replaces_shipped", "must be true or false")
    return _Raw(path.stem, str(path), data), problems.items


def load_file(path: Path) -> _Raw:
    """Parse one profile file (syntax and keys only); ``InvalidProfile`` lists its problems."""
    raw, problems = read_file(path)
    if problems or raw is None:
        raise InvalidProfile(problems)
    return raw


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


class ProfileLibrary:
    """Profiles from one or more directories; later directories override earlier ones, but
    a shipped profile only when the overriding file says ``replaces_shipped = true``."""

    def __init__(self, directories: list[Path]) -> None:
        self._files: dict[str, Path] = {}
        #: The shipped file of each shipped name.
        self._shipped: dict[str, Path] = {}
        shipped = shipped_directory()
        for directory in directories:
            is_shipped = directory.is_dir() and _same_file(directory, shipped)
            for path in sorted(directory.glob("*.toml")):
                self._files[path.stem] = path
                if is_shipped:
                    self._shipped[path.stem] = path

    def names(self) -> list[str]:
        """Every profile name, sorted."""
        return sorted(self._files)

    def path(self, name: str) -> Path:
        """The file profile ``name`` is read from."""
        if name not in self._files:
            known = ", ".join(self.names()) or "none"
            raise ProfileError(f"unknown profile {name!r} (known: {known})")
        return self._files[name]

    def is_shipped(self, name: str) -> bool:
        """Whether ``name`` is read from the shipped file (not a user file replacing it)."""
        shipped = self._shipped.get(name)
        return shipped is not None and _same_file(self.path(name), shipped)

    def __iter__(self) -> Iterator[Profile]:
        return (self.get(name) for name in self.names())

    def load_all(self) -> tuple[list[Profile], dict[str, ProfileError]]:
        """Every profile that loads, and the error of each one that does not (by name)."""
        profiles: list[Profile] = []
        errors: dict[str, ProfileError] = {}
        for name in self.names():
            try:
                profiles.append(self.get(name))
            except ProfileError as exc:
                errors[name] = exc
        return profiles, errors

    def get(self, name: str) -> Profile:
        """The compiled profile ``name``; ``InvalidProfile`` lists every problem."""
        profile, problems = self.check(self.path(name))
        if profile is None:
            raise InvalidProfile(problems)
        return profile

    def check(self, path: Path) -> tuple[Profile | None, list[Problem]]:
        """Load the profile file ``path`` against this library: the profile, or ``None`` and
        every problem found (in it, its shadowing of a shipped name, what it extends)."""
        problems = Problems(str(path))
        raw, found = read_file(path)
        problems.extend(found)
        self._check_shadowing(path, raw, problems)
        if raw is None:
            return None, problems.items
        profile = self._compile(raw, problems)
        return (None if problems.items else profile), problems.items

    def compile(self, raw: _Raw) -> Profile:
        """Merge ``raw`` with what it extends and compile it to permissions."""
        problems = Problems(raw.source)
        profile = self._compile(raw, problems)
        problems.raise_any()
        return profile

    def _check_shadowing(self, path: Path, raw: _Raw | None, problems: Problems) -> None:
        shipped = self._shipped.get(path.stem)
        if shipped is None or _same_file(path, shipped):
            return
        if raw is not None and raw.replaces_shipped:
            return
        problems.add(
            "",
            f"has the name of the shipped profile {path.stem!r} ({shipped}); rename it, or add"
            " `replaces_shipped = true` to it to replace the shipped one",
            source=str(path),
        )

    def _compile(self, raw: _Raw, problems: Problems) -> Profile:
        merged = self._merge(raw, [], problems)
        wire, network = compile_profile(merged, problems)
        permissions = Permissions(type=ProfileType.DISABLED)
        if not problems.items:
            try:
                permissions = parse_permissions(wire, "permissions")
            except RequestError as exc:
                problems.add("", exc.message)
        description = merged.get("description", "")
        if not isinstance(description, str):
            problems.add("description", "must be a string")
            description = ""
        if "limits" in merged and wire["type"] == "disabled":
            problems.add("limits", 'a profile of type "disabled" runs unconfined')
        limits = default_limits().replace(**limits_table(merged.get("limits", {}), problems))
        path = Path(raw.source)
        shipped = self._shipped.get(raw.name)
        return Profile(
            name=raw.name,
            description=description,
            source=raw.source,
            permissions=permissions,
            wire=wire,
            limits=limits,
            shipped=shipped is not None and _same_file(path, shipped),
            replaces_shipped=shipped is not None and raw.replaces_shipped,
            network=network,
        )

    def _merge(self, raw: _Raw, chain: list[str], problems: Problems) -> dict[str, Any]:
        if raw.name in chain:
            cycle = " -> ".join([*chain, raw.name])
            problems.add("extends", f"cycle: {cycle}", source=raw.source)
            return {}
        parent_name = raw.data.get("extends")
        if parent_name is None:
            return raw.data
        own = {k: v for k, v in raw.data.items() if k != "extends"}
        if not isinstance(parent_name, str):
            problems.add("extends", "must be a profile name", source=raw.source)
            return own
        if parent_name not in self._files:
            problems.add("extends", f"unknown profile {parent_name!r}", source=raw.source)
            return own
        parent_path = self._files[parent_name]
        parent_raw, found = read_file(parent_path)
        before = len(problems.items)
        problems.extend(found)
        self._check_shadowing(parent_path, parent_raw, problems)
        if parent_raw is None or len(problems.items) > before:
            # Its own problems are listed; merging a broken parent would repeat them here.
            problems.add("extends", f"profile {parent_name!r} is invalid", source=raw.source)
            return own
        parent = self._merge(parent_raw, [*chain, raw.name], problems)
        merged = _merge_tables(parent, own)
        inherited, own_names = parent.get("protected_names"), raw.data.get("protected_names")
        if isinstance(inherited, list) and isinstance(own_names, list):
            # Protection accumulates: a profile that extends another can add names, and can
            # never drop one its parent protects by listing others.
            merged["protected_names"] = list(dict.fromkeys([*inherited, *own_names]))
        parent_net, own_net = parent.get("network"), raw.data.get("network")
        if isinstance(parent_net, dict) and isinstance(own_net, dict):
            merged["network"] = merge_network(parent_net, own_net)
        return merged


def _merge_tables(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge_tables(merged[key], value)
        else:
            merged[key] = value
    return merged


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


def load_profile(spec: str) -> Profile:
    """A profile by name, or from a file when ``spec`` is a path (has a ``/`` or ends in
    ``.toml``; its ``extends`` resolve against the library and its own directory)."""
    if os.sep not in spec and not spec.endswith(".toml"):
        return default_library().get(spec)
    path = Path(spec).absolute()
    if not path.is_file():
        raise ProfileError(f"profile file {spec} does not exist")
    profile, problems = default_library(extra=[path.parent]).check(path)
    if profile is None:
        raise InvalidProfile(problems)
    return profile
