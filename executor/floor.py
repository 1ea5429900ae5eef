"""The policy floor (``serve --require-sandbox PROFILE``): the least confinement of any request.

With a floor, nothing a client asks for runs or reads with more than the operator's profile
allows. A request without ``sandbox`` runs under the floor itself; a request whose sandbox
grants more than the floor anywhere is refused (``-32602``) with what it would exceed. The
rules that decide:

* "More" is decided on *materialized host rules* (``RuleSet``), never on the wire form:
  symlinks are resolved, ``:root`` and an explicit ``/`` are the same thing, ``:tmpdir`` is
  whatever the request's environment made it, protected names and pins are in the rules.
  Access is piecewise constant between rule paths, so comparing both rule sets at every rule
  path of either (and ``/``) compares them at every path. A deny glob of the floor must be
  one of the request's too (or fall in a tree the request denies whole): its future matches
  are denied only by the pattern.
* The floor binds only to what the operator gave: ``:workspace_roots`` to ``serve
  --workspace`` roots (none: it expands to nothing), ``:tmpdir`` to the daemon's own
  ``TMPDIR``. A client's ``workspaceRoots``, ``temporaryDirectories`` or ``env`` never widen
  it. Its policy cwd is the command's cwd (processes) or the first workspace root, else the
  daemon's cwd (filesystem calls); profiles cannot grant anything relative to a cwd.
* The floor's ``protected_names`` are added to every request's sandbox before it is
  materialized: the reference's wire cannot say them, and they only take access away.
* ``permissions.type`` ``disabled`` or ``external`` is weaker than any floor: we would
  confine nothing. Network settings do not matter to filesystem calls, which use none.
* ``http/request`` is the daemon's own network egress: refused when the floor restricts the
  network, otherwise left to the operator's ``--http-*`` policy.

docs/operating.md ("Policy floor") is the operator's account of the same.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Final

from executor.errors import ConfigError, ExecutorError, InvalidParams, ProfileError
from executor.protocol.intent import (
    Access,
    NetworkMode,
    ProfileType,
    SandboxIntent,
)
from executor.sandbox.denyglobs import static_prefix
from executor.sandbox.hostview import HostView
from executor.sandbox.manager import SandboxManager
from executor.sandbox.materialize import materialize
from executor.sandbox.profiles import Profile, load_profile
from executor.sandbox.purpose import Purpose
from executor.sandbox.rules import RuleOrigin, RuleSet

__all__ = ["Excess", "PolicyFloor", "excesses"]

#: Examples named per kind of excess in a refusal (the rest are counted).
_EXAMPLES: Final = 3
_RANK: Final = {Access.DENY: 0, Access.READ: 1, Access.WRITE: 2}
#: Permission types under which the executor would confine nothing, and what that means.
_UNCONFINED: Final = {
    ProfileType.DISABLED: "permissions.type disabled runs it unconfined",
    ProfileType.EXTERNAL: "permissions.type external leaves confinement to the caller",
}


@dataclass(frozen=True, slots=True)
class Excess:
    """One way a request's rules grant more than the floor's: ``kind`` is ``reads``,
    ``writes`` or ``network``; ``detail`` names the path or pattern and what the floor says."""

    kind: str
    detail: str


# --- comparing rule sets ------------------------------------------------------------------------


def _where(path: str, floor: RuleSet) -> str:
    """``path`` as a refusal names it: the executor's own state is not named to a client."""
    rule = floor.rule_for(path)
    if rule is not None and rule.origin is RuleOrigin.EXECUTOR_STATE:
        return "the executor's private state"
    return path


def _path_excesses(request: RuleSet, floor: RuleSet) -> Iterable[Excess]:
    points = sorted(
        {"/", *(rule.path for rule in request.rules), *(rule.path for rule in floor.rules)},
        key=lambda path: (path.count("/") if path != "/" else 0, path),
    )
    for path in points:
        # The request's own deny globs are left out: they can only take access away, so
        # ignoring them refuses more, never less.
        mine, allowed = request.access_of(path), floor.access_of(path)
        if _RANK[mine] <= _RANK[allowed]:
            continue
        where = _where(path, floor)
        if allowed is Access.DENY:
            yield Excess("reads", f"{where} ({mine}; the required sandbox denies it)")
            if mine is Access.WRITE:
                yield Excess("writes", f"{where} (the required sandbox denies it)")
        else:
            yield Excess("writes", f"{where} (the required sandbox allows reading only)")


def _glob_excesses(request: RuleSet, floor: RuleSet) -> Iterable[Excess]:
    mine = set(request.deny_globs)
    for pattern in floor.deny_globs:
        if pattern in mine:
            continue
        base = static_prefix(pattern)
        whole = request.access_of(base) is Access.DENY and all(
            rule.access is Access.DENY
            for rule in request.rules
            if rule.path != base and rule.path.startswith(base.rstrip("/") + "/")
        )
        if not whole:
            yield Excess("reads", f"what matches {pattern} (the required sandbox denies it)")


def _pin_excesses(request: RuleSet, floor: RuleSet) -> Iterable[Excess]:
    mine = set(request.pinned)
    for pin in floor.pinned:
        parent = posixpath.dirname(pin)
        if pin not in mine and pin != "/" and request.access_of(parent) is Access.WRITE:
            yield Excess("writes", f"{pin} could be moved (the required sandbox pins it)")


def excesses(request: RuleSet | None, floor: RuleSet, *, network: bool = True) -> list[Excess]:
    """Every way ``request`` grants more than ``floor`` (None: the request is unconfined).

    ``network``: whether the network matters (not for filesystem calls).
    """
    if request is None:
        reason = _UNCONFINED[ProfileType.DISABLED]
        return [Excess(kind, reason) for kind in ("reads", "writes", "network")]
    found: list[Excess] = []
    network_wider = request.network is not NetworkMode.RESTRICTED
    if network and floor.network is NetworkMode.RESTRICTED and network_wider:
        found.append(Excess("network", "enabled (the required sandbox restricts it)"))
    if floor.filesystem_restricted:
        found.extend(_path_excesses(request, floor))
        found.extend(_glob_excesses(request, floor))
        found.extend(_pin_excesses(request, floor))
    return found


def _kinds(kinds: list[str]) -> str:
    return kinds[0] if len(kinds) == 1 else f"{', '.join(kinds[:-1])} and {kinds[-1]}"


def _refusal(name: str, found: list[Excess]) -> InvalidParams:
    kinds = [kind for kind in ("reads", "writes", "network") if any(e.kind == kind for e in found)]
    reasons = {e.detail for e in found}
    if len(reasons) == 1 and len(kinds) > 1:  # one reason for all (unconfined): say it once
        detail = f"{reasons.pop()}."
    else:
        parts = []
        for kind in kinds:
            details = list(dict.fromkeys(e.detail for e in found if e.kind == kind))
            more = f"; and {len(details) - _EXAMPLES} more" if len(details) > _EXAMPLES else ""
            parts.append(f"{kind}: {'; '.join(details[:_EXAMPLES])}{more}.")
        detail = " ".join(parts)
    return InvalidParams(
        f"sandbox is weaker than this executor's required sandbox `{name}`"
        f" (serve --require-sandbox): it would exceed {_kinds(kinds)}. {detail}"
    )


# --- the floor ----------------------------------------------------------------------------------


def _workspace_root(path: str) -> str:
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        raise ConfigError(f"--workspace {path}: not a directory")
    return real


class PolicyFloor:
    """The operator's required sandbox, bound to the operator's roots and ``TMPDIR``."""

    def __init__(
        self,
        profile: Profile,
        *,
        workspace_roots: tuple[str, ...] = (),
        tmpdir: str | None = None,
    ) -> None:
        kind = profile.permissions.type
        if kind is not ProfileType.MANAGED:
            raise ConfigError(
                f"--require-sandbox {profile.name}: a profile of type {kind} confines nothing"
                " the executor enforces; give a managed profile"
            )
        self.profile = profile
        self.workspace_roots = workspace_roots
        self.tmpdir = tmpdir if tmpdir and tmpdir.startswith("/") else None

    @classmethod
    def load(
        cls,
        spec: str,
        *,
        workspace_roots: tuple[str, ...] = (),
        environ: Mapping[str, str] = os.environ,
    ) -> PolicyFloor:
        """The floor of profile ``spec`` (a name or a file) over the operator's workspace
        roots (directories, symlinks resolved); ``ConfigError`` if unusable."""
        roots = tuple(_workspace_root(root) for root in workspace_roots)
        try:
            profile = load_profile(spec)
        except ProfileError as exc:
            raise ConfigError(f"--require-sandbox {spec}: {exc.message}") from None
        return cls(profile, workspace_roots=roots, tmpdir=environ.get("TMPDIR"))

    @property
    def name(self) -> str:
        """The profile's name, as refusals say it."""
        return self.profile.name

    @property
    def restricts_network(self) -> bool:
        """Whether commands under the floor have no network."""
        return self.profile.permissions.network is NetworkMode.RESTRICTED

    def intent(self, cwd: str | None = None) -> SandboxIntent:
        """The floor's own sandbox intent for a request in ``cwd`` (default: the first
        workspace root)."""
        roots = self.workspace_roots
        return SandboxIntent(
            permissions=self.profile.permissions,
            cwd=cwd or (roots[0] if roots else None),
            workspace_roots=roots,
            temporary_directories=(self.tmpdir,) if self.tmpdir else (),
        )

    def _env(self) -> dict[str, str]:
        """What the floor's ``:tmpdir`` of a process binds to: the daemon's ``TMPDIR``."""
        return {"TMPDIR": self.tmpdir} if self.tmpdir else {}

    def strengthen(self, intent: SandboxIntent) -> SandboxIntent:
        """``intent`` with the floor's protected names added (they only take access away)."""
        mine = self.profile.permissions.file_system
        fs = intent.permissions.file_system
        if mine is None or fs is None or not fs.restricted or not mine.protected_names:
            return intent
        names = tuple(dict.fromkeys((*fs.protected_names, *mine.protected_names)))
        permissions = replace(intent.permissions, file_system=replace(fs, protected_names=names))
        return replace(intent, permissions=permissions)

    def _refuse_unconfined(self, intent: SandboxIntent) -> None:
        reason = _UNCONFINED.get(intent.permissions.type)
        if reason is not None:
            raise _refusal(self.name, [Excess(k, reason) for k in ("reads", "writes", "network")])

    def floor_rules(self, host: HostView, purpose: Purpose, cwd: str | None = None) -> RuleSet:
        """The floor's own rules on ``host`` (processes: ``cwd`` is the command's)."""
        intent = self.intent(cwd)
        rules = materialize(
            intent if intent.cwd else replace(intent, cwd=host.cwd),
            host,
            purpose=purpose,
            process_cwd=cwd,
            child_env=self._env(),
        )
        assert rules is not None  # a managed profile always materializes to rules
        return rules

    def process_rules(
        self, intent: SandboxIntent | None, host: HostView, *, cwd: str, env: Mapping[str, str]
    ) -> RuleSet:
        """The rules a command in ``cwd`` with ``env`` runs under: the floor's when it has
        no ``intent``, else its own, refused (``InvalidParams``) if they exceed the floor's."""
        floor = self.floor_rules(host, Purpose.PROCESS, cwd)
        if intent is None:
            return floor
        self._refuse_unconfined(intent)
        rules = materialize(
            self.strengthen(intent), host, purpose=Purpose.PROCESS, process_cwd=cwd, child_env=env
        )
        self.check(rules, floor)
        assert rules is not None  # a managed intent always materializes to rules
        return rules

    def filesystem_rules(
        self, intent: SandboxIntent | None, host: HostView
    ) -> tuple[RuleSet, RuleSet, SandboxIntent]:
        """For a filesystem call: the rules it runs under, the floor's own, and the intent the
        first came from (for its aliases); refused if its own rules exceed the floor's."""
        floor = self.floor_rules(host, Purpose.FILESYSTEM)
        if intent is None:
            return floor, floor, self.intent()
        self._refuse_unconfined(intent)
        strengthened = self.strengthen(intent)
        rules = materialize(strengthened, host, purpose=Purpose.FILESYSTEM)
        self.check(rules, floor, network=False)
        assert rules is not None
        return rules, floor, strengthened

    def check(self, rules: RuleSet | None, floor: RuleSet, *, network: bool = True) -> None:
        """Refuse ``rules`` (``InvalidParams``) if they grant more than ``floor`` anywhere."""
        found = excesses(rules, floor, network=network)
        if found:
            raise _refusal(self.name, found)

    def allows_reading(self, host: HostView, path: str) -> bool:
        """Whether a filesystem call under the floor may read ``path`` (and its real path)."""
        floor = self.floor_rules(host, Purpose.FILESYSTEM)
        return all(
            floor.effective(candidate) is not Access.DENY
            for candidate in {posixpath.normpath(path), host.realpath(path)}
        )

    def http_refusal(self) -> str | None:
        """Why ``http/request`` is refused under this floor (None: it is not)."""
        if not self.restricts_network:
            return None
        return (
            f"http/request is refused: this executor's required sandbox `{self.name}`"
            " (serve --require-sandbox) restricts the network"
        )

    def confirm(self, host: HostView, manager: SandboxManager) -> None:
        """At startup: ``ConfigError`` unless the floor confines something and this host can
        enforce it (otherwise every request would be refused, or nothing confined)."""
        try:
            rules = self.floor_rules(host, Purpose.PROCESS, host.cwd)
            if not rules.filesystem_restricted and rules.network is NetworkMode.ENABLED:
                raise ConfigError(
                    f"--require-sandbox {self.name}: the profile restricts neither the"
                    " filesystem nor the network"
                )
            manager.select(rules)
        except ConfigError:
            raise
        except ExecutorError as exc:
            raise ConfigError(f"--require-sandbox {self.name}: {exc.message}") from None
