"""Bind symbolic intent to this executor's native paths: intent -> ``RuleSet`` (pure, given a host).

Rules of resolution (protocol.md §7.4-§7.5):

* ``:project_roots`` (and its legacy alias) expands to each workspace root joined with its
  ``subpath``; with no workspace roots it expands to nothing (the cwd is not substituted);
* ``:tmpdir`` is the child's ``TMPDIR`` for processes, the context's temporary directories
  for filesystem calls; ``:slash_tmp`` is ``/tmp`` when it is a directory; ``:root`` is ``/``;
  ``:minimal`` the platform's list of directories needed to run programs (read-only);
* the most specific rule wins; at one path ``deny`` > ``write`` > ``read``; no rule: denied;
* ``.git``, ``.agents``, ``.codex`` and ``.aws`` stay read-only under every writable root,
  existing or not, and so does the git dir a ``.git`` file points to;
* deny globs are kept as patterns (enforced at access time where a backend can) and their
  existing matches, up to ``glob_scan_max_depth`` levels, become deny rules; a scan that
  hits one of its bounds (``globscan``) refuses the launch rather than deny fewer paths;
* the executor's own state directories are always denied.

All host knowledge comes through ``HostView`` so that tests can describe any host. This
module runs the steps in order; each lives in a module named for it: ``targets`` (binding),
``denyglobs``, ``planted`` (symlinks), ``protection`` (pins, protected names, hidden state),
all adding to one ``draft.RuleDraft``.
"""

from __future__ import annotations

from collections.abc import Mapping

from executor.errors import InvalidParams
from executor.protocol.intent import (
    GlobTarget,
    ProfileType,
    SandboxIntent,
    SpecialKind,
    SpecialTarget,
)
from executor.sandbox.denyglobs import expand_deny_globs
from executor.sandbox.draft import RuleDraft
from executor.sandbox.globscan import GlobBounds
from executor.sandbox.hostview import HostView
from executor.sandbox.planted import refuse_planted_symlinks
from executor.sandbox.protection import (
    PROTECTED_NAMES,
    hide_executor_state,
    pin_workspace_roots,
    protect_names,
)
from executor.sandbox.purpose import Purpose
from executor.sandbox.rules import RuleSet
from executor.sandbox.targets import Binding

# ``HostView``, ``Purpose`` and ``GlobBounds`` are the types of materialize's parameters.
__all__ = ["GlobBounds", "HostView", "Purpose", "materialize", "needs_cwd"]


def needs_cwd(intent: SandboxIntent) -> bool:
    """Whether the profile's entries need a policy cwd (project roots or relative globs)."""
    fs = intent.permissions.file_system
    if fs is None or not fs.restricted:
        return False
    for entry in fs.entries:
        target = entry.target
        if isinstance(target, SpecialTarget) and target.kind in (
            SpecialKind.PROJECT_ROOTS,
            SpecialKind.CURRENT_WORKING_DIRECTORY,
        ):
            return True
        if isinstance(target, GlobTarget) and not target.pattern.startswith(("/", "~/")):
            return True
    return False


def _policy_cwd(
    intent: SandboxIntent, host: HostView, purpose: Purpose, process_cwd: str | None
) -> str:
    if intent.cwd is not None:
        return intent.cwd
    if purpose is Purpose.PROCESS and process_cwd is not None:
        return process_cwd
    if needs_cwd(intent):
        raise InvalidParams("file system sandbox context with dynamic permissions requires cwd")
    return host.cwd


def materialize(
    intent: SandboxIntent,
    host: HostView,
    *,
    purpose: Purpose = Purpose.PROCESS,
    process_cwd: str | None = None,
    child_env: Mapping[str, str] | None = None,
    glob_bounds: GlobBounds | None = None,
) -> RuleSet | None:
    """The rule set for ``intent`` on ``host``; None when the profile disables sandboxing.

    ``glob_bounds`` bound the deny-glob scan (default: ``GlobBounds.from_env()``); raises
    ``SandboxUnavailable`` when a scan hits one.
    """
    permissions = intent.permissions
    if permissions.type is ProfileType.DISABLED:
        return None
    cwd = _policy_cwd(intent, host, purpose, process_cwd)
    fs = permissions.file_system
    if permissions.type is ProfileType.EXTERNAL or fs is None or not fs.restricted:
        return RuleSet(
            filesystem_restricted=False,
            network=permissions.network,
            policy_cwd=cwd,
            landlock_only=intent.use_legacy_landlock,
        )
    draft = RuleDraft(host)
    binding = Binding(intent, host, purpose, cwd, child_env or {})
    for entry in fs.entries:
        binding.add_entry(entry, draft)
    if draft.full_disk_write():
        # The reference runs ``:root = write`` with nothing narrower without any filesystem
        # confinement; so do we (only the network part applies).
        return RuleSet(
            filesystem_restricted=False,
            network=permissions.network,
            policy_cwd=cwd,
            landlock_only=intent.use_legacy_landlock,
            notes=tuple(draft.notes),
        )
    expand_deny_globs(draft, fs.glob_scan_max_depth, glob_bounds or GlobBounds.from_env())
    refuse_planted_symlinks(draft, intent.workspace_roots)
    pin_workspace_roots(draft, intent.workspace_roots)
    protect_names(draft, (*PROTECTED_NAMES, *fs.protected_names))
    hide_executor_state(draft)
    return RuleSet(
        filesystem_restricted=True,
        rules=draft.finish(),
        deny_globs=tuple(draft.deny_globs),
        network=permissions.network,
        policy_cwd=cwd,
        landlock_only=intent.use_legacy_landlock,
        pinned=tuple(sorted(draft.pinned)),
        notes=tuple(draft.notes),
    )
