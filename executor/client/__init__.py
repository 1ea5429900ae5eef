"""A Python client of the executor daemon (and of Codex's exec-server): run commands and
use the file system of a remote host, riding out dropped connections.

    from executor.client import connect

    async with connect("ws://127.0.0.1:8765") as env:
        proc = await env.start(["sh", "-c", "make test"], cwd="/src/app")
        async for chunk in proc.output():
            print(chunk.stream, chunk.data)
        result = await proc.wait()

``connect("stdio:CMD ARG...")`` runs CMD and speaks to it over its stdin/stdout (for example
``stdio:ssh devbox executor serve --listen stdio``). ``connect_sync`` is the same for
synchronous code. See docs/client.md.
"""

from __future__ import annotations

from executor.client.environment import Environment, connect
from executor.client.errors import (
    ClientError,
    HttpBodyError,
    MessageTooLarge,
    OutcomeUnknown,
    ProcessLost,
    ServerError,
    SessionFailed,
)
from executor.client.fs import DirectoryEntry, FileSystem, Metadata
from executor.client.http import Http, HttpResponse, StreamedResponse
from executor.client.process import ExitResult, OutputChunk, Process, RunResult, StdinClosed
from executor.client.sync import SyncEnvironment, connect_sync

__all__ = [
    "ClientError",
    "DirectoryEntry",
    "Environment",
    "ExitResult",
    "FileSystem",
    "Http",
    "HttpBodyError",
    "HttpResponse",
    "MessageTooLarge",
    "Metadata",
    "OutcomeUnknown",
    "OutputChunk",
    "Process",
    "ProcessLost",
    "RunResult",
    "ServerError",
    "SessionFailed",
    "StdinClosed",
    "StreamedResponse",
    "SyncEnvironment",
    "connect",
    "connect_sync",
]
