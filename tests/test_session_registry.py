"""SessionRegistry (protocol.md §4) as a unit: attach, detach, resume, expire, with a fake clock."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from executor.errors import InvalidRequest, SessionAttached
from executor.protocol.jsonrpc import Spliced
from executor.session import Session, SessionRegistry
from tests.support.memory_transport import Timer


@dataclass
class Resources:
    """Stand-in for a process table."""

    closed: bool = False

    async def close(self) -> None:
        self.closed = True


@dataclass
class Link:
    """Stand-in for a connection."""

    notes: list[tuple[str, dict[str, Any] | Spliced]] = field(default_factory=list)
    congested: bool = False

    def notify(self, method: str, params: dict[str, Any] | Spliced) -> None:
        self.notes.append((method, params))

    def on_drain(self, callback: Callable[[], None]) -> None:
        callback()


class Harness:
    """A registry whose timers and expiries are recorded."""

    def __init__(self, ttl: float = 5.0) -> None:
        self.timers: list[Timer] = []
        self.expired: list[Session] = []
        self.registry = SessionRegistry(
            ttl=ttl,
            schedule=self._schedule,
            make_resources=lambda _session: Resources(),
            on_expired=self.expired.append,
        )

    def _schedule(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(delay, callback)
        self.timers.append(timer)
        return timer


@pytest.fixture
def harness() -> Harness:
    """A fresh registry with a 5 s TTL."""
    return Harness()


def test_create_makes_uuid4_sessions_attached(harness: Harness) -> None:
    """A new session has a UUID4 id, its resources, and the creating attachment."""
    link = Link()
    session = harness.registry.create(link)
    assert uuid.UUID(session.id).version == 4
    assert session.attachment is link
    assert isinstance(session.resources, Resources)
    assert harness.registry.get(session.id) is session
    assert harness.registry.create(Link()).id != session.id


def test_detach_schedules_expiry_with_ttl(harness: Harness) -> None:
    """Detaching starts the TTL; firing it expires the session."""
    link = Link()
    session = harness.registry.create(link)
    harness.registry.detach(session, link)
    assert session.attachment is None
    assert [t.delay for t in harness.timers] == [5.0]
    harness.timers[0].fire()
    assert harness.expired == [session]
    assert harness.registry.get(session.id) is None
    with pytest.raises(InvalidRequest, match=f"unknown session id {session.id}"):
        harness.registry.resume(session.id, Link())


def test_resume_cancels_expiry(harness: Harness) -> None:
    """Resuming within the TTL cancels the expiry; the timer firing late does nothing."""
    old, new = Link(), Link()
    session = harness.registry.create(old)
    harness.registry.detach(session, old)
    assert harness.registry.resume(session.id, new) is session
    assert harness.timers[0].cancelled
    harness.timers[0].callback()  # a timer that raced its cancellation
    assert harness.expired == []
    assert harness.registry.get(session.id) is session


def test_resume_while_attached_is_refused(harness: Harness) -> None:
    """A session attached to a live connection cannot be taken over (-32010)."""
    first = Link()
    session = harness.registry.create(first)
    with pytest.raises(SessionAttached) as info:
        harness.registry.resume(session.id, Link())
    assert info.value.code == -32010
    assert info.value.message == f"session {session.id} is already attached to another connection"
    assert session.attachment is first


def test_unknown_session_id_is_invalid_request(harness: Harness) -> None:
    """Any unknown id, well-formed or not, is -32600 unknown session id."""
    for bogus in (str(uuid.uuid4()), "not-a-uuid", ""):
        with pytest.raises(InvalidRequest) as info:
            harness.registry.resume(bogus, Link())
        assert info.value.code == -32600
        assert info.value.message == f"unknown session id {bogus}"


def test_late_detach_of_old_connection_keeps_new_attachment(harness: Harness) -> None:
    """A stale connection's close never detaches a newer attachment nor schedules expiry."""
    old, new = Link(), Link()
    session = harness.registry.create(old)
    harness.registry.detach(session, old)
    harness.registry.resume(session.id, new)
    harness.registry.detach(session, old)  # the old connection's close arrives late
    assert session.attachment is new
    assert len(harness.timers) == 1
    assert harness.timers[0].cancelled
    harness.registry.detach(session, new)
    assert session.attachment is None
    assert len(harness.timers) == 2


def test_detach_of_expired_session_does_nothing(harness: Harness) -> None:
    """A close arriving after the session already ended schedules nothing."""
    link = Link()
    session = harness.registry.create(link)
    harness.registry.expire(session)
    harness.registry.detach(session, link)
    assert harness.timers == []
    assert harness.expired == [session]


def test_expire_all_ends_every_session(harness: Harness) -> None:
    """Shutdown expires attached and detached sessions alike, each once."""
    a, b = Link(), Link()
    first = harness.registry.create(a)
    second = harness.registry.create(b)
    harness.registry.detach(second, b)
    ended = harness.registry.expire_all()
    assert {s.id for s in ended} == {first.id, second.id}
    assert sorted(s.id for s in harness.expired) == sorted([first.id, second.id])
    assert len(harness.registry) == 0
    assert harness.timers[0].cancelled


def test_notifications_follow_the_attachment(harness: Harness) -> None:
    """A session forwards notifications to its attachment and drops them while detached."""
    old, new = Link(), Link()
    session = harness.registry.create(old)
    session.notify("process/output", {"seq": 1})
    harness.registry.detach(session, old)
    session.notify("process/output", {"seq": 2})
    assert not session.congested
    drained: list[bool] = []
    session.on_drain(lambda: drained.append(True))
    assert drained == [True]
    harness.registry.resume(session.id, new)
    session.notify("process/output", {"seq": 3})
    assert old.notes == [("process/output", {"seq": 1})]
    assert new.notes == [("process/output", {"seq": 3})]
