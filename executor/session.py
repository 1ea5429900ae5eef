"""Sessions: created by ``initialize``, detached on disconnect, resumed by id, expired by TTL.

A session owns its process table; a connection only borrows the session while attached. On
disconnect the session detaches and its processes keep running (their notifications are
dropped; output stays readable through ``process/read``). A detached session that is not
resumed within the TTL expires and its process trees are stopped. The registry never touches
the event loop itself: scheduling and closing are injected, so the logic is testable alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Protocol

from executor.errors import InvalidRequest, SessionAttached
from executor.protocol.jsonrpc import Spliced

__all__ = ["Attachment", "Cancellable", "Session", "SessionRegistry", "SessionResources"]

#: The reference keeps a detached session ~80 s; clients reconnecting within that resume it.
DEFAULT_SESSION_TTL = 80.0


class Attachment(Protocol):
    """The connection side of an attached session."""

    def notify(self, method: str, params: dict[str, Any] | Spliced) -> None:
        """Deliver a notification to the client (``Spliced``: params as ready JSON parts)."""

    @property
    def congested(self) -> bool:
        """Too much is queued for this client; producers should pause."""

    def on_drain(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the queue drains or the connection ends."""


class SessionResources(Protocol):
    """What a session owns and must release when it ends (its process table)."""

    async def close(self) -> None:
        """Stop and release everything."""


class Cancellable(Protocol):
    """A scheduled call that can be cancelled (``asyncio.TimerHandle`` fits)."""

    def cancel(self) -> None:
        """Do not run the call."""


class Session:
    """One client session: an id, the resources it owns, and at most one attachment."""

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.attachment: Attachment | None = None
        self.resources: Any = None
        self._expiry: Cancellable | None = None
        self._attachments = 0

    def attach(self, attachment: Attachment) -> None:
        """``attachment`` receives the notifications from now on."""
        self.attachment = attachment
        self._attachments += 1

    # The session is the ``Notifier`` its processes talk to.

    @property
    def attachment_id(self) -> int | None:
        """Which attachment gets notifications now (a new number each time); None if none."""
        return self._attachments if self.attachment is not None else None

    def notify(self, method: str, params: dict[str, Any] | Spliced) -> None:
        """Forward to the attached connection; dropped while detached."""
        if self.attachment is not None:
            self.attachment.notify(method, params)

    @property
    def congested(self) -> bool:
        """Whether the attached connection is congested (never while detached)."""
        return self.attachment is not None and self.attachment.congested

    def on_drain(self, callback: Callable[[], None]) -> None:
        """Wait for the attached connection to drain; immediate while detached."""
        if self.attachment is not None:
            self.attachment.on_drain(callback)
        else:
            callback()


class SessionRegistry:
    """All sessions of one daemon (or of one stdio connection)."""

    def __init__(
        self,
        *,
        ttl: float = DEFAULT_SESSION_TTL,
        schedule: Callable[[float, Callable[[], None]], Cancellable],
        make_resources: Callable[[Session], SessionResources],
        on_expired: Callable[[Session], None],
    ) -> None:
        self.ttl = ttl
        self._schedule = schedule
        self._make_resources = make_resources
        self._on_expired = on_expired
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Any:
        return iter(list(self._sessions.values()))

    def get(self, session_id: str) -> Session | None:
        """The live session with this id."""
        return self._sessions.get(session_id)

    def create(self, attachment: Attachment) -> Session:
        """A new session with a fresh UUID, attached to ``attachment``."""
        session = Session(str(uuid.uuid4()))
        session.resources = self._make_resources(session)
        session.attach(attachment)
        self._sessions[session.id] = session
        return session

    def resume(self, session_id: str, attachment: Attachment) -> Session:
        """Attach an existing detached session to ``attachment``."""
        session = self._sessions.get(session_id)
        if session is None:
            raise InvalidRequest(f"unknown session id {session_id}")
        if session.attachment is not None:
            raise SessionAttached(session_id)
        if session._expiry is not None:
            session._expiry.cancel()
            session._expiry = None
        session.attach(attachment)
        return session

    def detach(self, session: Session, attachment: Attachment) -> None:
        """``attachment`` went away; a later attachment of the same session is unaffected."""
        if session.attachment is not attachment or self._sessions.get(session.id) is not session:
            return
        session.attachment = None
        session._expiry = self._schedule(self.ttl, lambda: self._expire_detached(session))

    def _expire_detached(self, session: Session) -> None:
        # A timer that fires after a resume (cancellation raced it) must not end the session.
        if session.attachment is None:
            self.expire(session)

    def expire(self, session: Session) -> None:
        """End a session now: it can no longer be resumed, and its resources are closed."""
        if self._sessions.get(session.id) is not session:
            return
        del self._sessions[session.id]
        if session._expiry is not None:
            session._expiry.cancel()
            session._expiry = None
        session.attachment = None
        self._on_expired(session)

    def expire_all(self) -> list[Session]:
        """End every session (daemon shutdown); returns them for their resources to close."""
        sessions = list(self._sessions.values())
        for session in sessions:
            self.expire(session)
        return sessions
