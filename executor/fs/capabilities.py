"""``capabilityRoots/discoverV1``: the skills and plugin manifests below caller-chosen roots.

For each root, in request order, as the reference (v0.171.0) does it (docs/capabilities.md):

1. the root must be a directory (``fs/getMetadata`` semantics), else the root's ``error``;
2. one bounded ``fs/walk`` (depth 6, 2,000 directories, 20,000 entries, directory symlinks
   followed): directories it cannot read and hitting a bound become warnings;
3. the root's own manifest — the first of ``.codex-plugin/``, ``.claude-plugin/``,
   ``.cursor-plugin/`` ``plugin.json`` that can be read — is the ``plugin``, with the MCP and
   apps files it declares (``.mcp.json`` by default); without one, the nearest ancestor's
   manifest names the namespace;
4. ``namespaceManifests``: that manifest, then one manifest per plugin directory the walk
   found (the best-ranked by name; if it cannot be read, that plugin has none), sorted by
   plugin directory;
5. ``skills``: every ``SKILL.md`` file the walk listed, sorted by URI, each with its
   ``agents/openai.yaml`` when there is one.

Every object is reached through the root's ``Resolver`` (``request_resolver``, the same the
``fs/*`` methods use): a root with a ``sandbox`` sees only what a sandboxed ``fs/walk``,
``fs/getMetadata`` and ``fs/readFile`` would, symlinks and hard links included. A failure is
the root's ``error`` or a warning, never the request's error; the request itself fails only
on bad params, a sandbox that needs a cwd without one, or more than 128 roots.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote_to_bytes

from executor.errors import ExecutorError, InvalidParams, InvalidRequest, os_error_message
from executor.floor import PolicyFloor
from executor.fs import metadata, walk
from executor.fs.capability_reads import Budget, FileReader
from executor.fs.handlers import request_resolver
from executor.fs.plugin_declarations import read_declarations
from executor.fs.resolve import Resolver
from executor.protocol import methods
from executor.protocol.capability_messages import (
    CapabilityRootsDiscoverParams,
    DiscoveredPlugin,
    DiscoveredSkill,
    DiscoverResult,
    RootDiscovery,
    RootRequest,
    TextFile,
    child_uri,
)
from executor.protocol.fs_messages import WalkKind, WalkOptions
from executor.protocol.intent import SandboxIntent
from executor.protocol.paths import to_uri
from executor.routing import Route, route
from executor.sandbox.hostview import HostView
from executor.sandbox.materialize import needs_cwd

if TYPE_CHECKING:
    from executor.routing import RequestContext

__all__ = ["MANIFEST_PATHS", "DiscoveryLimits", "capability_routes", "discover"]

_MIB: Final = 1024 * 1024
#: Plugin manifests below a plugin directory, best first.
MANIFEST_PATHS: Final = (
    ".codex-plugin/plugin.json",
    ".claude-plugin/plugin.json",
    ".cursor-plugin/plugin.json",
)
_MANIFEST_RANK: Final = {path.split("/")[0]: rank for rank, path in enumerate(MANIFEST_PATHS)}
_SKILL: Final = "SKILL.md"
_SKILL_METADATA: Final = "agents/openai.yaml"
_DEFAULT_MCP_CONFIG: Final = ".mcp.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscoveryLimits:
    """The reference's bounds, plus ours on the whole answer."""

    max_roots: int = 128
    max_depth: int = 6
    max_directories: int = 2_000
    max_entries: int = 20_000
    max_file_bytes: int = _MIB
    max_root_bytes: int = 16 * _MIB
    #: Ours: file content in one answer, all roots together.
    max_request_bytes: int = 64 * _MIB


def _relative(uri: str, base: str) -> str:
    """The ``/``-prefixed tail of ``uri`` below ``base`` (both as ``to_uri`` writes them)."""
    return uri[len(base.rstrip("/")) :]


def _plugin_directory(manifest_uri: str) -> str:
    """``…/dir/.codex-plugin/plugin.json`` -> ``…/dir``."""
    return manifest_uri.rsplit("/", 2)[0]


def _manifest_rank(uri: str) -> int | None:
    """The rank of a walked file as a plugin manifest; None when it is not one."""
    parts = uri.rsplit("/", 2)
    if len(parts) != 3 or parts[2] != "plugin.json":
        return None
    return _MANIFEST_RANK.get(parts[1])


@dataclass(slots=True)
class _Found:
    """A file the walk listed: its native path and its URI as the answer spells it."""

    path: str
    uri: str


class _Root:
    """The scan of one root that is a directory, through ``resolver``."""

    def __init__(
        self,
        request: RootRequest,
        native: str,
        resolver: Resolver,
        limits: DiscoveryLimits,
        answer_budget: Budget,
    ) -> None:
        self.request = request
        self.native = native
        self.echo = request.path.echo
        self.resolver = resolver
        self.limits = limits
        self.warnings: list[str] = []
        root_budget = Budget(
            limits.max_root_bytes, "capability root bundle exceeds the {limit}-byte limit"
        )
        self.reader = FileReader(
            resolver,
            max_file_bytes=limits.max_file_bytes,
            budgets=(root_budget, answer_budget),
            warnings=self.warnings,
        )

    def _below(self, relative: str) -> _Found:
        """The file at ``relative`` (``/``-prefixed, URI-encoded) below the root."""
        return _Found(self.native.rstrip("/") + _decoded(relative), child_uri(self.echo, relative))

    def scan(self) -> RootDiscovery:
        """Walk the root, then read its manifests and skills (the reference's order, which is
        also the order of the warnings)."""
        skills, manifests = self._walk()
        root_manifest = self._first_manifest(self.native, self.echo)
        namespaces: list[TextFile] = []
        seen: set[str] = set()
        inherited = root_manifest or self._ancestor_manifest()
        if inherited is not None:
            seen.add(_plugin_directory(inherited.path))
            namespaces.append(inherited)
        for found in manifests:
            directory = _plugin_directory(found.uri)
            if directory in seen:
                continue
            seen.add(directory)
            manifest = self.reader.read(found.path, found.uri)
            if manifest is not None:
                namespaces.append(manifest)
        plugin = None if root_manifest is None else self._plugin(root_manifest)
        return RootDiscovery(
            id=self.request.id,
            path=self.echo,
            plugin=plugin,
            skills=tuple(self._skills(skills)),
            namespace_manifests=tuple(namespaces),
            warnings=tuple(self.warnings),
        )

    def _walk(self) -> tuple[list[_Found], list[_Found]]:
        """The ``SKILL.md`` files (by URI) and plugin manifests (by directory, then rank)."""
        options = WalkOptions(
            max_depth=self.limits.max_depth,
            max_directories=self.limits.max_directories,
            max_entries=self.limits.max_entries,
            follow_directory_symlinks=True,
        )
        base = to_uri(self.native)
        try:
            result = walk.walk(self.resolver, self.native, options)
        except (OSError, ExecutorError) as exc:
            # The root is a directory it cannot read (a sandbox denies it): the reference's
            # walk reports that as an error of the walk, not as a failed walk.
            self.warnings.append(f"failed to scan capability path {self.echo}: {_message(exc)}")
            return [], []
        for error in result.errors:
            shown = child_uri(self.echo, _relative(error.path, base))
            self.warnings.append(f"failed to scan capability path {shown}: {error.message}")
        if result.truncated:
            self.warnings.append(f"capability scan reached its traversal limit (root: {self.echo})")
        skills: list[_Found] = []
        manifests: list[tuple[str, int, _Found]] = []
        for entry in result.entries:
            if entry.kind is not WalkKind.FILE:
                continue
            relative = _relative(entry.path, base)
            if relative.endswith("/" + _SKILL):
                skills.append(self._below(relative))
            rank = _manifest_rank(relative)
            if rank is not None:
                found = self._below(relative)
                manifests.append((_plugin_directory(found.uri), rank, found))
        skills.sort(key=lambda found: found.uri)
        manifests.sort(key=lambda item: (item[0], item[1]))
        return skills, [found for _directory, _rank, found in manifests]

    def _first_manifest(self, directory: str, directory_uri: str) -> TextFile | None:
        """The best-ranked plugin manifest of ``directory`` that can be read."""
        for relative in MANIFEST_PATHS:
            found = self.reader.read(
                posixpath.join(directory, relative), child_uri(directory_uri, "/" + relative)
            )
            if found is not None:
                return found
        return None

    def _ancestor_manifest(self) -> TextFile | None:
        """The manifest of the nearest directory above the root that has one."""
        current = self.native
        while current != "/":
            current = posixpath.dirname(current)
            found = self._first_manifest(current, to_uri(current))
            if found is not None:
                return found
        return None

    def _plugin(self, manifest: TextFile) -> DiscoveredPlugin:
        declared = read_declarations(manifest.contents, manifest.path, self.warnings)
        mcp_config: TextFile | None = None
        if not declared.mcp_inline:
            mcp_config = self._declared(declared.mcp_config or _DEFAULT_MCP_CONFIG)
        apps_config = None if declared.apps_config is None else self._declared(declared.apps_config)
        return DiscoveredPlugin(manifest=manifest, mcp_config=mcp_config, apps_config=apps_config)

    def _declared(self, relative: str) -> TextFile | None:
        """A file a manifest declares, ``relative`` (a normalized native path) to the root."""
        if relative == ".":
            return self.reader.read(self.native, self.echo)
        found = self._below(to_uri("/" + relative)[len("file://") :])
        return self.reader.read(found.path, found.uri)

    def _skills(self, skills: list[_Found]) -> list[DiscoveredSkill]:
        discovered = []
        for found in skills:
            instructions = self.reader.read(found.path, found.uri)
            if instructions is None:
                continue
            metadata_file = self.reader.read(
                posixpath.join(posixpath.dirname(found.path), _SKILL_METADATA),
                found.uri.rsplit("/", 1)[0] + "/" + _SKILL_METADATA,
            )
            discovered.append(DiscoveredSkill(instructions=instructions, metadata=metadata_file))
        return discovered


def _decoded(relative: str) -> str:
    """The native form of a ``/``-prefixed, URI-encoded relative path."""
    return os.fsdecode(unquote_to_bytes(relative))


def _message(exc: OSError | ExecutorError) -> str:
    return os_error_message(exc) if isinstance(exc, OSError) else exc.message


class _Resolvers:
    """One resolver per distinct sandbox of a request (a client sends the same sandbox with
    every root; materializing it, deny-glob scan included, once is enough)."""

    def __init__(self, host: HostView, floor: PolicyFloor | None = None) -> None:
        self.host = host
        self.floor = floor
        self._made: dict[SandboxIntent | None, Resolver | ExecutorError | OSError] = {}

    def get(self, intent: SandboxIntent | None) -> Resolver:
        """The resolver of ``intent``; raises what materializing it raised."""
        made = self._made.get(intent)
        if made is None:
            try:
                made = request_resolver(self.host, intent, self.floor)
            except (OSError, ExecutorError) as exc:
                made = exc
            self._made[intent] = made
        if isinstance(made, Resolver):
            return made
        raise made

    def close(self) -> None:
        """Release every resolver's descriptors."""
        for made in self._made.values():
            if isinstance(made, Resolver):
                made.close()


def _discover_root(
    resolvers: _Resolvers, request: RootRequest, limits: DiscoveryLimits, answer_budget: Budget
) -> RootDiscovery:
    uri = request.path

    def failed(error: str) -> RootDiscovery:
        return RootDiscovery(id=request.id, path=uri.echo, error=error)

    if uri.native is None:
        return failed(f"failed to inspect capability root {uri.echo}: {uri.problem}")
    try:
        resolver = resolvers.get(request.sandbox)
        found = metadata.get_metadata(resolver, uri.native, follow=True)
    except (OSError, ExecutorError) as exc:
        return failed(f"failed to inspect capability root {uri.echo}: {_message(exc)}")
    if not found.is_directory:
        return failed(f"capability root {uri.echo} is not a directory")
    return _Root(request, uri.native, resolver, limits, answer_budget).scan()


def discover(
    host: HostView,
    params: CapabilityRootsDiscoverParams,
    limits: DiscoveryLimits,
    floor: PolicyFloor | None = None,
) -> dict[str, Any]:
    """The wire result for ``params`` (blocking: run it in a worker thread); every root is
    read through its sandbox, and at least through ``floor`` (a root whose sandbox exceeds
    it fails, as one whose sandbox cannot be materialized does)."""
    answer_budget = Budget(
        limits.max_request_bytes, "capability discovery answer exceeds the {limit}-byte limit"
    )
    resolvers = _Resolvers(host, floor)
    try:
        roots = tuple(
            _discover_root(resolvers, root, limits, answer_budget) for root in params.roots
        )
    finally:
        resolvers.close()
    return DiscoverResult(roots).to_wire()


def _check(params: CapabilityRootsDiscoverParams, limits: DiscoveryLimits) -> None:
    """What fails the whole request, in the reference's order."""
    for root in params.roots:
        if root.sandbox is not None and root.sandbox.cwd is None and needs_cwd(root.sandbox):
            raise InvalidParams("file system sandbox context with dynamic permissions requires cwd")
    if len(params.roots) > limits.max_roots:
        raise InvalidRequest(f"capability root discovery accepts at most {limits.max_roots} roots")


def capability_routes(
    host: HostView, limits: DiscoveryLimits | None = None, floor: PolicyFloor | None = None
) -> list[Route]:
    """The route of ``capabilityRoots/discoverV1`` on ``host`` (under ``floor``, if any)."""
    bounds = limits or DiscoveryLimits()

    async def handle(ctx: RequestContext, params: CapabilityRootsDiscoverParams) -> Any:
        _check(params, bounds)
        return await asyncio.to_thread(discover, host, params, bounds, floor)

    return [route(methods.CAPABILITY_ROOTS_DISCOVER, CapabilityRootsDiscoverParams, handle)]
