"""``executor exec``'s options, and turning them into an ``ExecRequest``
(its work is in ``executor.remote_exec``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from executor.errors import ConfigError

__all__ = ["add_exec", "exec_main"]

#: What ``--url`` may be.
_SCHEMES = ("ws://", "wss://", "stdio:")


def add_exec(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``exec`` subcommand."""
    parser = commands.add_parser(
        "exec",
        help="run a command on a remote executor (a devbox), as if it ran here",
        description="Run ARGV on the executor at --url: its stdout and stderr are yours, "
        "your stdin is its stdin (your end of input ends it), and its exit status is yours. "
        "In a terminal it gets one of its own there (yours goes raw: keys, ^C included, go "
        "through; the size follows yours). A dropped connection is ridden out: the session "
        "is resumed and the output missed is fetched again. When the executor calls a "
        "failure a sandbox denial, one line on stderr says so, as `executor run` does.",
        epilog="Environment: the command gets the executor's environment, except variables "
        "whose names look like secrets (*KEY*, *SECRET*, *TOKEN*, any case) — pass one of "
        "yours with --env NAME, all of the executor's with --inherit-env; in a terminal, "
        "your TERM too. Exit status: the command's, 128+N when signal N ended it; 125 when "
        "it could not be started (the executor's message is printed) or the executor could "
        "not be reached; 255 when the executor was lost while it ran; 2 for a usage error. "
        "Against the reference exec-server, the command's terminal is always 24x80 and its "
        "stdin never ends (docs/exec.md).",
    )
    parser.add_argument(
        "--url",
        required=True,
        help="ws://HOST:PORT (wss:// too), or stdio:CMD ARG... to run an executor and speak "
        "to it over its stdin/stdout, e.g. "
        "'stdio:ssh devbox executor serve --listen stdio --log-level warning'",
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help="read the bearer token for a ws:// executor from FILE (a token is never an "
        "argument: others could read it in the process list)",
    )
    parser.add_argument(
        "--profile",
        help="run sandboxed under this profile (see `executor profile list`; compiled here "
        "and sent as the sandbox intent)",
    )
    parser.add_argument(
        "--network",
        choices=["on", "off"],
        help="override the profile's network setting, as `executor run --network` does (on "
        "keeps a proxied profile behind its proxy); needs --profile",
    )
    parser.add_argument(
        "--workspace",
        action="append",
        metavar="DIR",
        help="a workspace root on the executor's host (what :workspace_roots binds to); repeatable",
    )
    parser.add_argument(
        "--cwd",
        metavar="DIR",
        help="the command's directory on the executor's host (default: the first workspace, "
        "else the executor's own; relative: from the executor's own)",
    )
    parser.add_argument(
        "--env",
        action="append",
        metavar="NAME[=VALUE]",
        help="set NAME in the command's environment; NAME alone copies yours (left as the "
        "executor has it if you have none); repeatable",
    )
    environment = parser.add_mutually_exclusive_group()
    environment.add_argument(
        "--clearenv",
        action="store_true",
        help="start the command's environment empty: only --env variables",
    )
    environment.add_argument(
        "--inherit-env",
        action="store_true",
        help="pass the executor's whole environment, secret-looking variables included",
    )
    parser.add_argument(
        "--tty",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="give the command a terminal of its own (default: when stdin and stdout are one)",
    )
    parser.add_argument(
        "--no-stdin",
        dest="stdin",
        action="store_false",
        help="do not forward your stdin: the command's stdin is empty from the start (as "
        "`ssh -n`; your stdin is never read, so a backgrounded exec is not stopped by it); "
        "implies --no-tty",
    )
    parser.add_argument(
        "argv", nargs=argparse.REMAINDER, help="-- then the command and its arguments"
    )


def _token(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as file:
            token = file.read().strip()
    except OSError as exc:
        raise ConfigError(f"--token-file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--token-file {path}: not UTF-8 text") from None
    if not token:
        raise ConfigError(f"--token-file {path}: the file is empty")
    return token


def exec_main(args: argparse.Namespace) -> int:
    """``executor exec``: usage errors raise ``ConfigError`` (exit 2)."""
    from executor.env_settings import env_settings
    from executor.remote_exec import ExecRequest, exec_command

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise ConfigError("exec: give the command after --")
    if not args.url.startswith(_SCHEMES):
        raise ConfigError(f"--url {args.url}: expected ws://HOST:PORT or stdio:CMD ARG...")
    if args.token_file is not None and args.url.startswith("stdio:"):
        raise ConfigError("--token-file is for a ws:// executor; stdio needs none")
    if args.profile is not None:
        from executor.sandbox.profiles import load_profile

        load_profile(args.profile)  # a profile that does not load is a usage error
    elif args.network is not None:
        raise ConfigError("--network overrides a profile's network: give --profile too")
    if args.tty and not args.stdin:
        raise ConfigError("--tty and --no-stdin: a terminal's input is your stdin")
    interactive = args.stdin and sys.stdin.isatty() and sys.stdout.isatty()
    use_tty = args.tty if args.tty is not None else interactive
    env = env_settings(args.env or [], os.environ)
    if use_tty and "TERM" in os.environ:
        env.setdefault("TERM", os.environ["TERM"])
    policy: dict[str, Any] = {
        "inherit": "none" if args.clearenv else "all",
        "ignoreDefaultExcludes": bool(args.inherit_env),
        "exclude": [],
        "set": {},
        "includeOnly": [],
    }
    request = ExecRequest(
        url=args.url,
        token=_token(args.token_file),
        argv=tuple(argv),
        cwd=args.cwd,
        profile=args.profile,
        workspace_roots=tuple(args.workspace or ()),
        network=None if args.network is None else args.network == "on",
        env=env,
        env_policy=policy,
        tty=use_tty,
        stdin=args.stdin,
    )
    return asyncio.run(exec_command(request))
