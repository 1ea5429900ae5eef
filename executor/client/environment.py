"""``connect`` and ``Environment``: one logical client over changing connections."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from executor.client.fs import FileSystem
from executor.client.process import Process, RunResult

__all__ = ["Environment", "connect"]

#: How long a dropped connection may take to come back before the session fails.
DEFAULT_RECOVERY_DEADLINE = 25.0


class Environment:
    """A connected session on one executor."""

    info: dict[str, Any]
    session_id: str
    fs: FileSystem

    async def start(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        tty: bool = False,
        stdin: bool = False,
        sandbox: str | Mapping[str, Any] | None = None,
        workspace_roots: Sequence[str] = (),
        process_id: str | None = None,
    ) -> Process:
        """Start a process."""
        raise NotImplementedError

    async def run(self, argv: Sequence[str], **kwargs: Any) -> RunResult:
        """Start a process, collect its output, wait for it."""
        raise NotImplementedError

    async def request(self, method: str, params: Any = None) -> Any:
        """Send any request (the raw escape hatch)."""
        raise NotImplementedError

    async def close(self) -> None:
        """Close the connection."""
        raise NotImplementedError

    async def __aenter__(self) -> Environment:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class _Connecting:
    """What ``connect`` returns: await it, or use it as ``async with``."""

    def __init__(self, url: str, **options: Any) -> None:
        self._url = url
        self._options = options
        self._env: Environment | None = None

    def __await__(self) -> Any:
        raise NotImplementedError

    async def __aenter__(self) -> Environment:
        raise NotImplementedError

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._env is not None:
            await self._env.close()


def connect(
    url: str,
    *,
    token: str | None = None,
    client_name: str = "executor-client",
    recovery_deadline: float = DEFAULT_RECOVERY_DEADLINE,
) -> _Connecting:
    """Connect to ``ws://HOST:PORT`` (with an optional bearer ``token``) or
    ``stdio:CMD ARG...``."""
    return _Connecting(
        url, token=token, client_name=client_name, recovery_deadline=recovery_deadline
    )
