"""One HTTP exchange: connect, send, follow redirects, read the body — under one deadline.

The blocking work is ``http.client`` in worker threads (a pool of their own), so the event
loop never waits on the network. What must stop a blocked thread — the deadline, or the
caller going away — shuts the current socket down from the loop (``abort``); the thread then
fails at once and reports the failure the reference would. This module knows HTTP and the
executor's policy callback, nothing of JSON-RPC.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import functools
import http.client
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from executor.http.params import OutgoingRequest
from executor.http.url import UnsupportedScheme, Url, UrlError

__all__ = ["MAX_WORKERS", "BodyFailure", "BodyTooLarge", "Exchange", "HttpFailure", "ResponseHead"]

T = TypeVar("T")

#: reqwest's default: ten redirects are followed; the eleventh 3xx is an error.
MAX_REDIRECTS: Final = 10
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
#: Dropped from a redirected request that leaves the origin (scheme, host, port).
_SENSITIVE: Final = frozenset(
    {"authorization", "cookie", "cookie2", "proxy-authorization", "www-authenticate"}
)
#: Describe a body that a redirect to GET no longer has.
_BODY_HEADERS: Final = frozenset(
    {"content-length", "content-type", "content-encoding", "transfer-encoding"}
)


class HttpFailure(Exception):
    """The request failed before a response head arrived; ``detail`` is the reference's text."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class BodyFailure(Exception):
    """The response body could not be read to its end (cut short, bad chunking, deadline)."""

    detail: Final = "error decoding response body"


class _StaleConnection(Exception):
    """A connection was closed by its peer before any of the response arrived."""


class BodyTooLarge(Exception):
    """A buffered body outgrew its limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


#: Most exchanges blocked in the network at once. Their own pool, not the loop's default
#: executor: a slow server or a long stream holds a thread, and must never hold up the
#: filesystem methods or the stdio transport, which use the default one.
MAX_WORKERS: Final = 64


@functools.cache
def _workers() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(MAX_WORKERS, thread_name_prefix="http-request")


@functools.cache
def _resolvers() -> concurrent.futures.ThreadPoolExecutor:
    """Name lookups (getaddrinfo blocks); their own few threads, so that lookups can never
    wait for the request workers that wait for them."""
    return concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="http-resolve")


async def _open_socket(host: str, port: int) -> socket.socket:
    """A connected non-blocking TCP socket to ``host``: each address in turn, as
    ``socket.create_connection`` would, but cancellable at every step."""
    loop = asyncio.get_running_loop()
    lookup = functools.partial(socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        addresses = await loop.run_in_executor(_resolvers(), lookup)
    else:
        addresses = lookup()  # a literal address: nothing to look up, nothing blocks
    failure: OSError = OSError(errno.EHOSTUNREACH, "no address to connect to")
    for family, kind, protocol, _name, address in addresses:
        sock = socket.socket(family, kind, protocol)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            failure = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise failure


#: Idle keep-alive connections kept per origin, and for how long (reqwest keeps them 90 s;
#: shorter here, since most servers close idle connections after 60 s or so).
POOL_PER_ORIGIN: Final = 8
POOL_IDLE_SECONDS: Final = 30.0


class ConnectionPool:
    """Idle keep-alive connections by origin, so a client's next request skips TCP and TLS
    set-up, as the reference's client does. A connection goes back only after its response
    was read to the end and neither side asked to close it."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, str, int], list[tuple[float, http.client.HTTPConnection]]]
        self._idle = {}
        self._lock = threading.Lock()

    def take(self, origin: tuple[str, str, int]) -> http.client.HTTPConnection | None:
        """The most recently used live idle connection to ``origin``, if any."""
        now = time.monotonic()
        with self._lock:
            idle = self._idle.get(origin, [])
            while idle:
                since, connection = idle.pop()
                if now - since < POOL_IDLE_SECONDS:
                    return connection
                connection.close()
        return None

    def give(self, origin: tuple[str, str, int], connection: http.client.HTTPConnection) -> None:
        """Keep ``connection`` for the next request to ``origin``."""
        now = time.monotonic()
        with self._lock:
            for key, entries in list(self._idle.items()):  # drop what expired anywhere
                for since, stale in [e for e in entries if now - e[0] >= POOL_IDLE_SECONDS]:
                    entries.remove((since, stale))
                    stale.close()
                if not entries:
                    del self._idle[key]
            idle = self._idle.setdefault(origin, [])
            idle.append((now, connection))
            if len(idle) > POOL_PER_ORIGIN:
                idle.pop(0)[1].close()


#: One pool for the daemon: connections are not tied to a client or a session.
POOL: Final = ConnectionPool()


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseHead:
    """Status and headers (lowercase names, wire order, duplicates kept)."""

    status: int
    headers: tuple[tuple[str, str], ...]


class Exchange:
    """One request and its response body. ``open`` once, ``read`` until b"", ``close``.

    ``check_host`` vets every redirect hop (it raises to refuse one). The deadline starts at
    ``open`` and covers everything up to the end of the body.
    """

    def __init__(
        self,
        request: OutgoingRequest,
        *,
        tls: Callable[[], ssl.SSLContext],
        check_host: Callable[[str], None],
    ) -> None:
        self.request = request
        self._tls = tls
        self._check_host = check_host
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._aborted = False
        self._timer: asyncio.TimerHandle | None = None
        self._response: http.client.HTTPResponse | None = None
        self._connection: http.client.HTTPConnection | None = None
        self._origin: tuple[str, str, int] | None = None
        #: The response was read to its end on a connection both sides keep open.
        self._reusable = False
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The lookup-and-connect running on the loop for the worker thread, if any.
        self._connecting: concurrent.futures.Future[socket.socket] | None = None

    # --- the loop side ---------------------------------------------------------------------

    async def open(self) -> ResponseHead:
        """Send the request (following redirects) and return the final response's head."""
        timeout = self.request.timeout
        if timeout == 0:
            # What the reference answers for a zero deadline, before any connection attempt.
            raise HttpFailure("route-aware request timed out")
        if timeout is not None:
            self._timer = asyncio.get_running_loop().call_later(timeout, self.abort)
        return await self._in_thread(self._open)

    async def read(self, size: int) -> bytes:
        """Up to ``size`` bytes of body; b"" at its end. ``BodyFailure`` if it breaks off."""
        return await self._in_thread(self._read, size)

    async def fetch(self, limit: int) -> tuple[ResponseHead, bytes]:
        """``open`` and the whole body in one trip to a worker thread (buffered mode).

        ``BodyTooLarge`` past ``limit`` bytes; ``HttpFailure``/``BodyFailure`` as above.
        """
        if self.request.timeout == 0:
            raise HttpFailure("route-aware request timed out")
        if self.request.timeout is not None:
            self._timer = asyncio.get_running_loop().call_later(self.request.timeout, self.abort)
        return await self._in_thread(self._fetch, limit)

    async def _in_thread(self, work: Callable[..., T], *args: object) -> T:
        loop = self._loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(_workers(), functools.partial(work, *args))
        except asyncio.CancelledError:
            self.abort()  # the thread may still be blocked: make it return
            raise

    def abort(self) -> None:
        """Stop the exchange from any thread: a lookup or connect in progress is cancelled,
        blocked reads and writes fail immediately."""
        with self._lock:
            self._aborted = True
            if self._connecting is not None:
                self._connecting.cancel()
            if self._socket is not None:
                _shutdown(self._socket)

    def close(self) -> None:
        """Release the deadline, and pool or close the connection."""
        if self._timer is not None:
            self._timer.cancel()
        if not self._reusable:
            # A worker may still be blocked on the socket (a cancelled read): wake it. A body
            # read to its end leaves no worker behind, and the connection may serve again.
            self.abort()
        self._detach()

    # --- the thread side -------------------------------------------------------------------

    def _open(self) -> ResponseHead:
        request = self.request
        url, method, body = request.url, request.method, request.body
        headers = list(request.headers)
        hops = 0
        while True:
            response = self._send(url, method, headers, body)
            target = self._redirect_target(url, response) if request.follow_redirects else None
            if target is None:
                return _head(response)
            if hops == MAX_REDIRECTS:
                raise HttpFailure("too many redirects")
            hops += 1
            self._check_host(target.host)
            self._detach()
            method, body, headers = _redirected(response.status, url, target, method, body, headers)
            url = target

    def _redirect_target(self, url: Url, response: http.client.HTTPResponse) -> Url | None:
        location = response.getheader("location")
        if response.status not in _REDIRECTS or location is None:
            return None
        try:
            target = url.join(location.encode("latin-1").decode("utf-8", "replace"))
        except UnsupportedScheme as exc:
            raise HttpFailure(
                f"redirect target uses unsupported URL scheme: {exc.scheme}"
            ) from None
        except UrlError:
            return None  # an unusable Location: the 3xx itself is the answer, as in the reference
        return target

    def _send(
        self, url: Url, method: str, headers: list[tuple[str, bytes]], body: bytes
    ) -> http.client.HTTPResponse:
        failure = HttpFailure(f"error sending request for url ({url.display()})")
        self._origin = url.origin()
        pooled = POOL.take(self._origin)
        if pooled is not None:
            try:
                return self._exchange(pooled, url, method, headers, body, failure)
            except _StaleConnection:
                pass  # the server closed it while idle: nothing was sent, so send it afresh
        try:
            connection = http.client.HTTPConnection(url.hostname, url.port)
            connection.sock = self._connect(url)
        except (OSError, ValueError) as exc:
            raise failure from exc
        try:
            return self._exchange(connection, url, method, headers, body, failure)
        except _StaleConnection as exc:
            raise failure from exc.__cause__

    def _exchange(
        self,
        connection: http.client.HTTPConnection,
        url: Url,
        method: str,
        headers: list[tuple[str, bytes]],
        body: bytes,
        failure: HttpFailure,
    ) -> http.client.HTTPResponse:
        """Send on ``connection`` and read the response head.

        ``_StaleConnection`` when the peer closed the connection before answering a single
        byte (an idle pooled connection the server dropped); ``failure`` otherwise.
        """
        assert connection.sock is not None
        with self._lock:
            self._connection, self._socket = connection, connection.sock
            if self._aborted:
                _shutdown(connection.sock)
        try:
            _write_request(connection, url, method, headers, body)
            response = connection.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
            connection.close()
            if self._aborted:
                raise failure from exc
            raise _StaleConnection from exc
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise failure from exc
        self._response = response
        if self._aborted:
            raise failure
        return response

    def _connect(self, url: Url) -> socket.socket:
        # The lookup and the TCP handshake run on the event loop, where abort() can cancel
        # them: a blocking connect() in this thread could not be interrupted (shutdown() does
        # nothing to a socket that is still connecting).
        assert self._loop is not None
        connecting = asyncio.run_coroutine_threadsafe(
            _open_socket(url.hostname, url.port), self._loop
        )
        with self._lock:
            self._connecting = connecting
            if self._aborted:
                connecting.cancel()
        try:
            sock = connecting.result()
        except concurrent.futures.CancelledError:
            raise ConnectionAbortedError(errno.ECONNABORTED, "request aborted") from None
        finally:
            with self._lock:
                self._connecting = None
        sock.setblocking(True)  # the deadline is enforced by abort(), over the whole exchange
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if url.scheme == "https":
            # The handshake happens after the socket is registered, so abort() reaches it too.
            sock = self._tls().wrap_socket(
                sock, server_hostname=url.hostname, do_handshake_on_connect=False
            )
        with self._lock:
            self._socket = sock
            if self._aborted:
                _shutdown(sock)
        if isinstance(sock, ssl.SSLSocket):
            sock.do_handshake()
        return sock

    def _detach(self) -> None:
        """Drop the current response, and pool or close its connection (a redirect, the end)."""
        with self._lock:
            sock, self._socket = self._socket, None
            response, self._response = self._response, None
            connection, self._connection = self._connection, None
            reusable, self._reusable = self._reusable and not self._aborted, False
        if reusable and connection is not None and self._origin is not None:
            POOL.give(self._origin, connection)
            return
        if response is not None:
            response.close()  # the socket's file object: the descriptor closes with both gone
        if connection is not None:
            connection.close()
        if sock is not None:
            sock.close()

    def _fetch(self, limit: int) -> tuple[ResponseHead, bytes]:
        head = self._open()
        body = bytearray()
        while data := self._read(1 << 20):
            body += data
            if len(body) > limit:
                raise BodyTooLarge(limit)
        return head, bytes(body)

    def _read(self, size: int) -> bytes:
        response = self._response
        if response is None:
            return b""
        try:
            data = response.read1(size)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise BodyFailure from exc
        if self._aborted:
            raise BodyFailure
        if not data and response.length:  # the peer closed before Content-Length was reached
            raise BodyFailure
        if not data and not response.will_close:
            # http.client sends on a connection only once its last response is closed, and
            # read1 does not close one whose Content-Length ran out.
            response.close()
            self._reusable = True
        return data


def _write_request(
    connection: http.client.HTTPConnection,
    url: Url,
    method: str,
    headers: list[tuple[str, bytes]],
    body: bytes,
) -> None:
    """Send the head in the reference's order: the caller's headers, then the defaults."""
    connection.putrequest(method, url.target, skip_host=True, skip_accept_encoding=True)
    names = {name for name, _ in headers}
    for name, value in headers:
        connection.putheader(name, value)
    if "accept" not in names:
        connection.putheader("accept", "*/*")
    if "host" not in names:
        connection.putheader("host", url.authority)
    if body and "content-length" not in names and "transfer-encoding" not in names:
        connection.putheader("content-length", str(len(body)))
    connection.endheaders(body or None)


def _redirected(
    status: int,
    previous: Url,
    target: Url,
    method: str,
    body: bytes,
    headers: list[tuple[str, bytes]],
) -> tuple[str, bytes, list[tuple[str, bytes]]]:
    """Method, body and headers of the next hop (reqwest's rules, which browsers share)."""
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        method, body = "GET", b""
        headers = [(n, v) for n, v in headers if n not in _BODY_HEADERS]
    if target.origin() != previous.origin():
        headers = [(n, v) for n, v in headers if n not in _SENSITIVE]
    headers = [(n, v) for n, v in headers if n != "referer"]
    if not (previous.scheme == "https" and target.scheme == "http"):
        headers.append(("referer", previous.referer().encode("ascii")))
    return method, body, headers


def _head(response: http.client.HTTPResponse) -> ResponseHead:
    return ResponseHead(
        status=response.status,
        headers=tuple((name.lower(), value) for name, value in response.getheaders()),
    )


def _shutdown(sock: socket.socket) -> None:
    try:
        # ``socket.socket.shutdown`` even on an SSLSocket: wake the reader without TLS state.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass
