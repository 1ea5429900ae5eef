"""The ``executor`` command line: ``serve``, ``run``, ``profile``, ``backends``, ``doctor``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from executor import __version__
from executor.daemon import DaemonConfig
from executor.errors import ConfigError
from executor.logs import configure_logging
from executor.process import ProcessLimits
from executor.transports.websocket import WebSocketOptions

__all__ = ["main"]

DEFAULT_LISTEN = "ws://127.0.0.1:8765"


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _add_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the daemon",
        description="Serve the exec-server protocol over WebSocket or stdio.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    serve.add_argument("--listen", default=DEFAULT_LISTEN, help="ws://IP:PORT (port 0 picks a free port), stdio or stdio://")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--log-format", default="text", choices=["text", "json"])
    limits = serve.add_argument_group("sessions and processes")
    limits.add_argument("--session-ttl", type=_positive, default=80.0, metavar="SECONDS",
                        help="how long a detached session (and its processes) waits to be resumed; 80 s like the reference, long enough to ride out a laptop's Wi-Fi reconnect")
    limits.add_argument("--process-retention", type=_positive, default=80.0, metavar="SECONDS",
                        help="how long an exited process stays readable before its id can be reused")
    limits.add_argument("--retained-output-bytes", type=_count, default=1024 * 1024, metavar="BYTES",
                        help="output kept per process for process/read; oldest chunks are evicted")
    limits.add_argument("--max-processes-per-session", type=_count, default=256)
    limits.add_argument("--max-processes", type=_count, default=1024, help="live processes across all sessions")
    limits.add_argument("--max-command-bytes", type=_count, default=1024 * 1024, help="argv plus environment")
    limits.add_argument("--stop-grace", type=_positive, default=2.0, metavar="SECONDS",
                        help="SIGTERM-to-SIGKILL grace when sessions expire or the daemon stops")
    ws = serve.add_argument_group("WebSocket")
    ws.add_argument("--max-frame-bytes", type=_count, default=16 * 1024 * 1024)
    ws.add_argument("--max-message-bytes", type=_count, default=64 * 1024 * 1024 - 1)
    ws.add_argument("--ping-interval", type=_positive, default=10.0, metavar="SECONDS")
    ws.add_argument("--ping-timeout", type=_positive, default=10.0, metavar="SECONDS")
    ws.add_argument("--close-timeout", type=_positive, default=2.0, metavar="SECONDS")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = argparse.ArgumentParser(
        prog="executor",
        description="Sandbox-enforcing remote executor daemon (Codex exec-server protocol).",
    )
    parser.add_argument("--version", action="version", version=f"executor {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_serve(commands)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from executor.serve import parse_listen, serve

    configure_logging(args.log_level, args.log_format)
    address = parse_listen(args.listen)
    config = DaemonConfig(
        session_ttl=args.session_ttl,
        process=ProcessLimits(
            retained_bytes=args.retained_output_bytes,
            exited_retention=args.process_retention,
            max_per_session=args.max_processes_per_session,
            max_total=args.max_processes,
            max_command_bytes=args.max_command_bytes,
            stop_grace=args.stop_grace,
        ),
    )
    options = WebSocketOptions(
        max_frame_bytes=args.max_frame_bytes,
        max_message_bytes=args.max_message_bytes,
        ping_interval=args.ping_interval,
        ping_timeout=args.ping_timeout,
        close_timeout=args.close_timeout,
    )
    return asyncio.run(serve(address, config, options))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``executor`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "serve":
            return _serve(args)
    except ConfigError as exc:
        print(f"executor: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    parser.error(f"unknown command {args.command}")
    return 2
