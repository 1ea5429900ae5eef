"""One JSON-RPC connection: request ids, pending answers, notifications in arrival order.

Its reader task starts with the connection, before any request, so notifications the
server pushes during a resume handshake are consumed at once (a full transport must never
hold the ``initialize`` answer behind them). Notifications are handed, one at a time and in
arrival order, to a synchronous callback; the order of one process's events is kept by the
process handle, not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from typing import Any

from executor.client.errors import ClientError, ConnectionLost, MessageTooLarge, ServerError
from executor.client.transport import Transport

__all__ = ["RpcConnection"]

_log = logging.getLogger("executor.client")

#: Request ids are unique across every connection of a process's clients, which makes a
#: transcript easy to read; the server only needs them unique per connection.
_ids = itertools.count(1)

NotificationHandler = Callable[["RpcConnection", str, Any], None]
ClosedHandler = Callable[["RpcConnection", str], None]


class RpcConnection:
    """Requests and notifications over one ``Transport``."""

    def __init__(
        self,
        transport: Transport,
        *,
        on_notification: NotificationHandler,
        on_closed: ClosedHandler,
        generation: int = 0,
    ) -> None:
        self._transport = transport
        self._on_notification = on_notification
        self._on_closed = on_closed
        self.generation = generation
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._closed_reason: str | None = None
        self._reader = asyncio.get_running_loop().create_task(
            self._read(), name=f"executor-client-reader-{generation}"
        )

    @property
    def closed(self) -> bool:
        """The connection has ended (no more answers or notifications will come)."""
        return self._closed_reason is not None

    @property
    def closed_reason(self) -> str:
        """Why it ended (empty while open)."""
        return self._closed_reason or ""

    async def call(self, method: str, params: Any) -> Any:
        """Send a request and wait for its result.

        Raises ``ServerError`` for an error answer and ``ConnectionLost`` when the connection
        ends first (``sent`` says whether the request had left).
        """
        if self._closed_reason is not None:
            raise ConnectionLost(self._closed_reason, sent=False)
        request_id = next(_ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            try:
                await self._transport.send({"id": request_id, "method": method, "params": params})
            except ConnectionLost as exc:
                # The transport knew before the reader did: end the connection now, or a
                # caller retrying at once would find it open again, and spin.
                del self._pending[request_id]
                future.cancel()
                self._end(str(exc))
                raise
            return await future
        except ServerError as exc:
            raise ServerError(exc.code, exc.message, method, exc.data) from None
        finally:
            self._pending.pop(request_id, None)

    async def notify(self, method: str, params: Any) -> None:
        """Send a notification."""
        if self._closed_reason is not None:
            raise ConnectionLost(self._closed_reason, sent=False)
        try:
            await self._transport.send({"method": method, "params": params})
        except ConnectionLost as exc:
            self._end(str(exc))
            raise

    async def close(self) -> None:
        """Close the transport and wait for the reader to finish; idempotent."""
        self._end("closed by the client")
        with contextlib.suppress(Exception):
            await self._transport.close()
        if self._reader is not asyncio.current_task():
            # Closed, the transport ends the reader; a reader stuck anyway is cancelled.
            if not self._reader.done():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self._reader), timeout=1.0)
                self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    async def _read(self) -> None:
        reason = "connection closed"
        too_large: MessageTooLarge | None = None
        try:
            while True:
                message = await self._transport.receive()
                if message is None:
                    break
                self._dispatch(message)
        except asyncio.CancelledError:
            reason = "connection closed by the client"
            raise
        except MessageTooLarge as exc:
            reason, too_large = str(exc), exc
        except (ClientError, OSError, ValueError) as exc:
            reason = f"connection failed: {exc}"
        finally:
            self._end(reason, too_large)
            # Release the socket or pipes now; the owner decides what the loss means.
            with contextlib.suppress(Exception):
                await self._transport.close()

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "method" in message and "id" not in message:
            try:
                self._on_notification(self, message["method"], message.get("params"))
            except Exception:
                # One malformed notification must not take the connection down with it.
                _log.exception("executor client: bad %s notification", message.get("method"))
            return
        request_id = message.get("id")
        future = self._pending.get(request_id) if isinstance(request_id, int) else None
        if future is None or future.done():
            if request_id == -1 and "error" in message:
                _log.warning("executor client: the server reported %s", message["error"])
            return
        if "error" in message:
            error = message["error"] or {}
            future.set_exception(
                ServerError(
                    int(error.get("code", 0)), str(error.get("message", "")), data=error.get("data")
                )
            )
        else:
            future.set_result(message.get("result"))

    def _end(self, reason: str, too_large: MessageTooLarge | None = None) -> None:
        if self._closed_reason is not None:
            return
        self._closed_reason = reason
        for future in self._pending.values():
            if not future.done():
                # Which call the oversized message answered is unknown (its payload was
                # never read): every call waiting fails with it, each with an error of
                # its own (an exception raised in several tasks would share a traceback).
                cause = None if too_large is None else MessageTooLarge(too_large.limit)
                future.set_exception(ConnectionLost(reason, cause=cause))
        self._on_closed(self, reason)
