"""Processes of one session: start, output, exit vs. close, read, write, signal, stop.

Modules, each with one job:

* ``table`` — the session's processes by id: resolving a start request to a ``Command``,
  limits, launch, and the requests on existing processes;
* ``managed`` — one process: output pumps and backpressure, its one ordered event log,
  exit vs. close, the denial verdict, long-poll reads, signals;
* ``stdin`` — buffered non-blocking writes to the command's stdin, once per ``writeId``;
* ``streams`` — pipes or a terminal for the child;
* ``confinement`` — the sandbox decision before anything runs (or the refusal);
* ``limits`` — per-session and daemon-wide bounds and timers;
* ``routes`` — the ``process/*`` methods.
"""

from __future__ import annotations

from executor.process.confinement import (
    ConfinedCommand,
    Confinement,
    RefuseSandbox,
    SandboxConfinement,
)
from executor.process.limits import LiveProcessCounter, ProcessLimits
from executor.process.managed import ManagedProcess, Notifier, exit_code_from_status
from executor.process.routes import process_routes
from executor.process.table import ProcessTable

__all__ = [
    "ConfinedCommand",
    "Confinement",
    "LiveProcessCounter",
    "ManagedProcess",
    "Notifier",
    "ProcessLimits",
    "ProcessTable",
    "RefuseSandbox",
    "SandboxConfinement",
    "exit_code_from_status",
    "process_routes",
]
