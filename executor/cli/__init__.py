"""The ``executor`` command line: ``serve``, ``run``, ``profile``, ``backends``, ``doctor``,
``exec``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence

import executor
from executor.cli.exec_options import add_exec, exec_main
from executor.cli.policy_options import add_policy_commands
from executor.errors import ConfigError, ExecutorError

__all__ = ["build_parser", "main"]

#: Extra profile directories (``:``-separated), read by ``executor.sandbox.profiles``.
PROFILES_ENV = "EXECUTOR_PROFILES_DIR"

log = logging.getLogger("executor.cli")


#: ``serve``'s line in ``executor --help`` when its options are not built (``build_parser``).
SERVE_HELP = "run the daemon"


def build_parser(*, serve_options: bool = True) -> argparse.ArgumentParser:
    """The whole command line.

    ``serve_options=False`` leaves ``serve``'s options out (its name and help stay): they
    take their defaults from the daemon's configuration classes, and importing the daemon
    for them was most of the start-up of every other command (``executor exec`` is run
    from scripts, once per command).
    """
    parser = argparse.ArgumentParser(
        prog="executor",
        description="Sandbox-enforcing remote executor daemon (Codex exec-server protocol).",
    )
    parser.add_argument("--version", action=_Version, help="show program's version number and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    if serve_options:
        from executor.cli.serve_options import add_serve

        add_serve(commands)
    else:
        commands.add_parser("serve", help=SERVE_HELP)
    add_policy_commands(commands)
    add_exec(commands)
    return parser


class _Version(argparse.Action):
    """``--version``, the version looked up only when asked for (``executor.__version__``)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"executor {executor.__version__}")
        parser.exit()


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (the top level has no options that take a value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def _missing_profile_dirs() -> list[str]:
    """Warnings for ``EXECUTOR_PROFILES_DIR`` entries that are not directories (the profile
    library skips them, so a typo would otherwise go unnoticed until a profile is missing)."""
    return [
        f"{PROFILES_ENV} names {part}, which is not a directory: no profiles are loaded from it"
        for part in os.environ.get(PROFILES_ENV, "").split(os.pathsep)
        if part and not os.path.isdir(part)
    ]


def _serve(args: argparse.Namespace) -> int:
    from executor.cli.serve_options import daemon_config, websocket_options
    from executor.daemon import run_event_loop
    from executor.logs import configure_logging
    from executor.serve import parse_listen, serve
    from executor.transports.auth import AuthFlags, from_flags

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
    return run_event_loop(serve(address, daemon_config(args), options))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``executor`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    serving = _command_of(argv) == "serve"
    parser = build_parser(serve_options=serving)
    if serving:
        from executor.cli.serve_config import parse_with_config

        try:
            args = parse_with_config(parser, argv)
        except ConfigError as exc:  # serve --config: the file, the key, what is wrong
            print(f"executor: {exc.message}", file=sys.stderr)
            return 2
    else:
        args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command in ("run", "profile", "doctor"):
        for warning in _missing_profile_dirs():
            print(f"executor: warning: {warning}", file=sys.stderr)
    try:
        handler = _handler(args)
        if handler is not None:
            return handler(args)
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


def _handler(args: argparse.Namespace) -> Callable[[argparse.Namespace], int] | None:
    """The function that carries out ``args.command``, its module imported only now."""
    if args.command == "serve":
        return _serve
    if args.command == "exec":
        return exec_main
    from executor import commands

    if args.command == "profile":
        return {
            "list": commands.profile_list,
            "check": commands.profile_check,
            "explain": commands.profile_explain,
            "schema": commands.profile_schema,
        }[args.action]
    return {"run": commands.run, "backends": commands.backends, "doctor": commands.doctor}.get(
        args.command
    )
