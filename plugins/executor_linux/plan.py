"""Rule set -> what the launcher does on this host: mounts, Landlock grants, placeholders (pure).

Two layers enforce the filesystem rules, each doing what it can express:

* **Landlock** grants read or full rights on the allowed trees. It cannot narrow inside a
  granted tree, so a read-only ``.git`` inside a writable workspace, or a denied directory
  inside a readable ``/``, needs the mount layer.
* **Mounts** (in a private mount namespace): everything read-only, writable roots bound
  read-write, read-only carve-outs bound read-only, denied directories masked with an empty
  mode-000 tmpfs, denied files with an empty mode-000 file, placeholders for protected names
  that do not exist yet, a fresh ``/proc`` and a private ``/dev/shm``.

The launcher applies the mounts first, then Landlock; either layer alone would still stop
what it can express. Without namespaces, the plan has no mounts, and the core refuses any
rule set that needs them (``Feature.CARVE_OUT``, ``Feature.MISSING_PATH_PROTECTION``).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field

from executor.errors import SandboxUnavailable
from executor.sandbox import Access, NetworkMode, PathKind, PathRule, RuleOrigin, RuleSet
from executor_linux import landlock
from executor_linux.launch_spec import LandlockRules, Mounts

__all__ = ["DEVICE_GRANTS", "LandlockPlan", "MountPlan", "landlock_plan", "mount_plan"]

_RW_FILE = landlock.READ_FILE | landlock.WRITE_FILE | landlock.TRUNCATE
_R_FILE = landlock.READ_FILE
#: Devices every command needs, whatever the profile (granted to Landlock when they exist).
DEVICE_GRANTS: tuple[tuple[str, int], ...] = (
    ("/dev/null", _RW_FILE),
    ("/dev/zero", _R_FILE),
    ("/dev/full", _RW_FILE),
    ("/dev/random", _R_FILE),
    ("/dev/urandom", _R_FILE),
    ("/dev/tty", _RW_FILE),
    ("/dev/ptmx", _RW_FILE),
    ("/dev/pts", _RW_FILE | landlock.READ_DIR),
    ("/dev/console", _RW_FILE),  # the command's own terminal in the private /dev
)


_HOST_SAFE_DEVICES = tuple(
    grant for grant in DEVICE_GRANTS if grant[0] not in ("/dev/ptmx", "/dev/pts", "/dev/console")
)


@dataclass(frozen=True, slots=True, kw_only=True)
class MountPlan:
    """Mount operations, in order, and the host placeholders they need."""

    #: Make every existing mount read-only first (the root is not writable).
    readonly_root: bool
    #: ``(op, path)`` with op one of ``rw``, ``ro``, ``mask_dir``, ``mask_file``.
    operations: tuple[tuple[str, str], ...]
    #: Directories the daemon creates on the host before launch (and removes after).
    placeholders: tuple[str, ...] = ()
    private_shm: bool = True
    #: Replace ``/dev`` with a minimal one (standard devices, a private devpts and ``/dev/shm``).
    private_dev: bool = True

    def to_spec(self, staging: str) -> Mounts:
        """What the launcher mounts (``staging``: where it mounts its private tmpfs)."""
        return Mounts(
            staging=staging,
            readonly_root=self.readonly_root,
            operations=self.operations,
            private_shm=self.private_shm,
            private_dev=self.private_dev,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LandlockPlan:
    """A Landlock ruleset: handled rights, scopes, and the grants."""

    abi: int
    fs: int
    net: int
    scoped: int
    grants: tuple[tuple[str, int], ...] = field(default=())

    def to_spec(self) -> LandlockRules:
        """What the launcher enforces."""
        return LandlockRules(fs=self.fs, net=self.net, scoped=self.scoped, grants=self.grants)

    def describe(self) -> str:
        """What this ruleset enforces, for reports."""
        parts = []
        if self.fs:
            parts.append("filesystem")
        if self.net:
            parts.append("tcp")
        if self.scoped & landlock.SCOPE_SIGNAL:
            parts.append("signal-scope")
        if self.scoped & landlock.SCOPE_ABSTRACT_UNIX_SOCKET:
            parts.append("abstract-unix-scope")
        return f"abi {self.abi}: " + ", ".join(parts)


def _parent_access(rules: RuleSet, rule: PathRule) -> Access:
    parent = rules.parent_rule(rule)
    return Access.DENY if parent is None else parent.access


def _depth_order(rules: RuleSet) -> list[PathRule]:
    ordered = sorted(rules.rules, key=lambda r: (0 if r.path == "/" else r.path.count("/"), r.path))
    # The executor's own state is hidden last: the staging area for masks lives inside it.
    return [r for r in ordered if r.origin is not RuleOrigin.EXECUTOR_STATE] + [
        r for r in ordered if r.origin is RuleOrigin.EXECUTOR_STATE
    ]


def mount_plan(rules: RuleSet) -> MountPlan:
    """The mounts that enforce ``rules`` in a private mount namespace."""
    operations: list[tuple[str, str]] = []
    placeholders: list[str] = []
    for rule in _depth_order(rules):
        if rule.path == "/":
            continue
        parent = _parent_access(rules, rule)
        _check_reachable(rules, rule, parent)
        missing = rule.kind is PathKind.MISSING
        if rule.access is Access.WRITE and not missing:
            operations.append(("rw", rule.path))
        elif rule.access is Access.READ and parent is Access.WRITE:
            # Every mount point inside a writable tree goes through the placeholder registry,
            # existing or not: what "exists" may be another command's placeholder, which must
            # not be removed while this command still mounts over it.
            placeholders.append(rule.path)
            operations.append(("ro", rule.path))
        elif rule.access is Access.DENY and parent is not Access.DENY:
            if missing and parent is not Access.WRITE:
                continue  # a read-only parent cannot gain it anyway
            if parent is Access.WRITE:
                placeholders.append(rule.path)
            op = "mask_file" if rule.kind in (PathKind.FILE, PathKind.OTHER) else "mask_dir"
            operations.append((op, rule.path))
    mounted = {path for _, path in operations}
    # Pins come right after the mounts of shallower paths and before deeper ones: a pin is a
    # bind of a path onto itself, and a mount point cannot be renamed, removed or replaced.
    for pin in sorted(rules.pinned, key=lambda p: (p.count("/"), p)):
        if pin in mounted:
            continue
        at = next(
            (i for i, (_, path) in enumerate(operations) if path.count("/") > pin.count("/")),
            len(operations),
        )
        operations.insert(at, ("pin", pin))
    _check_dev(rules)
    return MountPlan(
        readonly_root=rules.access_of("/") is not Access.WRITE,
        operations=tuple(operations),
        placeholders=tuple(placeholders),
        private_shm=rules.access_of("/dev/shm") is not Access.WRITE,
    )


#: What the private ``/dev`` holds; rules may name these (and ``/dev/shm``), nothing else.
PRIVATE_DEV = frozenset(
    {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}
)


def _check_dev(rules: RuleSet) -> None:
    """A grant below ``/dev`` for a device the private ``/dev`` lacks cannot be honoured."""
    for rule in rules.rules:
        if (
            rule.access is not Access.DENY
            and rule.path.startswith("/dev/")
            and rule.path not in PRIVATE_DEV
            and not (rule.path == "/dev/shm" or rule.path.startswith("/dev/shm/"))
            and rule.path != "/dev/pts"
        ):
            raise SandboxUnavailable(
                f"the linux backend gives every command a minimal /dev; it cannot grant "
                f"{rule.path} (only {', '.join(sorted(PRIVATE_DEV))}, /dev/pts and /dev/shm)"
            )


def _check_reachable(rules: RuleSet, rule: PathRule, parent: Access) -> None:
    """A grant inside a masked directory cannot be bound back in; refuse rather than drop it."""
    if rule.access is Access.DENY or parent is not Access.DENY:
        return
    ancestor = rules.parent_rule(rule)
    if ancestor is not None and _parent_access(rules, ancestor) is not Access.DENY:
        raise SandboxUnavailable(
            f"the linux backend cannot grant {rule.path} "
            f"inside the denied directory {ancestor.path}"
        )


def landlock_plan(
    rules: RuleSet,
    abi: int,
    *,
    private_shm: bool,
    private_dev: bool = True,
    list_root: Callable[[], list[str]] = lambda: os.listdir("/"),
) -> LandlockPlan | None:
    """The Landlock ruleset for ``rules`` at ``abi`` (None when there is nothing to handle)."""
    fs = landlock.fs_rights(abi) if rules.filesystem_restricted else 0
    restricted = rules.network is NetworkMode.RESTRICTED
    net = landlock.NET_BIND_TCP | landlock.NET_CONNECT_TCP if restricted and abi >= 4 else 0
    scoped = 0
    if abi >= 6:
        # Abstract Unix sockets are scoped by network namespace: a proxied command's session
        # namespace holds only the session's own, which its commands share. Otherwise (the
        # network off, or the host's namespace) only the command's own are reachable.
        proxied = not restricted and rules.route is not None
        scoped = landlock.SCOPE_SIGNAL | (0 if proxied else landlock.SCOPE_ABSTRACT_UNIX_SOCKET)
    if not (fs or net or scoped):
        return None
    grants: list[tuple[str, int]] = []
    if fs:
        for rule in rules.rules:
            if rule.access is Access.DENY or rule.kind is PathKind.MISSING:
                continue
            if _parent_access(rules, rule) is Access.WRITE:
                continue  # Landlock cannot narrow; the mount layer makes it read-only
            grants.append(
                (rule.path, fs if rule.access is Access.WRITE else landlock.ACCESS_FS_READ)
            )
        if not private_dev:
            grants = _without_host_dev(grants, list_root)
        # Without a private /dev, /dev/pts is the host's: every terminal on the machine.
        grants.extend(DEVICE_GRANTS if private_dev else _HOST_SAFE_DEVICES)
        if private_shm:
            grants.append(("/dev/shm", fs))
    return LandlockPlan(abi=abi, fs=fs, net=net, scoped=scoped, grants=tuple(grants))


def _without_host_dev(
    grants: list[tuple[str, int]], list_root: Callable[[], list[str]]
) -> list[tuple[str, int]]:
    """Grants that reach no host device but the standard ones (no private ``/dev`` here).

    Landlock cannot carve ``/dev`` out of a grant on ``/``, so such a grant becomes one grant
    per entry of ``/`` except ``dev``, plus listing rights on ``/`` (which reach ``/dev`` for
    listing only: no device can be opened through them). ``DEVICE_GRANTS`` adds the rest.
    """
    split: list[tuple[str, int]] = []
    for path, rights in grants:
        if path == "/dev" or path.startswith("/dev/"):
            continue
        if path != "/":
            split.append((path, rights))
            continue
        split.append(("/", rights & landlock.READ_DIR))
        split.extend(
            (posixpath.join("/", name), rights) for name in sorted(list_root()) if name != "dev"
        )
    return split


def staging_dir(state_dir: str) -> str:
    """Where the launcher mounts its private staging tmpfs (inside the hidden state dir)."""
    return posixpath.join(state_dir, "staging")
