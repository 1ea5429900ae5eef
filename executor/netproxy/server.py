"""The proxy server: one listening socket, HTTP (CONNECT and plain) and SOCKS5 on it.

The caller creates, binds and listens on the socket (the daemon makes it inside a
sandbox's network namespace) and hands it over; the server owns it from then on and
closes it in ``close()``. What a connection speaks is told by its first byte: 0x05 is
SOCKS5, 0x04 SOCKS4 (refused), an upper-case letter an HTTP method; anything else is
dropped. Accepted connections are read as requests on the loop (``conn.Conn``); an allowed
CONNECT or SOCKS5 request becomes a tunnel (``relay``), which needs no task of its own.
Outbound connections are ordinary sockets of the process (the daemon's network).

Every request for a destination produces one ``Decision`` for ``on_decision``: refused
(by the name, an address or an unsupported SOCKS command) or allowed (with the address
connected to, or the error that kept it from connecting). Connections dropped for what
they sent (garbage, too slow, too large) are counted in ``rejected`` and logged at debug.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass

from executor.netproxy import splice
from executor.netproxy.conn import Conn, connect
from executor.netproxy.httpproxy import serve_http
from executor.netproxy.policy import (
    Decision,
    ProxyPolicy,
    Refused,
    Resolver,
    Unreachable,
    resolve,
)
from executor.netproxy.relay import Tunnel, open_tunnel
from executor.netproxy.socks import serve_socks4, serve_socks5
from executor.sandbox.network import NetworkPolicy

__all__ = ["ProxyLimits", "ProxyServer"]

log = logging.getLogger("executor.netproxy")

_SOCKS5, _SOCKS4 = 0x05, 0x04
#: Connections accepted per wake-up of the listening socket (asyncio's servers do the same).
_ACCEPT_BATCH = 128
#: Seconds accepting pauses when the process is out of descriptors.
_ACCEPT_PAUSE = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyLimits:
    """What one proxy tolerates from its clients and its upstreams."""

    #: Seconds from accepting a connection to a complete request head (HTTP) or SOCKS5
    #: request; also how long a kept-alive HTTP connection may wait for its next request.
    handshake_timeout: float = 10.0
    #: Seconds to resolve a name and connect to it.
    connect_timeout: float = 10.0
    #: Largest HTTP request (and response) head; past it the answer is 431.
    max_header_bytes: int = 64 * 1024
    #: Client connections at once (handshaking or tunnelling); more are closed at once.
    #: Each tunnel holds two descriptors: the process's descriptor limit must allow it.
    max_connections: int = 1024
    #: Relay tunnels with ``splice(2)`` where the platform has it (else through asyncio
    #: transports, as elsewhere).
    splice: bool = True


class ProxyServer:
    """An HTTP and SOCKS5 proxy applying one ``NetworkPolicy``; see the module docstring.

    ``loopback_ports``: when given, loopback addresses are connected to only at these ports
    (``ProxyPolicy``); ``resolver`` replaces name resolution (tests).
    """

    def __init__(
        self,
        policy: NetworkPolicy,
        *,
        on_decision: Callable[[Decision], None],
        limits: ProxyLimits = ProxyLimits(),
        resolver: Resolver = resolve,
        loopback_ports: Collection[int] | None = None,
    ) -> None:
        self.policy = ProxyPolicy(policy, resolver=resolver, loopback_ports=loopback_ports)
        self.limits = limits
        self._on_decision = on_decision
        self._listener: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool = splice.PipePool() if limits.splice and splice.available() else None
        self._closing = False
        #: Accepted connections not yet handed to a tunnel, and what serves each.
        self._clients: dict[Conn, asyncio.Task[None]] = {}
        #: Upstream connections a handler holds (a plain request's, or one about to become
        #: a tunnel's); handlers close their own, this is for ``close()``.
        self._upstreams: weakref.WeakSet[Conn] = weakref.WeakSet()
        self._tunnels: set[Tunnel] = set()
        #: Requests the policy refused.
        self.refused = 0
        #: Connections dropped for what they sent, or for being one too many.
        self.rejected = 0

    @property
    def splicing(self) -> bool:
        """Whether tunnels are relayed by ``splice(2)``."""
        return self._pool is not None

    @property
    def tunnels(self) -> int:
        """Tunnels currently open."""
        return len(self._tunnels)

    @property
    def connections(self) -> int:
        """Client connections currently open (handshaking, answered or tunnelling)."""
        return len(self._clients) + len(self._tunnels)

    @property
    def address(self) -> tuple[str, int]:
        """The listening socket's address (host, port)."""
        assert self._listener is not None
        name = self._listener.getsockname()
        return name[0], name[1]

    async def start(self, sock: socket.socket) -> None:
        """Serve ``sock`` (bound and listening; the server owns it now)."""
        sock.setblocking(False)
        self._listener = sock
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._accept)

    async def close(self) -> None:
        """Stop accepting and end every connection now (tunnels are cut, not drained)."""
        self._closing = True
        if self._listener is not None and self._loop is not None:
            if self._listener.fileno() >= 0:
                self._loop.remove_reader(self._listener.fileno())
            self._listener.close()
        tasks = list(self._clients.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for upstream in list(self._upstreams):
            upstream.close()
        for tunnel in list(self._tunnels):
            tunnel.close()
        if self._pool is not None:
            self._pool.close()

    # Accepting

    def _accept(self) -> None:
        assert self._listener is not None and self._loop is not None
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, _peer = self._listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:  # out of descriptors: stop accepting for a moment
                log.warning("proxy: cannot accept: %s", exc)
                self._loop.remove_reader(self._listener.fileno())
                self._loop.call_later(_ACCEPT_PAUSE, self._resume_accepting)
                return
            if self.connections >= self.limits.max_connections:
                self.reject("too many connections")
                sock.close()
                continue
            client = Conn(sock)
            self._clients[client] = self._loop.create_task(self._serve(client))

    def _resume_accepting(self) -> None:
        if not self._closing and self._listener is not None and self._loop is not None:
            self._loop.add_reader(self._listener.fileno(), self._accept)

    async def _serve(self, client: Conn) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.handshake_timeout
        try:
            async with asyncio.timeout_at(deadline):
                first = await client.peek()
            if not first:
                pass
            elif first[0] == _SOCKS5:
                await serve_socks5(client, self, deadline)
            elif first[0] == _SOCKS4:
                self.reject("SOCKS4 is not supported")
                await serve_socks4(client)
            elif 0x41 <= first[0] <= 0x5A:  # an HTTP method's first letter
                limits = self.limits
                await serve_http(
                    client, self, deadline, limits.handshake_timeout, limits.max_header_bytes
                )
            else:
                self.reject(f"not a proxy protocol (first byte {first[0]:#04x})")
        except TimeoutError:
            self.reject("nothing sent in time")
        except OSError:
            pass  # the client went away
        except Exception:
            log.exception("proxy: connection failed")
        finally:
            if self._clients.pop(client, None) is not None:
                client.close()

    # Dialer (the protocol handlers' view of the server)

    async def open(self, host: str, port: int, protocol: str) -> Conn:
        """A connection to ``host:port`` if the policy allows it; reports the decision."""
        decision = functools.partial(Decision, host=host, port=port, protocol=protocol)
        reason = "allowed"
        try:
            async with asyncio.timeout(self.limits.connect_timeout):
                vetted = await self.policy.vet(host, port)
                reason = vetted.reason
                upstream, address = await connect(vetted.addresses, port)
        except Refused as exc:
            self.refused += 1
            where = None if exc.address is None else str(exc.address)
            self._report(decision(allowed=False, reason=exc.reason, address=where))
            raise
        except Unreachable as exc:
            self._report(decision(allowed=True, reason=exc.allowed_by or reason, error=str(exc)))
            raise
        except TimeoutError:
            message = f"no connection within {self.limits.connect_timeout:g} s"
            self._report(decision(allowed=True, reason=reason, error=message))
            raise Unreachable(message, kind="timeout") from None
        self._upstreams.add(upstream)
        self._report(decision(allowed=True, reason=reason, address=str(address)))
        return upstream

    def refuse(self, host: str, port: int, protocol: str, reason: str) -> None:
        """Report a request refused for what it asked (a SOCKS command), not where."""
        self.refused += 1
        self._report(
            Decision(host=host, port=port, allowed=False, reason=reason, protocol=protocol)
        )

    def reject(self, reason: str) -> None:
        """Count and log a connection dropped for what it sent."""
        self.rejected += 1
        log.debug("proxy: connection dropped: %s", reason)

    async def tunnel(self, client: Conn, upstream: Conn) -> None:
        """Relay ``client`` and ``upstream`` from now on; the tunnel owns both."""
        self._clients.pop(client, None)
        self._upstreams.discard(upstream)
        try:
            tunnel = await open_tunnel(
                client, upstream, pool=self._pool, on_closed=self._tunnels.discard
            )
        except BaseException:
            client.close()
            upstream.close()
            raise
        if self._closing:
            tunnel.close()
        else:
            self._tunnels.add(tunnel)

    def _report(self, decision: Decision) -> None:
        try:
            self._on_decision(decision)
        except Exception:  # a logging hook must not take the proxy down
            log.exception("proxy: on_decision failed for %s", decision)
