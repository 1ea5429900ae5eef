"""The exception tree of the executor. JSON-RPC error codes live here and nowhere else.

::

    ExecutorError                       root of everything we raise on purpose
    ├── RequestError                    the client's request cannot be served (their input)
    │   ├── InvalidRequest      -32600  precondition failed, handshake order, unknown ids
    │   ├── MethodNotFound      -32601  method not routed
    │   ├── InvalidParams       -32602  params do not decode or validate
    │   │   └── SandboxUnavailable      a sandbox this executor cannot enforce (fail closed)
    │   ├── NotFound            -32004  a filesystem object or handle does not exist
    │   └── SessionAttached     -32010  resume of a session attached to another connection
    ├── InternalError           -32603  our side or the operating system failed
    └── ConfigError                     operator input: CLI flags, profile files (never on the wire)
        └── ProfileError                a sandbox profile file is invalid

The split between ``RequestError`` and ``InternalError`` mirrors h11's local/remote split: a
client's mistake is never logged as our failure, and our failure never blames the client.
Foreign exceptions (``OSError``, JSON errors) are translated once, at the boundary where they
occur, with ``raise ... from exc``.
"""

from __future__ import annotations

import errno as _errno
import os
from typing import ClassVar

__all__ = [
    "ConfigError",
    "ExecutorError",
    "InternalError",
    "InvalidParams",
    "InvalidRequest",
    "MethodNotFound",
    "NotFound",
    "ProfileError",
    "RequestError",
    "SandboxUnavailable",
    "SessionAttached",
    "fs_error",
    "os_error_message",
    "spawn_error",
    "spawn_kind",
    "start_failure",
]


class ExecutorError(Exception):
    """Root of every error the executor raises deliberately."""

    code: ClassVar[int] = -32603
    #: What the refusal's audit line adds (``executor.audit.annotate``): what was refused.
    audit: dict[str, object] | None = None
    #: The error's JSON-RPC ``data`` member, if it has one.
    data: dict[str, object] | None = None
    #: What kind of failure this is when a ``process/start`` fails with it: the reference's
    #: ``ProcessStartErrorData`` (``spawnNotFound``, ``spawnPermissionDenied``,
    #: ``spawnFailed``, ``sandboxUnavailable``, ``sandboxPreparation``), sent by the
    #: ``process/start`` route as ``data: {"kind": ...}``; None: none (a malformed request).
    start_kind: str | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RequestError(ExecutorError):
    """The client's request cannot be served as sent."""


class InvalidRequest(RequestError):
    """A precondition failed: handshake order, unknown ids, duplicate handles."""

    code = -32600


class MethodNotFound(RequestError):
    """The method is not routed by this executor."""

    code = -32601

    def __init__(self, method: str) -> None:
        # The reference's wording; clients may match on it.
        super().__init__(f"exec-server stub does not implement `{method}` yet")
        self.method = method


class InvalidParams(RequestError):
    """The params do not decode, or a value is not acceptable."""

    code = -32602


class SandboxUnavailable(InvalidParams):
    """The request asks for confinement this executor cannot enforce; nothing was run."""

    PREFIX: ClassVar[str] = "sandbox intent cannot be enforced on this executor"
    start_kind = "sandboxUnavailable"

    def __init__(self, reason: str, *, message: str | None = None) -> None:
        """``message``: the whole message instead of ``PREFIX: reason`` (the reference's own
        wording where it has one)."""
        super().__init__(message if message is not None else f"{self.PREFIX}: {reason}")
        self.reason = reason


class NotFound(RequestError):
    """A filesystem object or a file handle does not exist."""

    code = -32004


class SessionAttached(RequestError):
    """The session to resume is still attached to another live connection."""

    code = -32010

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id} is already attached to another connection")


class InternalError(ExecutorError):
    """The executor or the operating system failed while serving a valid request."""

    code = -32603


class ConfigError(ExecutorError):
    """Invalid operator input (command line, configuration); reported on the CLI."""


class ProfileError(ConfigError):
    """A sandbox profile file is invalid; the message names the file and the key path."""


def os_error_message(exc: OSError) -> str:
    """Render an OS error the way the reference does: ``<strerror> (os error <n>)``."""
    if exc.errno is None:
        return str(exc)
    return f"{os.strerror(exc.errno)} (os error {exc.errno})"


# Rust's io::ErrorKind groups that the reference maps to -32600 in filesystem methods.
_FS_NOT_FOUND = frozenset({_errno.ENOENT})
_FS_CLIENT_ERRORS = frozenset({_errno.EACCES, _errno.EPERM, _errno.EINVAL})


def fs_error(exc: OSError) -> ExecutorError:
    """Translate a filesystem ``OSError``: missing -32004, permission/input -32600, else -32603."""
    message = os_error_message(exc)
    if exc.errno in _FS_NOT_FOUND:
        return NotFound(message)
    if exc.errno in _FS_CLIENT_ERRORS:
        return InvalidRequest(message)
    return InternalError(message)


def spawn_error(exc: OSError) -> InternalError:
    """Translate a failure to start a program; the reference reports every one as -32603."""
    error = InternalError(os_error_message(exc))
    error.start_kind = spawn_kind(exc.errno)
    return error


def start_failure(exc: ExecutorError) -> ExecutorError:
    """``exc`` as a failed ``process/start`` answers it: with ``data: {"kind": ...}`` when it
    has a ``start_kind`` (the reference's ``ProcessStartErrorData``, since v0.171)."""
    if exc.start_kind is not None:
        exc.data = {"kind": exc.start_kind}
    return exc


def spawn_kind(error: int | None) -> str:
    """The reference's kind of a failed spawn with this errno (by Rust's ``io::ErrorKind``:
    ``NotFound``, ``PermissionDenied``, anything else)."""
    if error == _errno.ENOENT:
        return "spawnNotFound"
    if error in (_errno.EACCES, _errno.EPERM):
        return "spawnPermissionDenied"
    return "spawnFailed"
