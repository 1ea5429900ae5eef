"""``executor serve``: bind a listener, run until stopped, shut down cleanly."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from executor.daemon import Daemon, DaemonConfig
from executor.errors import ConfigError
from executor.server import Connection
from executor.spawn.spawner import raise_descriptor_limit
from executor.transports.auth import Authenticator, ReloadingAuthenticator
from executor.transports.stdio import StdioTransport, open_stdio
from executor.transports.websocket import WebSocketOptions, WebSocketProtocol, serve_websocket

__all__ = ["DEFAULT_LISTEN", "ListenAddress", "parse_listen", "serve"]

log = logging.getLogger("executor.serve")

#: Where ``executor serve`` listens unless told otherwise (loopback only).
DEFAULT_LISTEN = "ws://127.0.0.1:8765"

STDIO_PARSE_PREFIX = "failed to parse JSON-RPC message from exec-server stdio: "


@dataclass(frozen=True, slots=True)
class ListenAddress:
    """Where to listen: ``ws`` with host and port, or ``stdio``."""

    kind: str
    host: str = ""
    port: int = 0


def parse_listen(url: str) -> ListenAddress:
    """Parse ``ws://IP:PORT``, ``stdio`` or ``stdio://``."""
    if url in ("stdio", "stdio://"):
        return ListenAddress("stdio")
    parts = urlsplit(url)
    if parts.scheme != "ws":
        raise ConfigError(f"unsupported listen URL {url!r}: use ws://IP:PORT, stdio or stdio://")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"listen URL {url!r} must not have a path, query or fragment")
    try:
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"listen URL {url!r}: {exc}") from None
    if not parts.hostname or port is None:
        raise ConfigError(f"listen URL {url!r} needs a host and a port, e.g. ws://127.0.0.1:8765")
    return ListenAddress("ws", parts.hostname, port)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url(host: str, port: int) -> str:
    return f"ws://[{host}]:{port}" if ":" in host else f"ws://{host}:{port}"


async def serve(
    address: ListenAddress,
    config: DaemonConfig,
    ws_options: WebSocketOptions,
    make_daemon: Callable[[DaemonConfig], Daemon] = Daemon,
) -> int:
    """Serve until SIGTERM/SIGINT (or stdin EOF for stdio); returns the exit status.

    SIGHUP re-reads the WebSocket token or shared-secret file (``_reload_credentials``); on a
    stdio daemon, which has none, it is what it traditionally is there: the other end hung up.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if address.kind == "stdio":
        loop.add_signal_handler(signal.SIGHUP, _hung_up, stop)
    else:
        loop.add_signal_handler(signal.SIGHUP, _reload_credentials, ws_options.auth)
    raise_descriptor_limit()
    daemon = make_daemon(config)
    server: asyncio.Server | None = None
    try:
        if address.kind == "stdio":
            await _serve_stdio(daemon, stop)
        else:
            server = await _serve_ws(daemon, address, ws_options)
        await stop.wait()
        log.info("shutting down")
    finally:
        if server is not None:
            server.close()
        await daemon.shutdown()
        if server is not None:
            await server.wait_closed()
    return 0


def _reload_credentials(auth: Authenticator | None) -> None:
    if not isinstance(auth, ReloadingAuthenticator):
        log.warning(
            "SIGHUP: nothing to reload (only credentials from --ws-token-file or"
            " --ws-shared-secret-file are re-read)"
        )
        return
    try:
        changed = auth.reload()
    except ConfigError as exc:
        log.error("SIGHUP: keeping the current websocket credentials: %s", exc.message)
        return
    log.info(
        "SIGHUP: reloaded the websocket credentials from %s (%s); open connections are kept",
        auth.source,
        "changed" if changed else "unchanged",
    )


def _hung_up(stop: asyncio.Event) -> None:
    log.info("SIGHUP: the other end hung up; shutting down")
    stop.set()


async def _serve_stdio(daemon: Daemon, stop: asyncio.Event) -> None:
    transport = StdioTransport(on_end=stop.set)
    connection = Connection(daemon, transport, parse_error_prefix=STDIO_PARSE_PREFIX)
    daemon.connection_opened(connection)
    transport.connection = connection
    await open_stdio(transport)


async def _serve_ws(
    daemon: Daemon, address: ListenAddress, options: WebSocketOptions
) -> asyncio.Server:
    def make_connection(protocol: WebSocketProtocol) -> Connection:
        prefix = (
            "failed to parse websocket JSON-RPC message from exec-server websocket "
            f"{protocol.peer}: "
        )
        connection = Connection(daemon, protocol, parse_error_prefix=prefix)
        daemon.connection_opened(connection)
        return connection

    try:
        server = await serve_websocket(address.host, address.port, make_connection, options)
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {_url(address.host, address.port)}: {exc.strerror}"
        ) from None
    sockname = server.sockets[0].getsockname()
    url = _url(address.host if address.host != "localhost" else "localhost", sockname[1])
    # The first stdout line is the bound URL: launchers parse it (port 0 picks a free port).
    sys.stdout.write(url + "\n")
    sys.stdout.flush()
    log.info("listening on %s", url)
    if not _is_loopback(address.host):
        if options.auth is None:
            log.warning(
                "listening on non-loopback address %s without authentication: anyone who can "
                "reach it can run commands as this user (see --ws-auth)",
                address.host,
            )
        else:
            log.warning(
                "listening on non-loopback address %s over plain ws://: the bearer token and "
                "all traffic cross the network unencrypted; prefer a tunnel or a TLS proxy",
                address.host,
            )
    return server
