"""The policy-author and operator commands' options: ``profile``, ``run``, ``backends``,
``doctor`` (their work is in ``executor.commands``)."""

from __future__ import annotations

import argparse

__all__ = ["add_policy_commands"]


def _add_workspace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workspace",
        action="append",
        metavar="DIR",
        help="a workspace root (what :workspace_roots binds to); repeatable",
    )
    parser.add_argument(
        "--cwd",
        metavar="DIR",
        help="policy and command directory (default: the first workspace, else the current"
        " directory)",
    )


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON document on stdout, for scripts (stable keys: docs/profiles.md)",
    )


def add_policy_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    profile = commands.add_parser(
        "profile",
        help="list, check and explain sandbox profiles",
        description="Sandbox profiles for policy authors: the shipped ones, then those in "
        "EXECUTOR_PROFILES_DIR. The format: docs/profiles.md.",
    )
    actions = profile.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list",
        help="every profile with its source and description",
        description="Every profile: its name, its source (shipped, or the file it is read "
        "from) and its description. A profile file that does not load is named on stderr "
        "with the file and key at fault, and the others are listed all the same.",
        epilog="Exit status: 0 when every profile loads, 1 when one or more do not (the list "
        "of the others is complete).",
    )
    _add_json(listing)
    check = actions.add_parser(
        "check",
        help="validate a profile file",
        description="Validate a profile file against the profile schema "
        "(executor/sandbox/profile.schema.json) and compile it, with what it extends; every "
        "problem is listed on stderr, each naming the file and the key.",
        epilog="Exit status: 0 when the file is valid, 2 when it has problems.",
    )
    check.add_argument("file", help="path to a profile .toml file")
    actions.add_parser(
        "schema",
        help="print the JSON Schema of profile files (for editors)",
        description="Print the JSON Schema that `profile check` validates against, for "
        "editors and other tools (docs/profiles.md, 'Editors').",
    )
    explain = actions.add_parser(
        "explain",
        help="the materialized rules of a profile on this host",
        description="What a profile means on this host: each path with its access and why, "
        "the network, the limits, what path-based masking cannot hide, and which backend "
        "would enforce it.",
        epilog="Exit status: 0 when this host enforces the profile (or it has no sandbox), 1 "
        "when this host would refuse it (the reason is printed), 2 when the profile does not "
        "load.",
    )
    explain.add_argument(
        "name",
        metavar="PROFILE",
        help="a profile name (see `executor profile list`) or the path of a .toml file",
    )
    _add_workspace(explain)
    explain.add_argument(
        "--network", choices=["on", "off"], help="override the profile's network setting"
    )
    _add_json(explain)

    run = commands.add_parser(
        "run",
        help="run a command locally under a profile, exactly as the daemon would",
        description="Run ARGV under a sandbox profile. The exit code is the command's; when the "
        "sandbox probably denied something, one line on stderr says so and what the guess "
        'went by (a heuristic: exit code and words such as "Permission denied" in the '
        "output).",
        epilog="Environment: the command gets yours, except variables whose names look like "
        "secrets (*KEY*, *SECRET*, *TOKEN*, any case; the daemon's default excludes for an "
        "envPolicy) — pass one with --env NAME, all with --inherit-env. --clearenv starts "
        "from nothing, not even PATH (the program is still looked up on yours). "
        "Exit status: the command's; 125 when it could not be started (the message names "
        "the program, directory or sandbox layer at fault) or the sandbox cannot be "
        "enforced here; 2 for a usage error or a profile that does not load.",
    )
    run.add_argument(
        "--profile",
        required=True,
        metavar="PROFILE",
        help="a profile name (see `executor profile list`), or the path of a .toml file (its "
        "extends resolve against the profiles and its own directory)",
    )
    _add_workspace(run)
    run.add_argument(
        "--network", choices=["on", "off"], help="override the profile's network setting"
    )
    run.add_argument(
        "--shared-loopback",
        action="store_true",
        help="with the full network, let the command reach this host's loopback services "
        "(otherwise they are unreachable but the profile's local_ports, and where that cannot "
        "be enforced the command is refused)",
    )
    run.add_argument(
        "--env",
        action="append",
        metavar="NAME[=VALUE]",
        help="set NAME in the command's environment; NAME alone copies yours (secret-looking "
        "or not; left unset if you have none); repeatable",
    )
    environment = run.add_mutually_exclusive_group()
    environment.add_argument(
        "--clearenv",
        action="store_true",
        help="start the command's environment empty (no PATH either): only --env variables",
    )
    environment.add_argument(
        "--inherit-env",
        action="store_true",
        help="pass your whole environment, secret-looking variables included",
    )
    run.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="print the backend and what it enforces, and the variables left out, before running",
    )
    run.add_argument(
        "--tty",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="give the command a terminal of its own (default: when stdin and stdout are one)",
    )
    run.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the command and its arguments")

    backends = commands.add_parser(
        "backends",
        help="discovered sandbox backends and what each enforces here",
        description="The sandbox plugins found (entry-point group executor.sandbox), each "
        "backend with what it enforces on this host, and which one is selected (*): for a "
        "restricted filesystem, or with --profile for that profile, as `run` and the daemon "
        "would select it.",
        epilog="Exit status: 0; 1 when --profile names a profile this host cannot enforce "
        "(the reason is printed); 2 when the profile does not load.",
    )
    backends.add_argument(
        "--profile",
        metavar="PROFILE",
        help="mark the backend this profile would use (a name, or the path of a .toml file)",
    )
    _add_workspace(backends)
    _add_json(backends)
    doctor = commands.add_parser(
        "doctor",
        help="host facts; can each profile be enforced here?",
        description="Host facts, the backends' probes, and for each profile (shipped and "
        "EXECUTOR_PROFILES_DIR) whether this host enforces it fully. A profile file that "
        "does not load is named on stderr; the report covers the others all the same.",
        epilog="Exit status: 0 when every profile loads and is enforced here (or has no "
        "sandbox by design), 1 otherwise.",
    )
    doctor.add_argument(
        "--workspace", action="append", metavar="DIR", help="workspace to evaluate profiles against"
    )
    _add_json(doctor)
