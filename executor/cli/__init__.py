"""The ``executor`` command line: ``serve``, ``run``, ``profile``, ``backends``, ``doctor``,
``exec``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from executor import __version__
from executor.cli.exec_options import add_exec, exec_main
from executor.cli.policy_options import add_policy_commands
from executor.cli.serve_config import parse_with_config
from executor.cli.serve_options import add_serve, daemon_config, websocket_options
from executor.errors import ConfigError, ExecutorError
from executor.logs import configure_logging
from executor.serve import parse_listen, serve
from executor.transports.auth import AuthFlags, from_flags

__all__ = ["build_parser", "main"]

#: Extra profile directories (``:``-separated), read by ``executor.sandbox.profiles``.
PROFILES_ENV = "EXECUTOR_PROFILES_DIR"

log = logging.getLogger("executor.cli")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = argparse.ArgumentParser(
        prog="executor",
        description="Sandbox-enforcing remote executor daemon (Codex exec-server protocol).",
    )
    parser.add_argument("--version", action="version", version=f"executor {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_serve(commands)
    add_policy_commands(commands)
    add_exec(commands)
    return parser


def _missing_profile_dirs() -> list[str]:
    """Warnings for ``EXECUTOR_PROFILES_DIR`` entries that are not directories (the profile
    library skips them, so a typo would otherwise go unnoticed until a profile is missing)."""
    return [
        f"{PROFILES_ENV} names {part}, which is not a directory: no profiles are loaded from it"
        for part in os.environ.get(PROFILES_ENV, "").split(os.pathsep)
        if part and not os.path.isdir(part)
    ]


def _serve(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    for warning in _missing_profile_dirs():
        log.warning("%s", warning)
    address = parse_listen(args.listen)
    flags = AuthFlags(
        mode=args.ws_auth,
        token_file=args.ws_token_file,
        token_sha256=args.ws_token_sha256,
        shared_secret_file=args.ws_shared_secret_file,
        issuer=args.ws_issuer,
        audience=args.ws_audience,
        max_clock_skew=args.ws_max_clock_skew_seconds,
    )
    auth = from_flags(flags, stdio=address.kind == "stdio")
    options = websocket_options(args, auth)
    return asyncio.run(serve(address, daemon_config(args), options))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``executor`` console script."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse_with_config(parser, argv)
    except ConfigError as exc:  # serve --config: the file, the key, what is wrong
        print(f"executor: {exc.message}", file=sys.stderr)
        return 2
    if args.command is None:
        parser.print_help()
        return 2
    from executor import commands

    if args.command in ("run", "profile", "doctor"):
        for warning in _missing_profile_dirs():
            print(f"executor: warning: {warning}", file=sys.stderr)
    handlers = {
        "serve": _serve,
        "run": commands.run,
        "backends": commands.backends,
        "doctor": commands.doctor,
        "exec": exec_main,
    }
    if args.command == "profile":
        handlers["profile"] = {
            "list": commands.profile_list,
            "check": commands.profile_check,
            "explain": commands.profile_explain,
            "schema": commands.profile_schema,
        }[args.action]
    try:
        if args.command in handlers:
            return handlers[args.command](args)
    except ConfigError as exc:
        print(f"executor: {exc.message}", file=sys.stderr)
        return 2
    except ExecutorError as exc:
        print(f"executor: {exc.message}", file=sys.stderr)
        return 125 if args.command == "run" else 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `executor doctor | head`: the reader left; say nothing more, as other tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    parser.error(f"unknown command {args.command}")
