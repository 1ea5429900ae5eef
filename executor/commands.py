"""The policy-author and operator commands: ``profile``, ``run``, ``backends``, ``doctor``."""

from __future__ import annotations

import argparse
import asyncio
import errno
import functools
import json
import os
import stat
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from executor.errors import InternalError, ProfileError, SandboxUnavailable
from executor.netproxy.netns import NetNamespace
from executor.netproxy.netns import available as netns_available
from executor.process.network import network_rules
from executor.sandbox.api import BackendStatus, HostInfo, SandboxBackend
from executor.sandbox.host import LocalHost, ensure_state_directory
from executor.sandbox.limits import default_limits
from executor.sandbox.manager import (
    BrokenPlugin,
    SandboxManager,
    blocked_from_env,
    get_plugin_manager,
)
from executor.sandbox.materialize import materialize
from executor.sandbox.network import NetworkAccess, NetworkPolicy, NetworkRoute
from executor.sandbox.profile_report import enforcement, explain, explain_lines, limits_json
from executor.sandbox.profile_report import summary as profile_summary
from executor.sandbox.profiles import (
    InvalidProfile,
    Problem,
    Profile,
    default_library,
    load_profile,
)
from executor.sandbox.purpose import Purpose
from executor.sandbox.rules import RuleSet
from executor.spawn.spawner import native_launcher, native_slots, native_spec_version

__all__ = [
    "backends",
    "doctor",
    "profile_check",
    "profile_explain",
    "profile_list",
    "profile_schema",
    "run",
]


def _manager(broken: list[BrokenPlugin] | None = None) -> SandboxManager:
    """The plugins as the daemon loads them; with ``broken``, a plugin that fails to load is
    recorded there and left out instead of stopping everything (for the diagnosis commands)."""
    return SandboxManager(get_plugin_manager(blocked_from_env(), broken=broken))


def _report_broken_plugins(broken: list[BrokenPlugin]) -> list[dict[str, str]]:
    """Say on stderr which plugins failed to load; them as JSON values."""
    for plugin in broken:
        print(f"executor: {plugin.message}", file=sys.stderr)
    return [{"name": p.name, "module": p.module, "error": p.message} for p in broken]


def _roots(args: argparse.Namespace) -> tuple[str, ...]:
    # Absolute, but not resolved: the core resolves symlinks itself and refuses one that a
    # sandboxed command could have planted, which it could not see in a resolved path.
    return tuple(os.path.abspath(path) for path in (args.workspace or []))


def _emit(data: dict[str, Any]) -> None:
    """``--json`` output: one JSON document on stdout (keys: docs/profiles.md)."""
    print(json.dumps(data, indent=2, ensure_ascii=False))


def _report_broken(name: str, path: Path, error: ProfileError) -> list[dict[str, str]]:
    """Say on stderr why profile ``name`` was left out; the problems as JSON values."""
    problems = (
        error.problems
        if isinstance(error, InvalidProfile)
        else (Problem(str(path), "", error.message),)
    )
    for problem in problems:
        print(f"executor: profile {name} not loaded: {problem}", file=sys.stderr)
    return [{"file": p.source, "key": p.key, "message": p.message} for p in problems]


def profile_list(args: argparse.Namespace) -> int:
    """Print every profile with where it comes from and its description; name the broken
    ones on stderr and exit 1 when there are any (the list is complete either way)."""
    library = default_library()
    profiles, errors = library.load_all()
    rows = [profile_summary(profile) for profile in profiles]
    broken = [
        {
            "name": name,
            "path": str(library.path(name)),
            "problems": _report_broken(name, library.path(name), error),
        }
        for name, error in errors.items()
    ]
    if args.json:
        _emit({"profiles": rows, "errors": broken})
    else:
        width = max((len(row["name"]) for row in rows), default=0)
        source_width = max((len(row["source"]) for row in rows), default=0)
        for row in rows:
            print(f"{row['name']:<{width}}  {row['source']:<{source_width}}  {row['description']}")
    return 1 if errors else 0


def profile_check(args: argparse.Namespace) -> int:
    """Validate one profile file (and what it extends) against the schema and the compiler;
    list every problem, exit 2 when there are any."""
    from executor.sandbox.profile_schema import check_file

    path = Path(args.file)
    profile, problems = check_file(default_library(extra=[path.parent]), path)
    for problem in problems:
        print(problem, file=sys.stderr)
    if profile is None:
        print(f"{path}: {len(problems)} problem(s)", file=sys.stderr)
        return 2
    print(f"{path}: ok ({profile.name}: {profile.description or 'no description'})")
    return 0


def profile_schema(args: argparse.Namespace) -> int:
    """Print the JSON Schema of profile files."""
    from executor.sandbox.profile_schema import schema

    _emit(schema())
    return 0


def _rules_for(
    profile: Profile, roots: tuple[str, ...], cwd: str, network: bool | None
) -> RuleSet | None:
    intent = profile.intent(workspace_roots=roots, cwd=cwd, network=network)
    host = LocalHost(hidden_paths=(ensure_state_directory(),), cwd=cwd)
    rules = materialize(
        intent, host, purpose=Purpose.PROCESS, process_cwd=cwd, child_env=dict(os.environ)
    )
    if rules is None:
        return None
    policy = profile.network_policy(network)
    route = _trial_route(policy) if policy.mode is NetworkAccess.PROXY else None
    return network_rules(replace(rules, limits=profile.limits), policy, route=route)


#: The proxy's port is chosen when a command starts; any port plans the same.
_TRIAL_PORT = 1


@functools.cache
def _trial_namespace() -> NetNamespace:
    """A private network namespace to plan proxy mode against, as a session would make it
    (held until this command exits)."""
    return NetNamespace()


def _trial_route(policy: NetworkPolicy) -> NetworkRoute:
    """The route a proxied command would get, for ``explain`` and ``doctor`` (no proxy runs:
    planning needs the namespace, not the proxy). ``SandboxUnavailable`` where none can be
    made, as ``process/start`` would refuse it."""
    linux = sys.platform.startswith("linux")  # a variable: the other branch is macOS's
    if linux:
        reason = netns_available()
        if reason is not None:
            raise SandboxUnavailable(
                f"proxied networking needs a private network namespace, and {reason}"
            )
        namespace = _trial_namespace()
        return NetworkRoute(
            ports=(_TRIAL_PORT, *policy.local_ports),
            netns_path=namespace.path,
            netns_inode=namespace.inode,
            local_binding=policy.local_binding,
        )
    return NetworkRoute(
        ports=(_TRIAL_PORT, *policy.local_ports), local_binding=policy.local_binding
    )


def profile_explain(args: argparse.Namespace) -> int:
    """Print the materialized rules of a profile on this host, and who enforces them; exit 1
    when this host would refuse it."""
    profile = load_profile(args.name)
    roots = _roots(args)
    cwd = os.path.realpath(args.cwd or (roots[0] if roots else os.getcwd()))
    rules = _rules_for(profile, roots, cwd, _network(args))
    report = explain(profile, rules, _manager())
    if args.json:
        _emit(report)
    else:
        print("\n".join(explain_lines(report)))
    return 0 if report["enforcement"]["enforceable"] else 1


def _network(args: argparse.Namespace) -> bool | None:
    value = getattr(args, "network", None)
    return None if value is None else value == "on"


def _directory(option: str, path: str) -> None:
    """Refuse a ``--cwd``/``--workspace`` that is not a directory, naming the option: the
    launch would only report the bare OS error (exit 125, like any launch failure)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise InternalError(f"{option} {path}: {exc.strerror}") from None
    if not stat.S_ISDIR(mode):
        raise InternalError(f"{option} {path}: {os.strerror(errno.ENOTDIR)}")


def run(args: argparse.Namespace) -> int:
    """Run a command locally under a profile; its exit code is ours."""
    from executor.runner import RunRequest, child_environment, run_command

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("executor run: give the command after --", file=sys.stderr)
        return 2
    profile = load_profile(args.profile)
    for path in args.workspace or []:
        _directory("--workspace", path)
    if args.cwd:
        _directory("--cwd", args.cwd)
    roots = _roots(args)
    cwd = os.path.realpath(args.cwd or (roots[0] if roots else os.getcwd()))
    env = child_environment(
        os.environ, args.env or [], clear=args.clearenv, inherit=args.inherit_env
    )
    request = RunRequest(
        profile=profile,
        argv=tuple(argv),
        workspace_roots=roots,
        cwd=cwd,
        env=env,
        network=_network(args),
        shared_loopback=args.shared_loopback,
        verbose=args.verbose,
        tty=args.tty if args.tty is not None else sys.stdin.isatty() and sys.stdout.isatty(),
    )
    return asyncio.run(run_command(request))


def _backend_json(
    backend: SandboxBackend, status: BackendStatus, selected: SandboxBackend | None
) -> dict[str, Any]:
    return {
        "name": backend.name,
        "module": type(backend).__module__,
        "selected": backend is selected,
        "available": status.available,
        "reason": status.reason or None,
        "features": sorted(str(feature) for feature in status.features),
        "missing": {str(feature): reason for feature, reason in sorted(status.missing.items())},
        "details": {key: str(value) for key, value in sorted(status.details.items())},
    }


def _selection(
    manager: SandboxManager, args: argparse.Namespace
) -> tuple[SandboxBackend | None, str | None, bool]:
    """The backend selected, why there is none, and whether that is a refusal: for
    ``--profile``, as ``run`` and the daemon select for it; without, what the selection
    hooks pick for a restricted filesystem."""
    if args.profile is None:
        chosen: SandboxBackend | None = manager.pm.hook.executor_select_backend(
            rules=RuleSet(filesystem_restricted=True),
            host=manager.host,
            candidates=manager.candidates,
        )
        return chosen, None, False
    profile = load_profile(args.profile)
    roots = _roots(args)
    cwd = os.path.realpath(args.cwd or (roots[0] if roots else os.getcwd()))
    try:
        rules = _rules_for(profile, roots, cwd, None)
        if rules is None:
            return None, "no sandbox (type disabled): no backend is used", False
        return manager.select(rules), None, False
    except SandboxUnavailable as exc:
        return None, exc.message, True


def backends(args: argparse.Namespace) -> int:
    """List discovered backends, which one is selected (for ``--profile``: the one that
    profile would use), and what each enforces here. A plugin that fails to load is named on
    stderr and in the list (the daemon would refuse to start); the exit status is then 1."""
    broken: list[BrokenPlugin] = []
    manager = _manager(broken)
    broken_rows = _report_broken_plugins(broken)
    plugins = [
        name
        for name, plugin in manager.pm.list_name_plugin()
        if plugin is not None and name != "executor-defaults"
    ]
    selected, why_none, refused = _selection(manager, args)
    found = [_backend_json(backend, status, selected) for backend, status in manager.candidates]
    if args.json:
        blocked = list(blocked_from_env())
        chosen = selected.name if selected is not None else None
        _emit(
            {
                "plugins": plugins,
                "blocked": blocked,
                "profile": args.profile,
                "selected": chosen,
                "reason": why_none,
                "backends": found,
                "broken": broken_rows,
            }
        )
        return 1 if refused or broken else 0
    print(f"plugins (entry-point group executor.sandbox): {', '.join(plugins) or 'none'}")
    for plugin in broken:
        print(f"BROKEN: {plugin.name} ({plugin.module}) failed to load, on stderr")
    if blocked_from_env():
        print(f"blocked: {', '.join(blocked_from_env())}")
    for row in found:
        mark = "*" if row["selected"] else " "
        state = "available" if row["available"] else f"unavailable: {row['reason']}"
        print(f"{mark} {row['name']:<10} {row['module']:<28} {state}")
        if row["available"]:
            print(f"    enforces: {', '.join(row['features']) or 'nothing'}")
            for feature, reason in row["missing"].items():
                print(f"    cannot enforce {feature}: {reason}")
        for key, value in row["details"].items():
            print(f"    {key}: {value}")
    if args.profile is None:
        print("*: selected for a restricted filesystem (--profile NAME: for one profile)")
    elif selected is not None:
        print(f"*: selected for profile {args.profile}")
    else:
        print(f"profile {args.profile}: {'REFUSED — ' if refused else ''}{why_none}")
    return 1 if refused or broken else 0


def _doctor_row(name: str, source: str) -> dict[str, Any]:
    """Every key a profile's row in ``doctor --json`` has, whatever its status."""
    keys = ("backend", "layers", "reason")
    return {"name": name, "source": source, "status": None} | dict.fromkeys(keys) | {"problems": []}


def _doctor_profile(manager: SandboxManager, profile: Profile, workspace: str) -> dict[str, Any]:
    row = _doctor_row(profile.name, profile_summary(profile)["source"])
    try:
        rules = _rules_for(profile, (workspace,), workspace, None)
    except (SandboxUnavailable, ProfileError) as exc:
        return row | {"status": "not-enforceable", "reason": exc.message}
    if rules is None:
        return row | {"status": "unsandboxed"}
    found = enforcement(manager, rules)
    if not found["enforceable"]:
        return row | {"status": "not-enforceable", "reason": found["reason"]}
    return row | {"status": "enforced", "backend": found["backend"], "layers": found["layers"]}


def doctor(args: argparse.Namespace) -> int:
    """Host facts and, for each profile, whether this host enforces it fully; exit 1 when one
    cannot be enforced or does not load (named on stderr; the report is complete)."""
    host = HostInfo.current()
    launcher = native_launcher()
    spec_version = native_spec_version()
    kept = native_slots()
    broken: list[BrokenPlugin] = []
    manager = _manager(broken)
    broken_rows = _report_broken_plugins(broken)
    details = {
        backend.name: {key: str(value) for key, value in sorted(status.details.items())}
        for backend, status in manager.candidates
        if status.available
    }
    workspace = os.path.realpath(args.workspace[0]) if args.workspace else os.getcwd()
    library = default_library()
    profiles, errors = library.load_all()
    rows = [_doctor_profile(manager, profile, workspace) for profile in profiles]
    for name, error in errors.items():
        source = "shipped" if library.is_shipped(name) else str(library.path(name))
        problems = _report_broken(name, library.path(name), error)
        rows.append(_doctor_row(name, source) | {"status": "invalid", "problems": problems})
    rows.sort(key=lambda row: str(row["name"]))
    ok = not broken and all(row["status"] in ("enforced", "unsandboxed") for row in rows)
    if args.json:
        _emit(
            {
                "ok": ok,
                "host": {
                    "platform": host.platform,
                    "release": host.release,
                    "machine": host.machine,
                    "uid": host.uid,
                },
                "launcher": {
                    "kind": "native" if launcher is not None else "python",
                    "path": None if launcher is None else str(launcher),
                    "sandbox": "native" if spec_version else "python",
                    "sandbox_spec": spec_version or None,
                    "kept_supervisors": kept,
                },
                "backends": details,
                "broken_plugins": broken_rows,
                "default_limits": limits_json(default_limits()),
                "workspace": workspace,
                "profiles": rows,
            }
        )
        return 0 if ok else 1
    print(
        f"host: {host.platform} {host.release} {host.machine}, uid {host.uid}"
        + (" (root)" if host.uid == 0 else "")
    )
    print(
        f"launcher: native ({launcher}; keeps up to {kept} idle supervisors of plain commands"
        " for reuse)"
        if launcher is not None
        else "launcher: python (the native launcher is not built or is turned off; "
        "commands start ~1.5 ms slower)"
    )
    print(
        f"sandbox layers applied by: native launcher (sandbox spec {spec_version})"
        if spec_version
        else "sandbox layers applied by: python launcher (EXECUTOR_SANDBOX_LAUNCH=python, or "
        "the native launcher is not built or predates sandbox specs)"
    )
    for name, values in details.items():
        for key, value in values.items():
            print(f"{name}.{key}: {value}")
    for plugin in broken:
        print(
            f"sandbox plugin {plugin.name}: BROKEN — fails to load (on stderr); the daemon"
            " will not start until it is fixed, uninstalled or blocked"
        )
    print(
        f"limits of every sandboxed command: {default_limits().summary()}"
        " (the daemon's defaults; `serve --limit` changes them, profiles set their own)"
    )
    for row in rows:
        print(f"profile {row['name']}: {_doctor_verdict(row)}")
    return 0 if ok else 1


def _doctor_verdict(row: dict[str, Any]) -> str:
    if row["status"] == "enforced":
        return f"enforced by {row['backend']} — {row['layers']}"
    if row["status"] == "unsandboxed":
        return "no sandbox (by design)"
    if row["status"] == "invalid":
        return f"INVALID — {len(row['problems'])} problem(s), on stderr"
    return f"NOT ENFORCEABLE — {row['reason']}"
