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


def add_policy_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    profile = commands.add_parser(
        "profile",
        help="list, check and explain sandbox profiles",
        description="Sandbox profiles for policy authors (sandbox_profiles/*.toml).",
    )
    actions = profile.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("list", help="every profile with its description")
    check = actions.add_parser("check", help="validate a profile file")
    check.add_argument("file", help="path to a profile .toml file")
    explain = actions.add_parser("explain", help="the materialized rules of a profile on this host")
    explain.add_argument("name", help="profile name (see `executor profile list`)")
    _add_workspace(explain)
    explain.add_argument(
        "--network", choices=["on", "off"], help="override the profile's network setting"
    )

    run = commands.add_parser(
        "run",
        help="run a command locally under a profile, exactly as the daemon would",
        description="Run ARGV under a sandbox profile. The exit code is the command's; when the "
        "sandbox denied something, one line on stderr says so.",
    )
    run.add_argument("--profile", required=True, help="profile name (see `executor profile list`)")
    _add_workspace(run)
    run.add_argument(
        "--network", choices=["on", "off"], help="override the profile's network setting"
    )
    run.add_argument(
        "--verbose", "-v", action="store_true", help="print what is enforced before running"
    )
    run.add_argument(
        "--tty",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="give the command a terminal of its own (default: when stdin and stdout are one)",
    )
    run.add_argument("argv", nargs=argparse.REMAINDER, help="-- then the command and its arguments")

    commands.add_parser("backends", help="discovered sandbox backends and what each enforces here")
    doctor = commands.add_parser(
        "doctor",
        help="host facts; can each shipped profile be enforced here?",
        description="Exits non-zero when a shipped profile cannot be fully enforced.",
    )
    doctor.add_argument(
        "--workspace", action="append", metavar="DIR", help="workspace to evaluate profiles against"
    )
