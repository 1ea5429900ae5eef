"""``executor serve``'s options, their defaults taken from the config dataclasses, and the
configs built from them (``daemon_config``, ``websocket_options``)."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
from collections.abc import Callable

from executor.daemon import DaemonConfig
from executor.http.policy import HttpPolicy, IPNetwork, parse_network
from executor.output import DetachedOutput
from executor.process import ProcessLimits
from executor.sandbox.limits import (
    DEFAULT_LIMITS_TEXT,
    LIMIT_NAMES,
    default_limits,
    parse_assignment,
)
from executor.sandbox.manager import BLOCK_ENV
from executor.sandbox.statedir import state_path
from executor.serve import DEFAULT_LISTEN
from executor.transports.auth import DEFAULT_MAX_CLOCK_SKEW, Authenticator
from executor.transports.websocket import WebSocketOptions

__all__ = ["add_serve", "daemon_config", "websocket_options"]


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: expected a positive number of seconds"
        )
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: expected a positive integer")
    return value


def _limit(text: str) -> tuple[str, int | None]:
    try:
        return parse_assignment(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _whole_seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: expected 0 or a positive whole number of seconds"
        )
    return value


#: The TOML types a ``--config`` file may give for an option, by the option's ``type``; an
#: option whose type is not here takes a string, as on the command line.
CONFIG_VALUE_TYPES: dict[Callable[[str], object], tuple[type, ...]] = {
    _seconds: (int, float),
    _count: (int,),
    _whole_seconds: (int,),
}


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where there is one worth reading (not None, [] or a flag's False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, [], False):
            return action.help
        return super()._get_help_string(action)


def add_serve(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the daemon",
        # Short: a mistyped option's error is then not buried under thirty lines of usage.
        usage="%(prog)s [OPTIONS]",
        description="Serve the exec-server protocol over WebSocket or stdio. Every option can"
        " also be set in a TOML file (--config); options given here override it.",
        formatter_class=_DefaultsFormatter,
    )
    # Every default below is read from the configuration it ends up in, so that it lives in
    # one place; `tests/test_cli_serve.py` holds the two together.
    daemon = DaemonConfig()
    _add_config(serve)
    _add_daemon(serve, daemon)
    _add_processes(serve, daemon)
    _add_sandboxed(serve)
    _add_floor(serve, daemon)
    _add_websocket(serve, WebSocketOptions())
    _add_http(serve, daemon.http)


def _add_config(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--config",
        metavar="FILE",
        help="read options from this TOML file: each key is an option's name without the"
        ' leading -- (session-ttl = 80, listen = "ws://127.0.0.1:8765"), a list for a'
        ' repeatable one (block-plugin = ["macos"]), true/false for a switch; an option'
        " also given on the command line overrides the file's value (a list as a whole)",
    )


def _add_daemon(serve: argparse.ArgumentParser, daemon: DaemonConfig) -> None:
    serve.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        help="ws://IP:PORT (port 0 picks a free port), stdio or stdio://",
    )
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="least severe log record written to stderr",
    )
    serve.add_argument(
        "--log-format",
        default="text",
        choices=["text", "json"],
        help="json: one object per line, for log collectors",
    )
    serve.add_argument(
        "--state-dir",
        metavar="DIR",
        help="private state directory, hidden from every sandbox (default: $EXECUTOR_STATE_DIR,"
        " $XDG_RUNTIME_DIR/executor-UID or /tmp/executor-UID)",
    )
    serve.add_argument(
        "--block-plugin",
        action="append",
        default=list(daemon.blocked_plugins),
        metavar="NAME",
        help=f"do not load this sandbox plugin (also {BLOCK_ENV}=a,b)",
    )


def _add_processes(serve: argparse.ArgumentParser, daemon: DaemonConfig) -> None:
    limits = serve.add_argument_group("sessions and processes")
    process = daemon.process
    limits.add_argument(
        "--session-ttl",
        type=_seconds,
        default=daemon.session_ttl,
        metavar="SECONDS",
        help="how long a detached session (and its processes) waits to be resumed; the"
        " default is the reference's, long enough to ride out a laptop's Wi-Fi reconnect",
    )
    limits.add_argument(
        "--process-retention",
        type=_seconds,
        default=process.exited_retention,
        metavar="SECONDS",
        help="how long an exited process stays readable before its id can be reused",
    )
    limits.add_argument(
        "--retained-output-bytes",
        type=_count,
        default=process.retained_bytes,
        metavar="BYTES",
        help="output kept per process for process/read; oldest chunks are evicted",
    )
    limits.add_argument(
        "--detached-output",
        choices=[mode.value for mode in DetachedOutput],
        default=process.detached_output.value,
        help="output no client has read, once retention is full: evict drops the oldest (a"
        " returning client sees a seq jump; the reference's behaviour); block stops reading the"
        " process, which waits on its writes until a client resumes the session and reads what"
        " it missed with process/read",
    )
    limits.add_argument(
        "--max-processes-per-session",
        type=_count,
        default=process.max_per_session,
        metavar="COUNT",
        help="live processes one session may have",
    )
    limits.add_argument(
        "--max-processes",
        type=_count,
        default=process.max_total,
        metavar="COUNT",
        help="live processes across all sessions",
    )
    limits.add_argument(
        "--max-command-bytes",
        type=_count,
        default=process.max_command_bytes,
        metavar="BYTES",
        help="largest argv plus environment of one command",
    )
    limits.add_argument(
        "--stop-grace",
        type=_seconds,
        default=process.stop_grace,
        metavar="SECONDS",
        help="SIGTERM-to-SIGKILL grace when sessions expire or the daemon stops",
    )


def _add_sandboxed(serve: argparse.ArgumentParser) -> None:
    defaults = ", ".join(f"{name}={value}" for name, value in DEFAULT_LIMITS_TEXT.items())
    unlimited = " and ".join(name for name in LIMIT_NAMES if name not in DEFAULT_LIMITS_TEXT)
    sandboxed = serve.add_argument_group(
        "sandboxed commands",
        "Resource limits of every sandboxed command (a client's request carries none). Enforced"
        " with cgroups where the executor can create them, with rlimits otherwise; `executor"
        " doctor` shows which, per limit.",
    )
    help_text = (
        "change one limit; repeatable. NAME: processes (tasks of the command's tree, threads"
        " included), memory (bytes such as 512MiB or 4GiB, or a share of RAM such as 50%),"
        " open_files (per process), file_size (bytes, per file), cpu_time (seconds, or 90s,"
        f" 10m, 2h; per process). VALUE `unlimited` lifts one. Defaults: {defaults}"
        + (f"; {unlimited} unlimited" if unlimited else "")
    )
    sandboxed.add_argument(
        "--limit",
        action="append",
        default=[],
        type=_limit,
        metavar="NAME=VALUE",
        help=help_text.replace("%", "%%"),  # help strings are %-formatted
    )


def _add_floor(serve: argparse.ArgumentParser, daemon: DaemonConfig) -> None:
    floor = serve.add_argument_group(
        "policy floor",
        "What no request may exceed, whatever the client sends (docs/operating.md, section"
        " Policy floor).",
    )
    floor.add_argument(
        "--require-sandbox",
        default=daemon.require_sandbox,
        metavar="PROFILE",
        help="confine every process/start, fs/* call, capability discovery and http/request"
        " at least by this profile (a name, or a .toml file): a request without a sandbox runs"
        " under it, one whose sandbox grants more anywhere is refused (-32602, naming the"
        " reads, writes or network it would exceed); http/request is refused when the profile"
        " has no network",
    )
    floor.add_argument(
        "--workspace",
        action="append",
        default=list(daemon.workspace_roots),
        metavar="DIR",
        help="a workspace root the required sandbox's :workspace_roots binds to; repeatable"
        " (without any, :workspace_roots expands to nothing; a client's roots never count)",
    )
    floor.add_argument(
        "--shared-loopback",
        action="store_true",
        default=daemon.shared_loopback,
        help="let sandboxes with the full network reach this host's loopback services (this"
        " daemon's port included) instead of refusing them where loopback isolation cannot be"
        " enforced (it needs root: cgroup BPF); proxy-mode sandboxes are isolated regardless",
    )
    floor.add_argument(
        "--env-deny",
        action="append",
        default=list(daemon.env_deny),
        metavar="PATTERN",
        help="never pass variables whose name matches this glob (case-sensitive, e.g."
        " 'AWS_*') to any command, whatever its envPolicy or env says; repeatable",
    )


def _add_websocket(serve: argparse.ArgumentParser, options: WebSocketOptions) -> None:
    ws = serve.add_argument_group("WebSocket")
    ws.add_argument(
        "--max-frame-bytes",
        type=_count,
        default=options.max_frame_bytes,
        metavar="BYTES",
        help="largest inbound frame (larger: close 1009)",
    )
    ws.add_argument(
        "--max-message-bytes",
        type=_count,
        default=options.max_message_bytes,
        metavar="BYTES",
        help="largest inbound message after reassembly (larger: close 1009)",
    )
    ws.add_argument(
        "--ping-interval",
        type=_seconds,
        default=options.ping_interval,
        metavar="SECONDS",
        help="keepalive ping period of every connection",
    )
    ws.add_argument(
        "--ping-timeout",
        type=_seconds,
        default=options.ping_timeout,
        metavar="SECONDS",
        help="a peer that has not answered a ping by then is dropped (its session detaches)",
    )
    ws.add_argument(
        "--close-timeout",
        type=_seconds,
        default=options.close_timeout,
        metavar="SECONDS",
        help="how long a closing handshake may take before the TCP connection is cut",
    )
    _add_ws_auth(ws)


def _add_ws_auth(ws: argparse._ArgumentGroup) -> None:
    # No defaults here: `from_flags` must tell a flag that was given from one that was not.
    ws.add_argument(
        "--ws-auth",
        metavar="MODE",
        help="authenticate upgrades: capability-token (a shared bearer token) or "
        "signed-bearer-token (an HS256 JWT)",
    )
    ws.add_argument(
        "--ws-token-file",
        metavar="PATH",
        help="file holding the capability token (whitespace trimmed; re-read on SIGHUP)",
    )
    ws.add_argument(
        "--ws-token-sha256",
        metavar="HEX",
        help="the capability token's SHA-256 in hex, instead of --ws-token-file",
    )
    ws.add_argument(
        "--ws-shared-secret-file",
        metavar="PATH",
        help="file holding the JWT signing secret (at least 32 bytes; re-read on SIGHUP)",
    )
    ws.add_argument("--ws-issuer", metavar="ISSUER", help="required JWT `iss` claim")
    ws.add_argument("--ws-audience", metavar="AUDIENCE", help="required JWT `aud` claim")
    ws.add_argument(
        "--ws-max-clock-skew-seconds",
        type=_whole_seconds,
        metavar="SECONDS",
        help=f"leeway for the JWT's exp and nbf (default: {DEFAULT_MAX_CLOCK_SKEW})",
    )


def _add_http(serve: argparse.ArgumentParser, policy: HttpPolicy) -> None:
    http = serve.add_argument_group(
        "http/request", "HTTP(S) requests clients ask the executor to make from this host"
    )
    http.add_argument(
        "--http-requests",
        choices=["on", "off"],
        default="on" if policy.enabled else "off",
        help="off: refuse every http/request (unsandboxed network egress from this host)",
    )
    http.add_argument(
        "--http-header-env-var",
        action="append",
        default=sorted(policy.header_env_vars),
        metavar="NAME",
        help="let request headers append this executor environment variable (valueEnvVar);"
        " repeatable. Without any, valueEnvVar is refused and httpHeaderEnvVars is false",
    )
    http.add_argument(
        "--http-allow-host",
        action="append",
        default=list(policy.allowed_hosts),
        metavar="HOST",
        help="only these hosts may be requested, redirects included; repeatable: names (exact,"
        " or *.suffix for subdomains), addresses or CIDRs (matched against the address"
        " connected to, whatever name led there; they may be non-public). Without any, every"
        " public host may be",
    )
    http.add_argument(
        "--http-allow-private",
        action="store_true",
        default=policy.allow_private,
        help="let requests reach loopback, private, link-local and other non-public"
        " addresses, checked on the address actually connected to, every redirect hop"
        " included (refused by default); cloud metadata endpoints (169.254.169.254,"
        " fd00:ec2::254, ...) stay refused",
    )
    http.add_argument(
        "--http-allow-cidr",
        action="append",
        default=list(policy.allowed_networks),
        type=_network,
        metavar="CIDR",
        help="let requests reach these non-public addresses (e.g. 10.0.0.0/8, 127.0.0.1,"
        " a metadata endpoint); repeatable",
    )
    http.add_argument(
        "--http-max-buffered-bytes",
        type=_count,
        default=policy.max_buffered_bytes,
        metavar="BYTES",
        help="largest response body a buffered (not streamed) request returns",
    )


def _network(text: str) -> IPNetwork:
    try:
        return parse_network(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an address or CIDR: {text!r}") from None


def daemon_config(args: argparse.Namespace) -> DaemonConfig:
    """The daemon's configuration from ``serve``'s options (given, or their defaults)."""
    config = DaemonConfig(
        blocked_plugins=tuple(args.block_plugin),
        session_ttl=args.session_ttl,
        process=ProcessLimits(
            retained_bytes=args.retained_output_bytes,
            exited_retention=args.process_retention,
            max_per_session=args.max_processes_per_session,
            max_total=args.max_processes,
            max_command_bytes=args.max_command_bytes,
            stop_grace=args.stop_grace,
            detached_output=DetachedOutput(args.detached_output),
        ),
        http=HttpPolicy(
            enabled=args.http_requests == "on",
            header_env_vars=frozenset(args.http_header_env_var),
            allowed_hosts=tuple(args.http_allow_host),
            allow_private=args.http_allow_private,
            allowed_networks=tuple(args.http_allow_cidr),
            max_buffered_bytes=args.http_max_buffered_bytes,
        ),
        sandbox_limits=default_limits().replace(**dict(args.limit)),
        require_sandbox=args.require_sandbox,
        workspace_roots=tuple(args.workspace),
        env_deny=tuple(args.env_deny),
        shared_loopback=args.shared_loopback,
        secret_files=tuple(
            os.path.realpath(path)
            for path in (args.ws_token_file, args.ws_shared_secret_file)
            if path
        ),
    )
    if args.state_dir:
        # Passed on, never put into os.environ: the environment variable is the operator's
        # way to set the default, and commands the daemon starts inherit its environment.
        config = dataclasses.replace(config, state_dir=state_path(args.state_dir))
    return config


def websocket_options(args: argparse.Namespace, auth: Authenticator | None) -> WebSocketOptions:
    """The WebSocket listener's limits and timers from ``serve``'s options."""
    return WebSocketOptions(
        max_frame_bytes=args.max_frame_bytes,
        max_message_bytes=args.max_message_bytes,
        ping_interval=args.ping_interval,
        ping_timeout=args.ping_timeout,
        close_timeout=args.close_timeout,
        auth=auth,
    )
