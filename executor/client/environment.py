"""``connect`` and ``Environment``: one session on an executor, over changing connections."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from types import TracebackType
from typing import Any

from executor.client.errors import ClientError
from executor.client.fs import FileSystem
from executor.client.http import Http
from executor.client.paths import path_uri, sandbox_params
from executor.client.process import Process, RunResult
from executor.client.recovery import Link
from executor.client.transport import DEFAULT_MAX_MESSAGE_BYTES, connector_for
from executor.protocol import methods

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_OUTPUT_BUFFER_BYTES",
    "DEFAULT_RECOVERY_DEADLINE",
    "Environment",
    "connect",
]

#: How long a dropped connection may take to come back before the session fails (the
#: reference's value; a server keeps a detached session for 80 s).
DEFAULT_RECOVERY_DEADLINE = 25.0

#: Unread output kept in memory per process. Past it, chunks are not kept but fetched again
#: from the server's retention (1 MiB per process by default) once the reader catches up.
#: The two do not add up to a lag a reader may safely have: a process that goes on writing
#: has usually replaced the chunks let go by the time they are fetched (``ProcessLost``).
DEFAULT_OUTPUT_BUFFER_BYTES = 16 << 20

#: Requests that change nothing, so one cut off by a dropped connection is simply sent
#: again on the next connection. Every other request gets ``OutcomeUnknown`` instead.
IDEMPOTENT_METHODS = frozenset(
    {
        methods.ENVIRONMENT_INFO,
        methods.ENVIRONMENT_STATUS,
        methods.ENVIRONMENT_CONFIG_READ,
        methods.CAPABILITY_ROOTS_DISCOVER,
        methods.PROCESS_READ,
        methods.FS_READ_FILE,
        methods.FS_GET_METADATA,
        methods.FS_READ_DIRECTORY,
        methods.FS_WALK,
        methods.FS_CANONICALIZE,
    }
)

#: The environment a command gets when the caller passes none: the executor's own
#: essentials (PATH, HOME, locale, TMPDIR, ...), without secret-looking names.
CORE_ENV_POLICY = {
    "inherit": "core",
    "ignoreDefaultExcludes": False,
    "exclude": [],
    "set": {},
    "includeOnly": [],
}


class Environment:
    """A session on one executor: processes (``start``, ``run``), files (``fs``) and any
    other request (``request``). Use ``connect`` to get one."""

    def __init__(self, link: Link) -> None:
        self._link = link
        #: The remote file system.
        self.fs = FileSystem(link)
        #: HTTP(S) requests made by the executor, from its host.
        self.http = Http(link)

    @property
    def info(self) -> dict[str, Any]:
        """``environmentInfo`` from the handshake (shell, cwd, platform, capabilities)."""
        return self._link.info

    @property
    def session_id(self) -> str:
        """The session's id (the same after every reconnect)."""
        return self._link.session_id

    @property
    def state(self) -> str:
        """``connected``, ``recovering`` or ``failed``."""
        return self._link.status.value

    @property
    def failure(self) -> str | None:
        """Why the session failed, once it has."""
        return self._link.failure

    @property
    def recoveries(self) -> int:
        """How many dropped connections were recovered."""
        return self._link.recoveries

    @property
    def capabilities(self) -> dict[str, bool]:
        """The server's feature flags (``environmentInfo.capabilities``)."""
        return dict(self.info.get("capabilities") or {})

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
        network: bool | None = None,
        process_id: str | None = None,
        arg0: str | None = None,
        env_policy: Mapping[str, Any] | None = None,
        size: tuple[int, int] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Process:
        """Start ``argv`` on the executor.

        ``cwd``: a path on the executor's host (or a ``file:`` URI); default: the
        executor's own working directory. ``env``: the command's whole environment; without
        it (and without ``env_policy``) the command gets the executor's core variables
        (PATH, HOME, locale, ...). ``tty``: run under a terminal (output on stream
        ``pty``; stdin writable). ``stdin``: keep a stdin pipe to ``write`` to.
        ``sandbox``: ``None`` (unsandboxed), a profile name or file (turned into the wire
        intent here, from the same profiles ``executor run`` uses, with
        ``workspace_roots``), or a wire ``SandboxContext`` dict. ``network``: override the
        profile's network as ``executor run --network on|off`` does (``True``/``False``; a
        proxied profile stays proxied when on). ``size``: ``(rows, cols)``
        of the terminal (``tty``; this executor's extension, ignored by the reference).
        ``extra``: more ``process/start`` params, sent as they are.
        """
        if not argv:
            raise ClientError("argv must not be empty")
        cwd_uri = path_uri(cwd) if cwd is not None else self._default_cwd()
        params: dict[str, Any] = {
            "processId": process_id or f"client-{uuid.uuid4().hex[:16]}",
            "argv": list(argv),
            "cwd": cwd_uri,
            "env": dict(env or {}),
            "tty": tty,
            "pipeStdin": stdin,
        }
        if arg0 is not None:
            params["arg0"] = arg0
        if size is not None:
            params["size"] = {"rows": size[0], "cols": size[1]}
        if env_policy is not None:
            params["envPolicy"] = dict(env_policy)
        elif env is None:
            params["envPolicy"] = dict(CORE_ENV_POLICY)
        if sandbox is not None:
            params.update(
                sandbox_params(
                    sandbox, workspace_roots=workspace_roots, cwd=cwd_uri, network=network
                )
            )
        elif network is not None:
            raise ClientError("network= overrides a sandbox profile's network: give sandbox=")
        params.update(extra or {})
        events, result = await self._link.start_process(params["processId"], params)
        return Process(
            self._link,
            events,
            sandbox_type=str(result.get("sandboxType", "none")),
            tty=tty,
            stdin=stdin,
        )

    async def attach(self, process_id: str, *, tty: bool = False, stdin: bool = False) -> Process:
        """A handle on a process of this session that this client did not start: one of a
        session resumed with ``resume_session_id``. Its output starts at what the executor
        still retains (older output is gone); ``tty`` and ``stdin`` say what it was started
        with (the protocol cannot tell). ``ServerError`` for an unknown id."""
        events = await self._link.adopt_process(process_id)
        return Process(self._link, events, sandbox_type="unknown", tty=tty, stdin=stdin)

    async def run(self, argv: Sequence[str], **options: Any) -> RunResult:
        """Start ``argv`` (with ``start``'s options), wait for it to close, and return its
        exit and all of its output."""
        process = await self.start(argv, **options)
        return await process.collect()

    async def request(
        self, method: str, params: Any = None, *, idempotent: bool | None = None
    ) -> Any:
        """Send any request and return its result (``ServerError`` for an error answer).

        ``idempotent`` says whether it may be sent again after a dropped connection; by
        default only the protocol's read-only methods are.
        """
        if idempotent is None:
            idempotent = method in IDEMPOTENT_METHODS
        return await self._link.call(method, params, idempotent=idempotent)

    def add_listener(self, listener: Callable[[str, Any], None]) -> None:
        """Call ``listener(method, params)`` for every notification that is not a process
        event (``fs/missingChanged``, and the ``http/request/bodyDelta`` of requests sent
        with ``request``; those of ``http.stream`` go to their response)."""
        self._link.listeners.append(listener)

    async def close(self, *, terminate_processes: bool = True) -> None:
        """Close the session's connection. Processes of this client still running are
        terminated first, unless ``terminate_processes`` is false (a detached session's
        processes run until the server expires the session)."""
        await self._link.close(terminate_processes=terminate_processes)

    def _default_cwd(self) -> str:
        cwd = self.info.get("cwd")
        return str(cwd) if cwd else "file:///"

    async def __aenter__(self) -> Environment:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<Environment session={self.session_id} {self.state}>"


class _Connecting:
    """What ``connect`` returns: ``await`` it, or use it with ``async with``."""

    def __init__(self, url: str | Sequence[str], options: dict[str, Any]) -> None:
        self._url = url
        self._options = options
        self._env: Environment | None = None

    async def _open(self) -> Environment:
        options = dict(self._options)
        timeout = options.pop("connect_timeout")
        if timeout is None:
            # A stdio server may be a remote one behind ssh, started from scratch.
            stdio = not isinstance(self._url, str) or self._url.startswith("stdio:")
            timeout = 30.0 if stdio else 10.0
        options["initialize_timeout"] = timeout
        connector = connector_for(
            self._url,
            token=options.pop("token"),
            open_timeout=timeout,
            max_message_bytes=options.pop("max_message_bytes"),
        )
        resume = options.pop("resume_session_id")
        link = Link(connector, **options)
        await link.open(resume=resume)
        self._env = Environment(link)
        return self._env

    def __await__(self) -> Generator[Any, None, Environment]:
        return self._open().__await__()

    async def __aenter__(self) -> Environment:
        return await self._open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._env is not None:
            await self._env.close()


def connect(
    url: str | Sequence[str],
    *,
    token: str | None = None,
    client_name: str = "executor-client",
    recovery_deadline: float = DEFAULT_RECOVERY_DEADLINE,
    connect_timeout: float | None = None,
    resume_session_id: str | None = None,
    output_buffer_bytes: int | None = DEFAULT_OUTPUT_BUFFER_BYTES,
    max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
) -> _Connecting:
    """Connect to an executor.

    ``url``: ``ws://HOST:PORT`` (``token``: sent as ``Authorization: Bearer``), or
    ``stdio:CMD ARG...`` to run a server and talk over its pipes (e.g.
    ``stdio:ssh devbox executor serve --listen stdio``; an argv list works too).
    ``recovery_deadline``: seconds a dropped WebSocket connection may take to come back
    before the session fails. ``connect_timeout``: for opening the connection and the
    handshake (default 10 s, 30 s for stdio). ``resume_session_id``: attach to an existing
    detached session (``Environment.attach`` gives handles on its processes).
    ``output_buffer_bytes``: the unread output of each process kept in memory; past it,
    output is fetched again from the server's retention when the reader catches up, and a
    process whose output the server no longer has fails alone (``ProcessLost``). ``None``:
    no bound. ``max_message_bytes``: the largest message accepted from the server (384 MiB
    by default: a daemon's largest default answer, a 256 MiB ``fs/readFile``, is about
    342 MiB in base64); a larger one closes the connection and fails the calls waiting on
    it with ``MessageTooLarge``. ``None``: no bound (a hostile server can then make the
    client allocate without one).
    """
    if output_buffer_bytes is not None and output_buffer_bytes < 1:
        raise ClientError("output_buffer_bytes must be positive (or None: no bound)")
    if max_message_bytes is not None and max_message_bytes < 1:
        raise ClientError("max_message_bytes must be positive (or None: no bound)")
    return _Connecting(
        url,
        {
            "token": token,
            "connect_timeout": connect_timeout,
            "resume_session_id": resume_session_id,
            "client_name": client_name,
            "recovery_deadline": recovery_deadline,
            "output_buffer_bytes": output_buffer_bytes,
            "max_message_bytes": max_message_bytes,
        },
    )
