"""The errors the client raises; every one is a ``ClientError``."""

from __future__ import annotations

__all__ = [
    "ClientError",
    "ConnectionLost",
    "HttpBodyError",
    "MessageTooLarge",
    "OutcomeUnknown",
    "ProcessLost",
    "ServerError",
    "SessionFailed",
]

#: ``session <id> is already attached to another connection``: the old connection is
#: still attached on the server's side; a resume retries until it is gone.
SESSION_ATTACHED = -32010


class ClientError(Exception):
    """Anything the client reports."""


class ServerError(ClientError):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, method: str = "", data: object = None) -> None:
        super().__init__(f"{method}: {message} ({code})" if method else f"{message} ({code})")
        self.code = code
        self.message = message
        self.method = method
        #: The error's ``data`` member, if the server sent one.
        self.data = data

    @property
    def kind(self) -> str | None:
        """What kind of failure a failed ``process/start`` was (``data.kind``:
        ``spawnNotFound``, ``spawnPermissionDenied``, ``spawnFailed``,
        ``sandboxUnavailable``, ``sandboxPreparation``), if the server said."""
        kind = self.data.get("kind") if isinstance(self.data, dict) else None
        return kind if isinstance(kind, str) else None


class ConnectionLost(ClientError):
    """The connection closed under a request. Internal to one connection generation: the
    environment turns it into a retry, an ``OutcomeUnknown`` or a ``SessionFailed``."""

    def __init__(
        self,
        message: str = "connection closed",
        *,
        sent: bool = True,
        cause: ClientError | None = None,
    ) -> None:
        super().__init__(message)
        #: Whether the request had been handed to the transport (if not, it never ran).
        self.sent = sent
        #: Why the connection was closed, when sending the request again would only meet
        #: it again (``MessageTooLarge``): a read-only call raises it instead of a retry.
        self.cause = cause


class MessageTooLarge(ClientError):
    """The executor sent a message larger than the client accepts (``max_message_bytes``
    of ``connect``). The client closed that connection: every call waiting on it fails
    (one that changes something with ``OutcomeUnknown``) and the session is resumed on a
    new one, as after any drop."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the executor sent a message larger than this client accepts "
            f"(max_message_bytes={limit}); the connection was closed, and the calls waiting "
            f"on it fail. Raise the bound with connect(..., max_message_bytes=N) (None: no "
            f"bound), or read a large file with fs.read_stream"
        )
        #: The bound that was exceeded, in bytes.
        self.limit = limit


class OutcomeUnknown(ClientError):
    """A request that changes something was in flight when the connection dropped: it may
    or may not have taken effect, and the client does not send it again on its own."""

    def __init__(self, method: str, detail: str = "") -> None:
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"{method}: the connection dropped before the answer arrived; whether it took "
            f"effect is unknown, and it was not sent again{extra}"
        )
        self.method = method
        #: For ``process/write``: its ``writeId``; resending with it is safe (the server
        #: accepts an id once).
        self.write_id: str | None = None


class SessionFailed(ClientError):
    """The session is gone for good: it could not be resumed before the deadline, the
    server refused it, or the environment was closed. Every later call raises it too."""


class ProcessLost(ClientError):
    """One process could not be followed: output it missed while the connection was down,
    or that its reader did not keep up with, is no longer retained by the server (or the
    catch-up failed); the others go on."""

    def __init__(self, process_id: str, reason: str, *, recovering: bool = True) -> None:
        when = " while recovering" if recovering else ""
        super().__init__(f"process {process_id} was lost{when}: {reason}")
        self.process_id = process_id
        self.reason = reason


class HttpBodyError(ClientError):
    """A streamed response body did not arrive whole: the executor reported an error
    half-way, or the connection dropped (``connection_lost``; a body cannot be resumed)."""

    def __init__(self, url: str, reason: str, *, connection_lost: bool = False) -> None:
        super().__init__(f"http/request {url}: the response body failed: {reason}")
        self.url = url
        self.reason = reason
        #: The connection to the executor dropped while the body was streaming.
        self.connection_lost = connection_lost
