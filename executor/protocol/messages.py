"""Typed params and results of the handshake, environment and process methods.

Params are decoded with ``executor.protocol.decode`` (camelCase wire names are derived from
the field names). Results render themselves with ``to_wire()``; camelCase exists only there.
``sandbox`` decodes to a ``SandboxIntent`` with the params (``executor.protocol.intent``).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

from executor.protocol import b64codec, methods
from executor.protocol.decode import U16, U64, Base64Bytes, DecodeError, Usize
from executor.protocol.intent import ManagedNetwork, WireProcessSandbox
from executor.protocol.jsonrpc import base64_value
from executor.protocol.network_proxy import NetworkProxyLaunch

__all__ = [
    "Capabilities",
    "EnvPolicy",
    "EnvironmentInfo",
    "Inherit",
    "InitializeParams",
    "OutputChunk",
    "ProcessClosed",
    "ProcessEvent",
    "ProcessExited",
    "ProcessMetadata",
    "ProcessOutput",
    "ReadParams",
    "ReadResult",
    "ResizePtyParams",
    "SandboxType",
    "ShellInfo",
    "SignalName",
    "SignalParams",
    "StartParams",
    "StartResult",
    "Stream",
    "TerminalSize",
    "TerminateParams",
    "WriteParams",
    "WriteStatus",
    "b64",
]


def b64(data: bytes) -> str:
    """Standard padded base64 text, as the wire carries bytes."""
    return b64codec.encode(data).decode("ascii")


class Stream(enum.StrEnum):
    """Where a chunk of process output came from."""

    STDOUT = "stdout"
    STDERR = "stderr"
    PTY = "pty"


class SandboxType(enum.StrEnum):
    """Which platform sandbox wrapped a process (``none``: nothing was enforced)."""

    NONE = "none"
    LINUX_SECCOMP = "linuxSeccomp"
    MACOS_SEATBELT = "macosSeatbelt"
    WINDOWS_RESTRICTED_TOKEN = "windowsRestrictedToken"
    WINDOWS_MXC = "windowsMxc"


class Inherit(enum.StrEnum):
    """Which of the executor's own variables an ``envPolicy`` starts from."""

    ALL = "all"
    CORE = "core"
    NONE = "none"


class SignalName(enum.StrEnum):
    """Signals a client may send; the protocol defines only ``interrupt``."""

    INTERRUPT = "interrupt"


class WriteStatus(enum.StrEnum):
    """Outcome of ``process/write``; statuses are results, not errors."""

    ACCEPTED = "accepted"
    UNKNOWN_PROCESS = "unknownProcess"
    STDIN_CLOSED = "stdinClosed"
    STARTING = "starting"


# --- handshake ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class InitializeParams:
    """``initialize`` params."""

    client_name: str
    resume_session_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ShellInfo:
    """The user's default shell: a stable short name and a native path."""

    name: str
    path: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Capabilities:
    """Feature flags; each is true only when the feature is implemented here."""

    network_proxy_launch: bool = False
    network_proxy_review_domains: bool = False
    credential_masking: bool = False
    credential_masking_custom_providers: bool = False
    capability_discovery_sandbox: bool = False
    fs_watch_missing: bool = False
    capability_discovery_v2: bool = False
    environment_config_read: bool = False
    http_header_env_vars: bool = False
    sandboxed_file_streaming: bool = False
    file_write_streaming: bool = False
    shell_snapshot_v2: bool = False
    windows_mxc: bool = False

    def to_wire(self) -> dict[str, bool]:
        """The ``capabilities`` object, every flag explicit."""
        return {
            "networkProxyLaunch": self.network_proxy_launch,
            "networkProxyReviewDomains": self.network_proxy_review_domains,
            "credentialMasking": self.credential_masking,
            "credentialMaskingCustomProviders": self.credential_masking_custom_providers,
            "capabilityDiscoverySandbox": self.capability_discovery_sandbox,
            "fsWatchMissing": self.fs_watch_missing,
            "capabilityDiscoveryV2": self.capability_discovery_v2,
            "environmentConfigRead": self.environment_config_read,
            "httpHeaderEnvVars": self.http_header_env_vars,
            "sandboxedFileStreaming": self.sandboxed_file_streaming,
            "fileWriteStreaming": self.file_write_streaming,
            "shellSnapshotV2": self.shell_snapshot_v2,
            "windowsMxc": self.windows_mxc,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvironmentInfo:
    """What the executor tells clients about its host (paths are ``file:`` URIs)."""

    shell: ShellInfo
    executor_version: str
    cwd: str | None
    user_home_dir: str | None
    platform_os: str
    prepend_path_dirs: tuple[str, ...]
    temporary_directories: tuple[str, ...]
    temp_dir: str
    capabilities: Capabilities

    def to_wire(self) -> dict[str, Any]:
        """The ``EnvironmentInfo`` object, fields in the reference's order."""
        wire: dict[str, Any] = {
            "shell": {"name": self.shell.name, "path": self.shell.path},
            "executorVersion": self.executor_version,
            "cwd": self.cwd,
        }
        if self.user_home_dir is not None:
            wire["userHomeDir"] = self.user_home_dir
        wire["platformOs"] = self.platform_os
        if self.prepend_path_dirs:
            wire["prependPathDirs"] = list(self.prepend_path_dirs)
        wire["temporaryDirectories"] = list(self.temporary_directories)
        wire["tempDir"] = self.temp_dir
        wire["capabilities"] = self.capabilities.to_wire()
        return wire


# --- processes ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvPolicy:
    """Derive a child environment from the executor's own (all five fields required)."""

    inherit: Inherit
    ignore_default_excludes: bool
    exclude: tuple[str, ...]
    set: dict[str, str]
    include_only: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessMetadata:
    """Telemetry attribution; ``threadId`` must be a UUID."""

    thread_id: str | None = None
    tool_call_id: str | None = None

    def __post_init__(self) -> None:
        if self.thread_id is not None:
            try:
                uuid.UUID(self.thread_id)
            except ValueError:
                raise DecodeError(
                    f"invalid type: string {self.thread_id!r}, expected a UUID",
                    "metadata.threadId",
                ) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class TerminalSize:
    """A terminal's size in character cells (ours, as Codex's app-server spells it:
    ``process/start`` ``size`` and ``process/resizePty``; the reference has neither)."""

    rows: U16
    cols: U16

    def __post_init__(self) -> None:
        if not self.rows or not self.cols:
            raise DecodeError("rows and cols must be at least 1", "size")


@dataclass(frozen=True, slots=True, kw_only=True)
class StartParams:
    """``process/start`` params."""

    process_id: str
    argv: tuple[str, ...]
    cwd: str
    env: dict[str, str]
    tty: bool
    pipe_stdin: bool = False
    arg0: str | None = None
    env_policy: EnvPolicy | None = None
    sandbox: WireProcessSandbox | None = None
    enforce_managed_network: bool = False
    managed_network: ManagedNetwork | None = None
    network_proxy: NetworkProxyLaunch | None = None
    shell_snapshot: Any = None
    metadata: ProcessMetadata | None = None
    #: Ours: the terminal's size for ``tty: true`` (the reference: always 24 x 80).
    size: TerminalSize | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StartResult:
    """``process/start`` result."""

    process_id: str
    sandbox_type: SandboxType

    def to_wire(self) -> dict[str, Any]:
        """Wire form."""
        return {"processId": self.process_id, "sandboxType": self.sandbox_type.value}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadParams:
    """``process/read`` params."""

    process_id: str
    after_seq: U64 | None = None
    max_bytes: Usize | None = None
    wait_ms: U64 | None = None


@dataclass(frozen=True, slots=True)
class OutputChunk:
    """One retained piece of output with its sequence number."""

    seq: int
    stream: Stream
    data: bytes

    def to_wire(self) -> dict[str, Any]:
        """Wire form, as in ``process/read`` chunks and ``process/output`` (bytes as base64)."""
        return {"seq": self.seq, "stream": self.stream.value, "chunk": base64_value(self.data)}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadResult:
    """``process/read`` result."""

    chunks: tuple[OutputChunk, ...]
    next_seq: int
    exited: bool
    exit_code: int | None
    closed: bool
    failure: str | None
    sandbox_denied: bool

    def to_wire(self) -> dict[str, Any]:
        """Wire form (chunk bytes as base64)."""
        return {
            "chunks": [chunk.to_wire() for chunk in self.chunks],
            "nextSeq": self.next_seq,
            "exited": self.exited,
            "exitCode": self.exit_code,
            "closed": self.closed,
            "failure": self.failure,
            "sandboxDenied": self.sandbox_denied,
        }


@dataclass(frozen=True, slots=True)
class ProcessOutput:
    """``process/output``: one chunk, pushed as it is read."""

    method: ClassVar[str] = methods.PROCESS_OUTPUT
    process_id: str
    chunk: OutputChunk

    def to_wire(self) -> dict[str, Any]:
        """Wire form."""
        return {"processId": self.process_id, **self.chunk.to_wire()}


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessExited:
    """``process/exited``: the command's exit code and the denial verdict."""

    method: ClassVar[str] = methods.PROCESS_EXITED
    process_id: str
    seq: int
    exit_code: int
    sandbox_denied: bool

    def to_wire(self) -> dict[str, Any]:
        """Wire form."""
        return {
            "processId": self.process_id,
            "seq": self.seq,
            "exitCode": self.exit_code,
            "sandboxDenied": self.sandbox_denied,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessClosed:
    """``process/closed``: exited, and every stream ended."""

    method: ClassVar[str] = methods.PROCESS_CLOSED
    process_id: str
    seq: int

    def to_wire(self) -> dict[str, Any]:
        """Wire form."""
        return {"processId": self.process_id, "seq": self.seq}


#: The notifications of one process, in its ``seq`` order.
ProcessEvent = ProcessOutput | ProcessExited | ProcessClosed


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteParams:
    """``process/write`` params."""

    process_id: str
    chunk: Base64Bytes
    write_id: str
    #: Ours: close the stdin pipe once ``chunk`` is written (the command reads EOF).
    close_stdin: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ResizePtyParams:
    """``process/resizePty`` params (ours)."""

    process_id: str
    size: TerminalSize


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalParams:
    """``process/signal`` params."""

    process_id: str
    signal: SignalName


@dataclass(frozen=True, slots=True, kw_only=True)
class TerminateParams:
    """``process/terminate`` params."""

    process_id: str
