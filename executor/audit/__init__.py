"""The audit trail: one structured line for each thing a client had the host do, or was refused.

Lines go to the ``executor.audit`` logger at INFO, so operators can route them apart; their
fields ride on the record as ``record.audit`` and ``executor.logs`` renders them as JSON fields
or trailing ``key=value`` pairs, never inside the message. What a line may hold is decided by
its caller, under two rules kept here: every text is bounded (``bounded``, ``bounded_argv``),
and nothing secret is passed in — no environment values, header values, bodies or file
contents; names, sizes, paths and the command line only.

A refused request is logged once, by the connection (``executor.server``), rate-limited
(``refusals.RefusalLog``). A service that understood the request first hangs what it knows
(the argv, the path) on the error with ``annotate``, so that one line says what was refused.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Protocol

from executor.errors import ExecutorError

__all__ = [
    "MAX_TEXT_BYTES",
    "Origin",
    "Requester",
    "annotate",
    "bounded",
    "bounded_argv",
    "duration_ms",
    "enabled",
    "exit_fields",
    "operation",
    "origin",
    "record",
]

log = logging.getLogger("executor.audit")

#: Longest text in a line (a path, an error, the argv as a whole), in UTF-8 bytes.
MAX_TEXT_BYTES: Final = 1024
_ELLIPSIS: Final = "…"


@dataclass(frozen=True, slots=True)
class Origin:
    """Who asked: the session (None before the handshake) and the connection's peer."""

    session: str | None
    peer: str


class _Identified(Protocol):
    @property
    def id(self) -> str: ...


class Requester(Protocol):
    """What ``origin`` reads of a request's context (``routing.RequestContext`` fits)."""

    @property
    def session(self) -> _Identified | None: ...

    @property
    def peer(self) -> str: ...


def origin(ctx: Requester) -> Origin:
    """Who sent the request ``ctx`` is the context of."""
    session = ctx.session
    return Origin(None if session is None else session.id, ctx.peer)


def enabled() -> bool:
    """Whether audit lines are written at all (skip building them otherwise)."""
    return log.isEnabledFor(logging.INFO)


def _utf8(text: str) -> bytes:
    # Wire strings may hold lone surrogates; they count (and are cut) like any character.
    return text.encode("utf-8", "surrogatepass")


def bounded(text: str, limit: int = MAX_TEXT_BYTES) -> str:
    """``text``, or its first ``limit`` bytes and a marker saying how many were cut."""
    if len(text) * 4 <= limit:  # cannot be over, whatever it is made of
        return text
    data = _utf8(text)
    if len(data) <= limit:
        return text
    head = data[:limit].decode("utf-8", "ignore")
    return f"{head}{_ELLIPSIS}[+{len(data) - len(_utf8(head))} bytes]"


def bounded_argv(argv: Sequence[str], limit: int = MAX_TEXT_BYTES) -> dict[str, Any]:
    """``argv`` as audit fields: the first ``limit`` bytes of it; when that is not all of it,
    the last kept argument ends with ``…`` and ``argvTruncated`` is the whole length."""
    kept: list[str] = []
    used = 0
    for arg in argv:
        size = len(_utf8(arg))
        if used + size > limit:
            kept.append(_utf8(arg)[: limit - used].decode("utf-8", "ignore") + _ELLIPSIS)
            total = sum(len(_utf8(a)) for a in argv)
            return {"argv": kept, "argvTruncated": total}
        kept.append(arg)
        used += size
    return {"argv": kept}


def exit_fields(status: int) -> dict[str, Any]:
    """A wait status as audit fields: ``exitCode`` (the protocol's: 128 + signal for a
    signal) and, when a signal ended it, ``signal`` by name."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = str(number)
        return {"exitCode": 128 + number, "signal": name}
    return {"exitCode": os.waitstatus_to_exitcode(status)}


def record(event: str, origin: Origin | None = None, **fields: Any) -> None:
    """Write one audit line for ``event``; fields that are None are left out."""
    if not log.isEnabledFor(logging.INFO):
        return
    entry: dict[str, Any] = {"event": event}
    if origin is not None:
        entry["session"] = origin.session
        entry["peer"] = origin.peer
    entry.update(fields)
    log.info(event, extra={"audit": {k: v for k, v in entry.items() if v is not None}})


def annotate(exc: ExecutorError, operation: str, **fields: Any) -> None:
    """Say on ``exc`` what was refused (``operation`` and its fields) for the refusal line."""
    exc.audit = {"operation": operation, **{k: v for k, v in fields.items() if v is not None}}


def duration_ms(start: float) -> float:
    """Milliseconds since ``start`` (a ``time.monotonic()`` reading), as lines give them."""
    return round((time.monotonic() - start) * 1000, 3)


def operation(
    event: str,
    origin: Origin | None,
    describe: Callable[[], dict[str, Any]] | None = None,
    /,
    **fields: Any,
) -> _Operation:
    """Audit the work in the ``with`` block: one ``event`` line with its duration when it
    succeeds; when it raises an ``ExecutorError``, the fields go on the error (``annotate``)
    for the connection's refusal line. The block may add result fields to the yielded dict.

    ``describe``, when given, returns the leading fields, built only when a line or an
    annotation needs them: a launch does not wait for fields its audit line, off, never
    writes."""
    return _Operation(event, origin, describe, fields)


class _Operation:
    """``operation``'s context manager: a class, not a generator started per request (it
    wraps every ``process/start`` before its launch)."""

    __slots__ = ("_describe", "_event", "_fields", "_origin", "_start")

    def __init__(
        self,
        event: str,
        origin: Origin | None,
        describe: Callable[[], dict[str, Any]] | None,
        fields: dict[str, Any],
    ) -> None:
        self._event = event
        self._origin = origin
        self._describe = describe
        self._fields = fields
        self._start = 0.0

    def __enter__(self) -> dict[str, Any]:
        self._start = time.monotonic()
        return self._fields

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None:
            if log.isEnabledFor(logging.INFO):
                fields = _described(self._describe, self._fields)
                record(self._event, self._origin, **fields, durationMs=duration_ms(self._start))
        elif isinstance(exc, ExecutorError):
            fields = _described(self._describe, self._fields)
            annotate(exc, self._event, **fields, durationMs=duration_ms(self._start))
        # Nothing is swallowed: the error goes on as raised.


def _described(
    describe: Callable[[], dict[str, Any]] | None, fields: dict[str, Any]
) -> dict[str, Any]:
    # A field the block set again keeps its place and takes the block's value.
    return fields if describe is None else {**describe(), **fields}
