"""The daemon's services and their lifetime: sessions, the launcher, routes, shutdown."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from executor.environment import describe_host, environment_routes
from executor.environment_config import environment_config_routes
from executor.errors import ConfigError
from executor.floor import PolicyFloor
from executor.fs import fs_routes
from executor.fs.capabilities import capability_routes
from executor.fs.watch import SUPPORTED as WATCH_SUPPORTED
from executor.fs.watch import watch_routes
from executor.http import HttpPolicy, http_routes
from executor.memory import MemoryReclaimer, keep_large_buffers
from executor.netproxy.session import SessionNetwork
from executor.process import (
    Confinement,
    LiveProcessCounter,
    ProcessLimits,
    ProcessTable,
    SandboxConfinement,
    process_routes,
)
from executor.protocol.messages import Capabilities
from executor.routing import Route
from executor.sandbox.api import HostInfo
from executor.sandbox.host import LocalHost, ensure_state_directory, state_directory
from executor.sandbox.limits import ResourceLimits, default_limits
from executor.sandbox.manager import SandboxManager, blocked_from_env, get_plugin_manager
from executor.sandbox.rules import Feature
from executor.session import DEFAULT_SESSION_TTL, Session, SessionRegistry
from executor.spawn.spawner import Spawner, sandbox_launch_mode

__all__ = ["EVENT_LOOP_ENV", "IMPLEMENTED", "Daemon", "DaemonConfig", "run_event_loop"]

#: ``asyncio`` runs the daemon on asyncio's own event loop even when uvloop is installed.
EVENT_LOOP_ENV = "EXECUTOR_EVENT_LOOP"


def run_event_loop(main: Coroutine[Any, Any, int]) -> int:
    """Run the daemon's ``main`` on uvloop's event loop when it is installed (the ``fast``
    extra), on asyncio's otherwise (or when ``EXECUTOR_EVENT_LOOP=asyncio``).

    One request at a time is mostly the event loop's own work: a bare asyncio echo server
    costs ~83 µs of CPU per round trip on the development VM, the same server on uvloop
    ~18 µs (bench/README.md, "Per-request optimisations"). Only the daemon's main loop
    changes; loops of the daemon's own threads (the sandbox proxy's) stay asyncio's.
    """
    if os.environ.get(EVENT_LOOP_ENV) != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                return runner.run(main)
    return asyncio.run(main)


#: What this executor implements; everything else is advertised as false.
IMPLEMENTED = Capabilities(
    sandboxed_file_streaming=True,
    file_write_streaming=True,
    environment_config_read=True,
    capability_discovery_sandbox=True,
    # fs/watchMissing needs inotify (Linux); elsewhere the method answers watching: false.
    fs_watch_missing=WATCH_SUPPORTED,
)

log = logging.getLogger("executor.daemon")


@dataclass(frozen=True, slots=True, kw_only=True)
class DaemonConfig:
    """Everything an operator can tune; defaults follow the reference where it has one."""

    session_ttl: float = DEFAULT_SESSION_TTL
    process: ProcessLimits = field(default_factory=ProcessLimits)
    #: Concurrent ``async`` requests per connection before reading pauses (backpressure).
    max_inflight_requests: int = 256
    #: Sandbox plugins that must not be loaded (in addition to ``EXECUTOR_BLOCK_PLUGINS``).
    blocked_plugins: tuple[str, ...] = ()
    #: The executor's private state directory; hidden from every sandbox.
    state_dir: str = field(default_factory=state_directory)
    #: Files only the daemon may read (the WebSocket token or shared secret): hidden from
    #: every sandbox, like the state directory, so a command cannot authenticate as a client.
    secret_files: tuple[str, ...] = ()
    #: What ``http/request`` may do (enabled, no ``valueEnvVar``, any host, by default).
    http: HttpPolicy = field(default_factory=HttpPolicy)
    #: Resource limits of every sandboxed command (wire requests carry none).
    sandbox_limits: ResourceLimits = field(default_factory=default_limits)
    #: The policy floor: a profile (name or file) confining every request at least (None:
    #: requests without ``sandbox`` run unconfined, as on the reference).
    require_sandbox: str | None = None
    #: What the floor's ``:workspace_roots`` binds to (never a client's workspace roots).
    workspace_roots: tuple[str, ...] = ()
    #: fnmatch patterns (case-sensitive) of variables never passed to any command.
    env_deny: tuple[str, ...] = ()
    #: Sandboxes with the full network may reach this host's loopback services (no loopback
    #: isolation: for hosts where it cannot be enforced, accepting that risk).
    shared_loopback: bool = False

    def capabilities(self) -> Capabilities:
        """``IMPLEMENTED``, plus what this configuration turns on."""
        env_vars = self.http.enabled and bool(self.http.header_env_vars)
        return dataclasses.replace(IMPLEMENTED, http_header_env_vars=env_vars)


class OpenConnection(Protocol):
    """What the daemon needs of a connection: a way to end it at shutdown."""

    def close(self, code: int, reason: str) -> None:
        """Close the transport and release the connection's state."""


class Daemon:
    """Owns every service and every background task of one executor process."""

    def __init__(
        self,
        config: DaemonConfig = DaemonConfig(),
        *,
        confinement: Confinement | None = None,
        capabilities: Capabilities | None = None,
        extra_routes: list[Route] | None = None,
    ) -> None:
        self.config = config
        self.loop = asyncio.get_running_loop()
        self.spawner = Spawner()
        if self.spawner.supervisor != "native":
            log.warning(
                "the native launcher is not built or is turned off (EXECUTOR_NATIVE_LAUNCHER); "
                "each command costs ~1.5 ms more CPU to start"
            )
        elif self.spawner.sandbox_supervisor != "native":
            # Same layers, same contract, slower: worth a line, not a warning, when asked for.
            asked = sandbox_launch_mode() == "python"
            log.log(
                logging.INFO if asked else logging.WARNING,
                "sandboxed commands start through the Python launcher (%s)",
                "EXECUTOR_SANDBOX_LAUNCH=python"
                if asked
                else "the native launcher predates sandbox specs; rebuild it",
            )
        ensure_state_directory(config.state_dir)
        self.host_view = LocalHost(hidden_paths=(config.state_dir, *config.secret_files))
        self.sandbox = SandboxManager(
            get_plugin_manager(blocked=(*config.blocked_plugins, *blocked_from_env())),
            HostInfo.current(state_dir=config.state_dir),
        )
        # Say at startup what `executor doctor` would: a daemon that can enforce nothing
        # must not look like one that can (on the loop's next turn; the probe is cached).
        self.loop.call_soon(self.sandbox.log_readiness)
        self.floor = self._load_floor(config)
        self.confinement: Confinement = confinement or SandboxConfinement(
            self.sandbox,
            self.host_view,
            config.sandbox_limits,
            self.floor,
            shared_loopback=config.shared_loopback,
        )
        self.counter = LiveProcessCounter(config.process.max_total)
        if capabilities is None:
            # A client that routes through an executor-local proxy asks first (the real
            # one refuses the command itself when this is false).
            capabilities = dataclasses.replace(
                config.capabilities(),
                network_proxy_launch=self.sandbox.enforces(Feature.NETWORK_PROXY),
            )
        self.environment = describe_host(capabilities)
        self.environment_wire = self.environment.to_wire()
        self.routes = {
            route.method: route
            for route in (
                *environment_routes(self.environment),
                *environment_config_routes(),
                *process_routes(),
                *fs_routes(self.host_view, floor=self.floor),
                *capability_routes(self.host_view, floor=self.floor),
                *watch_routes(readable=self._floor_readable()),
                *http_routes(config.http, self.floor.http_refusal() if self.floor else None),
                *(extra_routes or []),
            )
        }
        self.sessions = SessionRegistry(
            ttl=config.session_ttl,
            schedule=self.loop.call_later,
            make_resources=self._make_processes,
            on_expired=self._session_expired,
        )
        self.connections: set[OpenConnection] = set()
        #: Hands memory back to the system once sessions and retained output are gone.
        self.reclaimer = MemoryReclaimer(self.loop)
        keep_large_buffers()
        self._background: set[asyncio.Task[Any]] = set()
        self._executor_env = dict(os.environ)

    def _load_floor(self, config: DaemonConfig) -> PolicyFloor | None:
        """The policy floor, checked at startup: one this host cannot enforce, or that
        confines nothing, stops ``serve`` (``ConfigError``) instead of refusing every call."""
        if config.require_sandbox is None:
            if config.workspace_roots:
                raise ConfigError("--workspace only applies with --require-sandbox")
            return None
        floor = PolicyFloor.load(config.require_sandbox, workspace_roots=config.workspace_roots)
        floor.confirm(self.host_view, self.sandbox)
        log.info(
            "every request is confined at least by the required sandbox %s (%s)",
            floor.name,
            floor.profile.source,
        )
        return floor

    def _floor_readable(self) -> Callable[[str], bool] | None:
        floor = self.floor
        if floor is None:
            return None
        return functools.partial(floor.allows_reading, self.host_view)

    def _make_processes(self, session: Session) -> ProcessTable:
        return ProcessTable(
            spawner=self.spawner,
            confinement=self.confinement,
            notifier=session,
            counter=self.counter,
            limits=self.config.process,
            executor_env=self._executor_env,
            reaped=self.reclaimer.request,
            env_deny=self.config.env_deny,
            network=SessionNetwork(session.id),
        )

    def _session_expired(self, session: Session) -> None:
        log.info("session %s ended; stopping its processes", session.id)
        self.background(self._close_session(session))

    async def _close_session(self, session: Session) -> None:
        await session.resources.close()
        self.reclaimer.request()

    def background(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` as a task the daemon owns (awaited at shutdown)."""
        task = self.loop.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @property
    def max_inflight_requests(self) -> int:
        """Concurrent ``async`` requests per connection before it stops reading."""
        return self.config.max_inflight_requests

    def connection_opened(self, connection: OpenConnection) -> None:
        """Track a connection so shutdown can close it."""
        self.connections.add(connection)

    def connection_closed(self, connection: OpenConnection) -> None:
        """Forget a connection."""
        self.connections.discard(connection)

    async def shutdown(self) -> None:
        """Close connections, end every session (stopping all process trees), stop the launcher."""
        for connection in list(self.connections):
            connection.close(1001, "executor shutting down")
        self.sessions.expire_all()
        if self._background:
            await asyncio.wait(
                list(self._background), timeout=self.config.process.stop_grace * 2 + 1
            )
        self.spawner.close()
