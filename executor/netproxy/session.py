"""The network side of one session's sandboxed commands (daemon side).

For each command in proxy mode the session hands out an ``Attachment``: a ``NetworkRoute``
for the backend, the proxy variables for the command's environment, the proxy's refusals as
denial evidence, and a ``release`` for when the command is gone.

* Linux (a daemon that may hold network namespaces): the session's commands share one
  private network namespace with only ``lo`` (``netns.py``), made on first use. In it the
  daemon listens, for each command, on a proxy port of its own (carrying that command's
  policy), and for each ``local_ports`` entry on ``127.0.0.1:PORT`` (and ``[::1]:PORT``), a
  relay to the same port on the host's loopback — shared by the commands that listed it,
  closed with the last of them. Nothing else in there leads anywhere.
* Elsewhere (macOS) the proxy listens on the host's loopback and the backend lets the
  command reach that port and its ``local_ports`` only.

Every decision of a session's proxies is logged (``executor.network``) with the session and
process ids, and recorded in the audit trail.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from executor import audit
from executor.errors import SandboxUnavailable
from executor.netproxy import netns
from executor.netproxy.policy import Decision
from executor.netproxy.relay import relay_connection
from executor.netproxy.server import ProxyServer
from executor.sandbox.network import NetworkPolicy, NetworkRoute

__all__ = ["Attachment", "SessionNetwork", "proxy_environment"]

log = logging.getLogger("executor.network")

#: Variables that send traffic to an HTTP proxy, as the reference sets them (0.171).
_HTTP_VARIABLES: Final = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "WS_PROXY",
    "WSS_PROXY",
    "ws_proxy",
    "wss_proxy",
    "YARN_HTTP_PROXY",
    "YARN_HTTPS_PROXY",
    "NPM_CONFIG_HTTP_PROXY",
    "NPM_CONFIG_HTTPS_PROXY",
    "NPM_CONFIG_PROXY",
    "npm_config_http_proxy",
    "npm_config_https_proxy",
    "npm_config_proxy",
    "BUNDLE_HTTP_PROXY",
    "BUNDLE_HTTPS_PROXY",
    "PIP_PROXY",
    "DOCKER_HTTP_PROXY",
    "DOCKER_HTTPS_PROXY",
)
#: ... and to a SOCKS5 one (the same port: the proxy tells them apart by the first byte).
_SOCKS_VARIABLES: Final = ("ALL_PROXY", "all_proxy", "FTP_PROXY", "ftp_proxy")
_NO_PROXY_VARIABLES: Final = (
    "NO_PROXY",
    "no_proxy",
    "NPM_CONFIG_NOPROXY",
    "npm_config_noproxy",
    "BUNDLE_NO_PROXY",
)
#: With local binding, a command's own servers are reached directly, in its namespace.
_LOCAL: Final = "localhost,127.0.0.1,::1,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"
#: Refusals kept per command as evidence (the first ones say what went wrong).
_KEPT_REFUSALS: Final = 16


def proxy_environment(port: int, *, local_binding: bool, socks: bool = True) -> dict[str, str]:
    """The variables that send a command's traffic to the proxy on ``127.0.0.1:port``."""
    http = f"http://127.0.0.1:{port}"
    env = dict.fromkeys(_HTTP_VARIABLES, http)
    env.update(dict.fromkeys(_SOCKS_VARIABLES, f"socks5h://127.0.0.1:{port}" if socks else http))
    env.update(dict.fromkeys(_NO_PROXY_VARIABLES, _LOCAL if local_binding else ""))
    env["CODEX_NETWORK_PROXY_ACTIVE"] = "1"
    env["CODEX_NETWORK_ALLOW_LOCAL_BINDING"] = "1" if local_binding else "0"
    env["ELECTRON_GET_USE_PROXY"] = "true"
    env["NODE_USE_ENV_PROXY"] = "1"
    return env


@dataclass(slots=True)
class Attachment:
    """One command's place in the session's network."""

    route: NetworkRoute
    #: Variables added to the command's environment (the proxy's address).
    env: dict[str, str]
    release: Callable[[], None]
    refusals: list[Decision] = field(default_factory=list)

    def evidence(self) -> str | None:
        """The proxy's first refusal, as the denial reason (``None``: it refused nothing)."""
        if not self.refusals:
            return None
        first = self.refusals[0]
        more = f" (+{len(self.refusals) - 1} more)" if len(self.refusals) > 1 else ""
        return f"network_policy: refused {_hostport(first.host, first.port)}: {first.reason}{more}"


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Relay:
    """``127.0.0.1:port`` (and ``[::1]:port``) in the namespace, to the host's loopback."""

    def __init__(self, port: int, servers: list[asyncio.Server]) -> None:
        self.port = port
        self.servers = servers
        self.users = 0

    def close(self) -> None:
        for server in self.servers:
            server.close()


class SessionNetwork:
    """The network namespace, proxies and relays of one session."""

    def __init__(self, session_id: str, *, private_namespace: bool | None = None) -> None:
        self.session_id = session_id
        #: Use a private network namespace (Linux with the capability to make one).
        self.private = (
            sys.platform.startswith("linux") if private_namespace is None else (private_namespace)
        )
        self._namespace: netns.NetNamespace | None = None
        self._relays: dict[int, _Relay] = {}
        self._proxies: set[ProxyServer] = set()
        self._closed = False

    @property
    def namespace(self) -> netns.NetNamespace | None:
        """The session's network namespace, once a command needed it."""
        return self._namespace

    def _ensure_namespace(self) -> netns.NetNamespace:
        if self._namespace is None:
            reason = netns.available()
            if reason is not None:
                raise SandboxUnavailable(
                    f"proxied networking needs a private network namespace, and {reason}"
                )
            self._namespace = netns.NetNamespace()
        return self._namespace

    def _listen(self, host: str, port: int) -> socket.socket:
        if self.private:
            return self._ensure_namespace().listen(host, port)
        sock = socket.create_server((host, port), backlog=512)
        sock.setblocking(False)
        return sock

    async def attach(
        self, policy: NetworkPolicy, *, process_id: str, executor_proxy: bool, socks: bool = True
    ) -> Attachment:
        """A place for one command: its own proxy (``executor_proxy``) and relays for
        ``policy.local_ports``. Raises ``SandboxUnavailable`` when one cannot be made."""
        if self._closed:
            raise SandboxUnavailable("the session is closing")
        namespace = self._ensure_namespace() if self.private else None
        releases: list[Callable[[], None]] = []
        refusals: list[Decision] = []
        ports: list[int] = []
        env: dict[str, str] = {}
        try:
            if executor_proxy:
                # The host's loopback only at the listed ports, however a host was allowed.
                proxy = ProxyServer(
                    policy,
                    on_decision=self._decisions(process_id, refusals),
                    loopback_ports=policy.local_ports,
                )
                sock = self._listen("127.0.0.1", 0)
                port = sock.getsockname()[1]
                await proxy.start(sock)
                self._proxies.add(proxy)
                releases.append(lambda: self._stop_proxy(proxy))
                ports.append(port)
                env = proxy_environment(port, local_binding=policy.local_binding, socks=socks)
            if self.private:
                for local in policy.local_ports:
                    releases.append(await self._use_relay(local))
            ports.extend(policy.local_ports)
        except BaseException:
            for release in reversed(releases):
                release()
            raise
        route = NetworkRoute(
            ports=tuple(dict.fromkeys(ports)),
            netns_path=None if namespace is None else namespace.path,
            netns_inode=None if namespace is None else namespace.inode,
            local_binding=policy.local_binding,
        )

        def release_all() -> None:
            for step in reversed(releases):
                step()
            releases.clear()

        return Attachment(route=route, env=env, release=release_all, refusals=refusals)

    def _decisions(self, process_id: str, refusals: list[Decision]) -> Callable[[Decision], None]:
        session = self.session_id

        def record(decision: Decision) -> None:
            if decision.allowed:  # the audit trail has every decision; the log, refusals
                log.debug("session %s process %s: %s", session, process_id, decision)
            else:
                log.info("session %s process %s: %s", session, process_id, decision)
                if len(refusals) < _KEPT_REFUSALS:
                    refusals.append(decision)
            if audit.enabled():
                audit.record(
                    "network.decision",
                    None,
                    sessionId=session,
                    processId=audit.bounded(process_id),
                    protocol=decision.protocol,
                    host=audit.bounded(decision.host),
                    port=decision.port,
                    address=decision.address,
                    allowed=decision.allowed,
                    reason=decision.reason,
                    error=decision.error,
                )

        return record

    def _stop_proxy(self, proxy: ProxyServer) -> None:
        if proxy in self._proxies:
            self._proxies.discard(proxy)
            asyncio.get_running_loop().create_task(proxy.close())

    async def _use_relay(self, port: int) -> Callable[[], None]:
        relay = self._relays.get(port)
        if relay is None:
            relay = await self._open_relay(port)
            self._relays[port] = relay
        relay.users += 1

        def release() -> None:
            relay.users -= 1
            if relay.users == 0 and self._relays.get(port) is relay:
                del self._relays[port]
                relay.close()

        return release

    async def _open_relay(self, port: int) -> _Relay:
        servers: list[asyncio.Server] = []
        for inside, outside in (("127.0.0.1", "127.0.0.1"), ("::1", "::1")):
            try:
                sock = self._listen(inside, port)
            except OSError as exc:
                if inside == "::1" and servers:
                    continue  # no IPv6 loopback in the namespace: IPv4 is enough
                for server in servers:
                    server.close()
                raise SandboxUnavailable(
                    f"local port {port} cannot be relayed into the session's network: "
                    f"{exc.strerror or exc} (does a command of this session listen on it?)"
                ) from None

            async def handle(
                reader: asyncio.StreamReader,
                writer: asyncio.StreamWriter,
                target: str = outside,
            ) -> None:
                await relay_connection(reader, writer, target, port)

            servers.append(await asyncio.start_server(handle, sock=sock))
        return _Relay(port, servers)

    async def close(self) -> None:
        """End every proxy and relay, and let go of the namespace."""
        self._closed = True
        for relay in self._relays.values():
            relay.close()
        self._relays.clear()
        proxies, self._proxies = list(self._proxies), set()
        for proxy in proxies:
            with contextlib.suppress(Exception):
                await proxy.close()
        if self._namespace is not None:
            self._namespace.close()
            self._namespace = None
