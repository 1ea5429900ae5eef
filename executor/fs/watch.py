"""``fs/watchMissing`` and its ``fs/missingChanged`` notification, as the reference has them.

The rules (measured on v0.171.0, docs/watch-missing.md):

* A watch belongs to the **connection**: at most one at a time, ended when the connection
  ends (a resumed session does not get it back). Each connection counts ids from 0: a call
  whose ``watchId`` is not above every id the connection used before answers
  ``watching: false`` and changes nothing; any other call first ends the current watch.
* ``watching`` is true when ``missing`` holds 1 to 64 local paths that do not exist,
  ``present`` (if given) exists, every existing component on the way is a real directory,
  and the kernel accepts the watches (``watch_plan``).
* The watch fires **once**: the first change to a watched path or an ancestor sends
  ``fs/missingChanged {"watchId": N}`` and ends it; nothing is coalesced or delayed.

The notification goes out through the session, the path every notification takes, and never
before the call's own response.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from executor.fs import inotify
from executor.fs.watch_hub import WatchHub
from executor.fs.watch_plan import Plan, make_plan
from executor.protocol import methods
from executor.protocol.paths import ForeignPathError, parse_path_uri
from executor.protocol.watch_messages import (
    FsWatchMissingParams,
    MissingChanged,
    WatchMissingResult,
)
from executor.routing import Reply, Route, route

if TYPE_CHECKING:
    from executor.routing import RequestContext

__all__ = ["SUPPORTED", "WatchLimits", "watch_routes"]

#: Whether this host can watch (inotify); elsewhere every call answers ``watching: false``.
SUPPORTED: Final = inotify.AVAILABLE

_SCOPE_KEY: Final = "executor.fs.watch"
_NOT_WATCHING: Final = WatchMissingResult(False).to_wire()
_WATCHING: Final = WatchMissingResult(True).to_wire()


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchLimits:
    """Bounds of ``fs/watchMissing`` (past any of them the answer is ``watching: false``)."""

    #: Paths in ``missing`` (the reference's limit; ``present`` is not counted).
    max_paths: int = 64
    #: Directories one watch may put under the kernel's watch (ours; the reference has none).
    max_directories_per_watch: int = 1024
    #: Directories watched at once by the whole daemon (ours: inotify's per-user budget,
    #: ``fs.inotify.max_user_watches``, is shared with every other program of this user).
    max_directories: int = 16384


class _Notifier(Protocol):
    def notify(self, method: str, params: dict[str, Any]) -> None: ...


class _State(enum.Enum):
    PENDING = "pending"  # set up; its response is not out yet
    ARMED = "armed"
    OVER = "over"  # fired or replaced


class MissingWatch:
    """One watch: its id, the paths that trigger it, and whether it may still fire."""

    def __init__(
        self, watch_id: int, triggers: frozenset[str], fired: Callable[[MissingWatch], None]
    ) -> None:
        self.watch_id = watch_id
        self.triggers = triggers
        self._fired = fired
        self._state = _State.PENDING
        self._triggered = False

    def trigger(self) -> None:
        """A relevant change: fire now, or right after the response if it is not out yet."""
        if self._state is _State.ARMED:
            self._state = _State.OVER
            self._fired(self)
        elif self._state is _State.PENDING:
            self._triggered = True

    def activate(self) -> None:
        """The response went out: from now on a change is notified at once."""
        if self._state is _State.PENDING:
            self._state = _State.ARMED
            if self._triggered:
                self.trigger()

    def cancel(self) -> None:
        """Never notify."""
        self._state = _State.OVER


class ConnectionWatches:
    """A connection's watch state: the highest id it used, and its current watch."""

    def __init__(self, hub: WatchHub, notifier: _Notifier) -> None:
        self.hub = hub
        self.notifier = notifier
        self.latest = 0
        self.current: MissingWatch | None = None
        self.closed = False

    def claim(self, watch_id: int) -> bool:
        """Take ``watch_id`` for a new watch (ending the current one); False if stale."""
        if self.closed or watch_id <= self.latest:
            return False
        self.latest = watch_id
        self._drop()
        return True

    def still_latest(self, watch_id: int) -> bool:
        """No later call (nor the connection's end) has superseded ``watch_id``."""
        return not self.closed and self.latest == watch_id

    def install(self, watch: MissingWatch, plan: Plan) -> bool:
        """Make ``watch`` current, its directories watched by the kernel; False if refused."""
        if not self.hub.acquire(watch, plan.directories):
            return False
        self.current = watch
        return True

    def fired(self, watch: MissingWatch) -> None:
        """``watch`` saw its change: release it and tell the client."""
        if self.current is watch:
            self.current = None
        self.hub.release(watch)
        self.notifier.notify(methods.FS_MISSING_CHANGED, MissingChanged(watch.watch_id).to_wire())

    def close(self) -> None:
        """The connection ended: its watch ends with it."""
        self.closed = True
        self._drop()

    def _drop(self) -> None:
        if self.current is not None:
            self.current.cancel()
            self.hub.release(self.current)
            self.current = None


def _parse_targets(params: FsWatchMissingParams) -> tuple[list[str], str | None] | None:
    """The native paths; None if one names another host. Bad URIs are ``-32602``."""
    foreign = False
    missing = []
    for uri in (*params.missing, *(() if params.present is None else (params.present,))):
        try:
            missing.append(parse_path_uri(uri))
        except ForeignPathError:
            foreign = True  # not an error for this method, but nothing can be watched
    if foreign:
        return None
    present = missing.pop() if params.present is not None else None
    return missing, present


class _Service:
    def __init__(self, limits: WatchLimits, readable: Callable[[str], bool] | None) -> None:
        self.limits = limits
        self.hub = WatchHub(limits.max_directories)
        #: Under a policy floor: whether it lets a call read a path (else nothing is watched).
        self.readable = readable

    def _hidden(self, paths: list[str]) -> bool:
        return self.readable is not None and not all(self.readable(path) for path in paths)

    def _watches(self, ctx: RequestContext) -> ConnectionWatches:
        scope = ctx.connection_scope()
        watches = scope.get(_SCOPE_KEY)
        if watches is None:
            assert ctx.session is not None  # fs/* methods need a finished handshake
            watches = scope[_SCOPE_KEY] = ConnectionWatches(self.hub, ctx.session)
        assert isinstance(watches, ConnectionWatches)
        return watches

    def _plan(self, missing: list[str], present: str | None) -> Plan | None:
        return make_plan(missing, present, self.limits.max_directories_per_watch)

    async def watch_missing(self, ctx: RequestContext, params: FsWatchMissingParams) -> Any:
        targets = _parse_targets(params)  # URI errors first, whatever the id
        watches = self._watches(ctx)
        watch_id = params.watch_id
        if not watches.claim(watch_id):
            return _NOT_WATCHING
        if targets is None or not SUPPORTED:
            return _NOT_WATCHING
        missing, present = targets
        if not missing or len(missing) > self.limits.max_paths:
            return _NOT_WATCHING
        watched = [*missing, *(() if present is None else (present,))]
        if await asyncio.to_thread(self._hidden, watched):
            # Whether a path exists, and when it changes, is what the floor keeps from reads.
            return _NOT_WATCHING
        plan = await asyncio.to_thread(self._plan, missing, present)
        if plan is None:
            return _NOT_WATCHING
        if not watches.still_latest(watch_id):
            # A later call (sent before this answer) replaces the watch; the reference, one
            # request at a time, would have answered this one as if it had not come yet.
            return _WATCHING
        watch = MissingWatch(watch_id, plan.triggers, watches.fired)
        if not watches.install(watch, plan):
            return _NOT_WATCHING
        # The kernel watches start now; a change between the examination and now produced
        # no event, so look again (the reference has this gap; we close it).
        if await asyncio.to_thread(self._plan, missing, present) != plan:
            watch.trigger()
        return Reply(_WATCHING, watch.activate)


def watch_routes(
    limits: WatchLimits | None = None, readable: Callable[[str], bool] | None = None
) -> list[Route]:
    """The route of ``fs/watchMissing``; with ``readable`` (a policy floor's test), paths it
    refuses are not watched (``watching: false``)."""
    service = _Service(limits or WatchLimits(), readable)
    return [route(methods.FS_WATCH_MISSING, FsWatchMissingParams, service.watch_missing)]
