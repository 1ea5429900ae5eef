"""Wire method names, and the family each belongs to for handshake gating messages."""

from __future__ import annotations

from typing import Final

INITIALIZE: Final = "initialize"
INITIALIZED: Final = "initialized"

ENVIRONMENT_INFO: Final = "environment/info"
ENVIRONMENT_STATUS: Final = "environment/status"
ENVIRONMENT_CONFIG_READ: Final = "environmentConfig/read"

PROCESS_START: Final = "process/start"
PROCESS_READ: Final = "process/read"
PROCESS_WRITE: Final = "process/write"
PROCESS_SIGNAL: Final = "process/signal"
PROCESS_TERMINATE: Final = "process/terminate"
#: Ours (Codex's app-server has a method of this name; the exec-server does not).
PROCESS_RESIZE_PTY: Final = "process/resizePty"
PROCESS_OUTPUT: Final = "process/output"
PROCESS_EXITED: Final = "process/exited"
PROCESS_CLOSED: Final = "process/closed"

FS_READ_FILE: Final = "fs/readFile"
FS_WRITE_FILE: Final = "fs/writeFile"
FS_CREATE_DIRECTORY: Final = "fs/createDirectory"
FS_GET_METADATA: Final = "fs/getMetadata"
FS_READ_DIRECTORY: Final = "fs/readDirectory"
FS_WALK: Final = "fs/walk"
FS_REMOVE: Final = "fs/remove"
FS_COPY: Final = "fs/copy"
FS_CANONICALIZE: Final = "fs/canonicalize"
FS_OPEN: Final = "fs/open"
FS_READ_BLOCK: Final = "fs/readBlock"
FS_WRITE_BLOCK: Final = "fs/writeBlock"
FS_CLOSE: Final = "fs/close"
FS_WATCH_MISSING: Final = "fs/watchMissing"
FS_MISSING_CHANGED: Final = "fs/missingChanged"

CAPABILITY_ROOTS_DISCOVER: Final = "capabilityRoots/discoverV1"

HTTP_REQUEST: Final = "http/request"
HTTP_BODY_DELTA: Final = "http/request/bodyDelta"

#: The ``<family>`` word in "client must call initialize before using <family> methods".
_FAMILY_BY_PREFIX: Final = {
    "process/": "exec",
    "fs/": "filesystem",
    "http/": "http",
}
_FAMILY_BY_NAME: Final = {
    ENVIRONMENT_INFO: "environment info",
    ENVIRONMENT_STATUS: "environment status",
    ENVIRONMENT_CONFIG_READ: "environment config",
    CAPABILITY_ROOTS_DISCOVER: "capability discovery",
}


def family(method: str) -> str:
    """The family word the reference uses in handshake-gating errors for ``method``."""
    named = _FAMILY_BY_NAME.get(method)
    if named is not None:
        return named
    prefix = method.split("/", 1)[0] + "/"
    return _FAMILY_BY_PREFIX.get(prefix, method)
