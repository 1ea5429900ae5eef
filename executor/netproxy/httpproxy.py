"""HTTP proxying: CONNECT tunnels and plain requests (``GET http://host:port/path``).

Requests are parsed by h11 (framing, size limits, smuggling defences are its job). A CONNECT
is answered ``200 Connection established`` once the upstream connection stands, and
becomes a byte tunnel. A plain request is forwarded in origin form (``GET /path``) with
``Host`` set from the URL and the hop-by-hop headers dropped (``Connection`` and what it
names, ``Keep-Alive``, ``Proxy-Authorization``, ``Proxy-Connection``, ``TE``, ``Trailer``,
``Upgrade``); each request gets its own upstream connection (``Connection: close``), and
the client's connection is kept alive between requests as HTTP/1.1 allows — every request,
like every redirect the client follows, is vetted again.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import TYPE_CHECKING, Final

import h11

from executor.netproxy.conn import Conn
from executor.netproxy.policy import Refused, Unreachable
from executor.netproxy.relay import Dialer

if TYPE_CHECKING:
    from h11._headers import Headers as H11Headers

__all__ = ["answer", "linger_close", "serve_http"]

_HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
    }
)
#: Never dropped because ``Connection`` names them: h11 framed the message by them.
_FRAMING: Final = frozenset({b"content-length", b"transfer-encoding"})
_REASONS: Final = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    504: "Gateway Timeout",
}
#: How long a refused client may keep sending (a request body) after its answer, so that
#: closing does not reset the connection before the client read the answer.
LINGER: Final = 2.0
_ESTABLISHED: Final = b"HTTP/1.1 200 Connection established\r\n\r\n"

Headers = list[tuple[bytes, bytes]]


class _BadTarget(ValueError):
    """A request target the proxy does not serve (the message says what it needs)."""


class _UpstreamFailed(Exception):
    """The upstream server's response broke off or was not HTTP."""


async def answer(client: Conn, status: int, text: str) -> None:
    """A one-line plain-text answer, then a lingering close."""
    body = (text + "\n").encode("utf-8", "backslashreplace")
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    try:
        await client.send(head.encode("ascii") + body)
    except OSError:
        client.close()
        return
    await linger_close(client)


async def linger_close(client: Conn) -> None:
    """Shut down our side, read (and drop) what the client still sends for a while, close:
    closing with unread data would reset the connection, and the client could lose the
    answer it had not read yet."""
    client.shutdown_write()
    try:
        async with asyncio.timeout(LINGER):
            while await client.read():
                pass
    except (TimeoutError, OSError):
        pass
    client.close()


def _text(raw: bytes) -> str:
    return raw.decode("ascii", "backslashreplace")


def _authority(target: bytes) -> tuple[str, int]:
    """``(host, port)`` of a CONNECT target (``host:port``, ``[v6]:port``)."""
    host, colon, port_text = _text(target).rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        host = ""
    if not colon or not host or not port_text.isascii() or not port_text.isdigit():
        raise _BadTarget("CONNECT needs host:port")
    return host, int(port_text)


def _absolute(target: bytes) -> tuple[str, int, bytes, bytes]:
    """``(host, port, authority, origin-form target)`` of an absolute ``http://`` URL."""
    text = _text(target)
    if text[:7].lower() != "http://":
        if text[:8].lower() == "https://":
            raise _BadTarget("https:// goes through CONNECT, not a plain proxy request")
        raise _BadTarget("a proxy request needs an absolute http:// URL")
    try:
        parts = urllib.parse.urlsplit(text)
        hostname = parts.hostname
    except ValueError:  # a broken IPv6 literal
        raise _BadTarget("the URL's host is not a host") from None
    try:
        port = 80 if parts.port is None else parts.port
    except ValueError:
        raise _BadTarget("the URL's port is not a port number") from None
    if not hostname or "@" in parts.netloc:
        raise _BadTarget("the URL needs a host (and no user name)")
    origin = parts.path or "/"
    if parts.query:
        origin = f"{origin}?{parts.query}"
    return hostname, port, parts.netloc.encode("ascii"), origin.encode("ascii")


def _end_to_end(headers: H11Headers, *, drop: frozenset[bytes] = frozenset()) -> Headers:
    """``headers`` without the hop-by-hop ones (and those ``Connection`` names)."""
    named = {
        token.strip().lower()
        for name, value in headers
        if name == b"connection"
        for token in value.split(b",")
    } - _FRAMING
    return [
        (name, value)
        for name, value in headers.raw_items()
        if (lower := name.lower()) not in _HOP_BY_HOP and lower not in named and lower not in drop
    ]


async def _next(conn: h11.Connection, pipe: Conn) -> h11.Event | type[h11.PAUSED]:
    """The next event of ``conn``, reading from ``pipe`` as it needs."""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await pipe.read())
            continue
        return event  # type: ignore[return-value]  # h11's sentinels are types


async def _next_request(conn: h11.Connection, client: Conn) -> h11.Request | None:
    event = await _next(conn, client)
    if isinstance(event, h11.Request):
        return event
    return None  # closed (or paused: pipelined data after a close)


async def serve_http(
    client: Conn, dialer: Dialer, deadline: float, idle: float, limit: int
) -> None:
    """Serve HTTP proxy requests on ``client``: the first head must be complete by
    ``deadline`` (loop time), each later one within ``idle`` seconds; heads are at most
    ``limit`` bytes. The caller closes ``client`` unless it became a tunnel."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limit)
    loop = asyncio.get_running_loop()
    while True:
        try:
            async with asyncio.timeout_at(deadline):
                request = await _next_request(conn, client)
        except TimeoutError:
            if conn.their_state is not h11.IDLE or conn.trailing_data[0]:  # not just idle
                dialer.reject("request head not complete in time")
                await answer(client, 408, "request head not complete in time")
            return
        except h11.RemoteProtocolError as exc:
            status = 431 if exc.error_status_hint == 431 else 400
            dialer.reject(f"bad request: {exc}")
            await answer(client, status, f"bad request: {exc}")
            return
        except OSError:
            return
        if request is None:
            return
        if request.method == b"CONNECT":
            await _tunnel(conn, request, client, dialer)
            return
        if not await _forward(conn, request, client, dialer, limit):
            if not client.closed:
                await linger_close(client)
            return
        try:
            conn.start_next_cycle()
        except h11.LocalProtocolError:  # not both done: the connection cannot be reused
            return
        deadline = loop.time() + idle


async def _open(client: Conn, dialer: Dialer, host: str, port: int, kind: str) -> Conn | None:
    """The upstream connection, or None when the client was answered (refused, failed)."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        return await dialer.open(host, port, kind)
    except Refused as exc:
        await answer(client, 403, f"executor proxy refused {shown}: {exc.reason}")
    except Unreachable as exc:
        await answer(client, 504 if exc.kind == "timeout" else 502, f"{shown}: {exc}")
    return None


async def _tunnel(conn: h11.Connection, request: h11.Request, client: Conn, dialer: Dialer) -> None:
    try:
        host, port = _authority(request.target)
    except _BadTarget as exc:
        await answer(client, 400, str(exc))
        return
    early = conn.trailing_data[0]  # what the client sent after the head (a TLS hello)
    upstream = await _open(client, dialer, host, port, "connect")
    if upstream is None:
        return
    try:
        await client.send(_ESTABLISHED)
    except BaseException:
        upstream.close()
        raise
    client.unread(early)
    await dialer.tunnel(client, upstream)


async def _forward(
    conn: h11.Connection, request: h11.Request, client: Conn, dialer: Dialer, limit: int
) -> bool:
    """Forward one plain request and its response; whether the client's connection may
    carry another request."""
    try:
        host, port, authority, origin = _absolute(request.target)
    except _BadTarget as exc:
        await answer(client, 400, str(exc))
        return False
    upstream = await _open(client, dialer, host, port, "http")
    if upstream is None:
        return False
    up = h11.Connection(h11.CLIENT, max_incomplete_event_size=limit)
    headers = [
        (b"Host", authority),
        *_end_to_end(request.headers, drop=frozenset({b"host"})),
        (b"Connection", b"close"),
    ]
    try:
        await upstream.send(
            up.send(h11.Request(method=request.method, target=origin, headers=headers))
        )
    except h11.LocalProtocolError as exc:
        upstream.close()
        await answer(client, 400, f"cannot forward this request: {exc}")
        return False
    except OSError as exc:
        upstream.close()
        await answer(client, 502, f"{_text(authority)}: {exc.strerror or exc}")
        return False
    except BaseException:
        upstream.close()
        raise
    sending = asyncio.create_task(_send_body(conn, client, up, upstream))
    failure: Exception | None = None
    try:
        await _relay_response(conn, client, up, upstream, sending)
    except (_UpstreamFailed, h11.ProtocolError, OSError) as exc:
        failure = exc
    finally:
        upstream.close()
        if not sending.done():
            sending.cancel()
        (sent,) = await asyncio.gather(sending, return_exceptions=True)
    if failure is None:
        return sent is None  # the request ended too: the connection may carry another
    if conn.our_state is h11.SEND_RESPONSE and not client.closed:
        await answer(client, 502, f"{_text(authority)}: {failure or 'connection lost'}")
    else:
        client.reset()  # the response broke off: the client must not take it as whole
    return False


async def _send_body(
    conn: h11.Connection, client: Conn, up: h11.Connection, upstream: Conn
) -> None:
    """The request body, client to upstream; on a broken body the upstream is reset."""
    try:
        while True:
            event = await _next(conn, client)
            if isinstance(event, h11.Data):
                await upstream.send(up.send(h11.Data(data=event.data)))
            elif isinstance(event, h11.EndOfMessage):
                await upstream.send(up.send(h11.EndOfMessage(headers=event.headers)))
                return
            else:
                raise ConnectionResetError("the client closed before its request ended")
    except (h11.ProtocolError, OSError):
        upstream.reset()
        raise


async def _relay_response(
    conn: h11.Connection,
    client: Conn,
    up: h11.Connection,
    upstream: Conn,
    sending: asyncio.Task[None],
) -> None:
    while True:
        event = await _next(up, upstream)
        if isinstance(event, h11.InformationalResponse):
            if event.status_code == 101:
                raise _UpstreamFailed("the server switched protocols, which was not asked for")
            informational = h11.InformationalResponse(
                status_code=event.status_code, headers=_end_to_end(event.headers)
            )
            await client.send(conn.send(informational))
        elif isinstance(event, h11.Response):
            headers = _end_to_end(event.headers)
            if not sending.done():
                await asyncio.sleep(0)  # a request that has arrived whole is sent by now
            if not sending.done():
                headers.append((b"Connection", b"close"))  # the request is still arriving
            response = h11.Response(
                status_code=event.status_code, headers=headers, reason=event.reason
            )
            await client.send(conn.send(response))
        elif isinstance(event, h11.Data):
            await client.send(conn.send(h11.Data(data=event.data)))
        elif isinstance(event, h11.EndOfMessage):
            await client.send(conn.send(h11.EndOfMessage(headers=event.headers)))
            return
        else:
            raise _UpstreamFailed("the server closed the connection before answering")
