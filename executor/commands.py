"""The policy-author and operator commands: ``profile``, ``run``, ``backends``, ``doctor``."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from dataclasses import replace
from pathlib import Path

from executor.errors import ProfileError, SandboxUnavailable
from executor.protocol.intent import Access
from executor.sandbox.api import BackendStatus, Command, HostInfo, SandboxBackend
from executor.sandbox.globscan import MAX_SCAN_DEPTH
from executor.sandbox.host import LocalHost, ensure_state_directory
from executor.sandbox.limits import default_limits
from executor.sandbox.manager import SandboxManager, blocked_from_env, get_plugin_manager
from executor.sandbox.materialize import materialize
from executor.sandbox.profiles import Profile, ProfileLibrary, default_library, load_file
from executor.sandbox.purpose import Purpose
from executor.sandbox.rules import RuleOrigin, RuleSet
from executor.spawn.spawner import native_launcher

__all__ = ["backends", "doctor", "profile_check", "profile_explain", "profile_list", "run"]


def _manager() -> SandboxManager:
    return SandboxManager(get_plugin_manager(blocked_from_env()))


def _roots(args: argparse.Namespace) -> tuple[str, ...]:
    # Absolute, but not resolved: the core resolves symlinks itself and refuses one that a
    # sandboxed command could have planted, which it could not see in a resolved path.
    return tuple(os.path.abspath(path) for path in (args.workspace or []))


def profile_list(args: argparse.Namespace) -> int:
    """Print every profile with its description."""
    library = default_library()
    width = max((len(name) for name in library.names()), default=0)
    for profile in library:
        print(f"{profile.name:<{width}}  {profile.description}")
    return 0


def profile_check(args: argparse.Namespace) -> int:
    """Validate one profile file (and what it extends); exit 1 on the first error."""
    path = Path(args.file)
    library = ProfileLibrary([*[Path(d) for d in _library_dirs()], path.parent])
    profile = library.compile(load_file(path))
    print(f"{path}: ok ({profile.name}: {profile.description or 'no description'})")
    return 0


def _library_dirs() -> list[str]:
    from executor.sandbox.profiles import shipped_directory

    return [str(shipped_directory())]


def _rules_for(
    profile: Profile, roots: tuple[str, ...], cwd: str, network: bool | None
) -> RuleSet | None:
    intent = profile.intent(workspace_roots=roots, cwd=cwd, network=network)
    host = LocalHost(hidden_paths=(ensure_state_directory(),), cwd=cwd)
    rules = materialize(
        intent, host, purpose=Purpose.PROCESS, process_cwd=cwd, child_env=dict(os.environ)
    )
    return None if rules is None else replace(rules, limits=profile.limits)


def profile_explain(args: argparse.Namespace) -> int:
    """Print the materialized rules of a profile on this host, and who enforces them."""
    profile = default_library().get(args.name)
    roots = _roots(args)
    cwd = os.path.realpath(args.cwd or (roots[0] if roots else os.getcwd()))
    rules = _rules_for(profile, roots, cwd, _network(args))
    print(f"profile {profile.name} ({profile.source})")
    if rules is None:
        print("sandbox: disabled (the command runs unconfined; sandboxType none)")
        return 0
    print(f"policy cwd: {rules.policy_cwd}")
    print(f"network: {rules.network}")
    print(f"limits: {rules.limits.summary()}")
    if not rules.filesystem_restricted:
        print("filesystem: unrestricted")
    else:
        print("filesystem (most specific rule wins; anything not listed is denied):")
        width = max(len(rule.path) for rule in rules.rules) if rules.rules else 0
        for rule in rules.rules:
            print(
                f"  {rule.path:<{width}}  {rule.access:<5}  {rule.origin}"
                + ("  (does not exist yet)" if rule.kind == "missing" else "")
            )
        for glob in rules.deny_globs:
            print(f"  deny glob: {glob}")
        for pin in rules.pinned:
            print(f"  pinned (cannot be moved, removed or replaced): {pin}")
    for note in (*rules.notes, *_path_limits(profile, rules)):
        print(f"note: {note}")
    print(f"needs: {', '.join(sorted(rules.needs)) or 'nothing'}")
    _explain_backend(_manager(), rules)
    return 0


def _path_limits(profile: Profile, rules: RuleSet) -> tuple[str, ...]:
    """What the profile's deny rules cannot hide from a command (docs/sandbox.md)."""
    denies = any(
        rule.access is Access.DENY and rule.origin is not RuleOrigin.EXECUTOR_STATE
        for rule in rules.rules
    )
    if not denies and not rules.deny_globs:
        return ()
    fs = profile.permissions.file_system
    # Without a depth of its own the scan covers every level or refuses the launch.
    depth = fs.glob_scan_max_depth if fs else None
    deeper = f"deeper than {depth} levels or " if depth and depth <= MAX_SCAN_DEPTH else ""
    globs = (
        f", and deny-glob matches {deeper}created while it runs are not masked"
        if rules.deny_globs
        else ""
    )
    return (
        "deny rules mask paths, not files: a command can still read a denied file through a"
        f" hard link elsewhere{globs}; fs/* calls check content by identity (docs/sandbox.md,"
        " 'What path rules cannot see')",
    )


def _explain_backend(manager: SandboxManager, rules: RuleSet) -> None:
    try:
        backend = manager.select(rules)
    except SandboxUnavailable as exc:
        print(f"enforcement: REFUSED here — {exc.message}")
        return
    from executor.sandbox.api import Command

    probe = Command(executable="/bin/true", argv=("true",), env={}, cwd=rules.policy_cwd, tty=False)
    try:
        plan = manager.prepare(backend, rules, probe)
    except SandboxUnavailable as exc:
        print(f"enforcement: REFUSED by {backend.name} — {exc.message}")
        return
    if plan.release is not None:
        plan.release()
    print(f"enforcement: {backend.name} backend, sandboxType {plan.sandbox_type.value}")
    print(f"layers: {plan.report.summary()}")


def _network(args: argparse.Namespace) -> bool | None:
    value = getattr(args, "network", None)
    return None if value is None else value == "on"


def run(args: argparse.Namespace) -> int:
    """Run a command locally under a profile; its exit code is ours."""
    from executor.runner import RunRequest, run_command

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("executor run: give the command after --", file=sys.stderr)
        return 2
    roots = _roots(args)
    cwd = os.path.realpath(args.cwd or (roots[0] if roots else os.getcwd()))
    request = RunRequest(
        profile=default_library().get(args.profile),
        argv=tuple(argv),
        workspace_roots=roots,
        cwd=cwd,
        network=_network(args),
        verbose=args.verbose,
        tty=args.tty if args.tty is not None else sys.stdin.isatty() and sys.stdout.isatty(),
    )
    return asyncio.run(run_command(request))


def _status_line(
    backend: SandboxBackend, status: BackendStatus, selected: SandboxBackend | None
) -> str:
    mark = "*" if backend is selected else " "
    state = "available" if status.available else f"unavailable: {status.reason}"
    return f"{mark} {backend.name:<10} {type(backend).__module__:<28} {state}"


def backends(args: argparse.Namespace) -> int:
    """List discovered backends, which one is selected, and what each enforces here."""
    manager = _manager()
    plugins = [
        name
        for name, plugin in manager.pm.list_name_plugin()
        if plugin is not None and name != "executor-defaults"
    ]
    print(f"plugins (entry-point group executor.sandbox): {', '.join(plugins) or 'none'}")
    blocked = blocked_from_env()
    if blocked:
        print(f"blocked: {', '.join(blocked)}")
    probe_rules = RuleSet(filesystem_restricted=True)
    selected = manager.pm.hook.executor_select_backend(
        rules=probe_rules, host=manager.host, candidates=manager.candidates
    )
    for backend, status in manager.candidates:
        print(_status_line(backend, status, selected))
        if status.available:
            print(f"    enforces: {', '.join(sorted(status.features)) or 'nothing'}")
            for feature, reason in sorted(status.missing.items()):
                print(f"    cannot enforce {feature}: {reason}")
        for key, value in sorted(status.details.items()):
            print(f"    {key}: {value}")
    return 0


def doctor(args: argparse.Namespace) -> int:
    """Host facts and, for each shipped profile, whether this host enforces it fully."""
    host = HostInfo.current()
    print(
        f"host: {host.platform} {host.release} {host.machine}, uid {host.uid}"
        + (" (root)" if host.uid == 0 else "")
    )
    launcher = native_launcher()
    print(
        f"launcher: native ({launcher})"
        if launcher is not None
        else "launcher: python (the native launcher is not built or is turned off; "
        "commands start ~1.5 ms slower)"
    )
    manager = _manager()
    for backend, status in manager.candidates:
        if status.available:
            for key, value in sorted(status.details.items()):
                print(f"{backend.name}.{key}: {value}")
    print(
        f"limits of every sandboxed command: {default_limits().summary()}"
        " (the daemon's defaults; `serve --limit` changes them, profiles set their own)"
    )
    workspace = os.path.realpath(args.workspace[0]) if args.workspace else os.getcwd()
    failures = 0
    for profile in default_library():
        try:
            rules = _rules_for(profile, (workspace,), workspace, None)
            if rules is None:
                print(f"profile {profile.name}: no sandbox (by design)")
                continue
            backend = manager.select(rules)
            plan = manager.prepare(backend, rules, _probe_command(workspace))
            if plan.release is not None:
                plan.release()
            print(f"profile {profile.name}: enforced by {backend.name} — {plan.report.summary()}")
        except (SandboxUnavailable, ProfileError) as exc:
            failures += 1
            print(f"profile {profile.name}: NOT ENFORCEABLE — {exc.message}")
    return 1 if failures else 0


def _probe_command(cwd: str) -> Command:
    return Command(executable="/bin/true", argv=("true",), env={}, cwd=cwd, tty=False)
