"""Typed params and results of the filesystem methods (``fs/*``, protocol.md §5.11-§5.24).

Params decode with ``executor.protocol.decode``; ``sandbox`` decodes to a ``SandboxIntent``
(``executor.protocol.intent``) with the params, while paths stay ``file:`` URI strings until a
handler parses them (``executor.protocol.paths``), after the sandbox, as the reference does.
``fs/writeFile`` keeps ``dataBase64`` as text because it reports bad base64 with its own code
and message. Results render themselves with ``to_wire()``.
"""

from __future__ import annotations

import base64
import enum
import re
from dataclasses import dataclass, field
from typing import Any, Final

from executor.errors import InvalidRequest
from executor.protocol import b64codec
from executor.protocol.decode import U64, Base64Bytes, Usize
from executor.protocol.intent import WireSandbox

__all__ = [
    "CanonicalizeParams",
    "CloseParams",
    "CopyParams",
    "CreateDirectoryParams",
    "DirectoryEntry",
    "GetMetadataParams",
    "Metadata",
    "OpenMode",
    "OpenParams",
    "ReadBlockParams",
    "ReadDirectoryParams",
    "ReadFileParams",
    "RemoveParams",
    "WalkEntry",
    "WalkError",
    "WalkKind",
    "WalkOptions",
    "WalkParams",
    "WalkResult",
    "WriteBlockParams",
    "WriteFileParams",
    "decode_base64_strict",
]


class OpenMode(enum.StrEnum):
    """How ``fs/open`` opens a file: ``read`` an existing one, or ``replace`` (create/truncate)."""

    READ = "read"
    REPLACE = "replace"


class WalkKind(enum.StrEnum):
    """What a ``fs/walk`` entry is."""

    DIRECTORY = "directory"
    FILE = "file"


_NOT_BASE64: Final = re.compile(rb"[^A-Za-z0-9+/=]")


def decode_base64_strict(text: str) -> bytes:
    """Canonical padded base64 (RFC 4648 §4), failing with the reference's wording."""
    raw = text.encode("utf-8", "surrogatepass")
    try:
        # The strict decoder refuses all that _diagnose_base64 refuses (it is SIMD; its
        # regular expression took ~275 ms on a 16 MiB message): it only runs to say why,
        # in the reference's words.
        data = b64codec.decode(raw)
    except ValueError:
        _diagnose_base64(raw)
        raise
    body = len(raw) - (2 if raw.endswith(b"==") else 1 if raw.endswith(b"=") else 0)
    if body % 4 and base64.b64encode(data[-(3 * (body % 4) // 4) :]) != raw[-4:]:
        raise ValueError(f"Invalid last symbol {raw[body - 1]}, offset {body - 1}.")
    return data


def _diagnose_base64(raw: bytes) -> None:
    """Raise the reference's description of what is wrong with the base64 ``raw``."""
    bad = _NOT_BASE64.search(raw)
    if bad is not None:
        raise ValueError(f"Invalid symbol {raw[bad.start()]}, offset {bad.start()}.")
    body = len(raw.rstrip(b"="))
    misplaced = raw.find(b"=", 0, body)
    if misplaced >= 0:
        raise ValueError(f"Invalid symbol {raw[misplaced]}, offset {misplaced}.")
    if body % 4 == 1:
        raise ValueError("Invalid input length")
    if len(raw) % 4 or len(raw) - body > 2:
        raise ValueError("Invalid padding")


# --- params ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadFileParams:
    """``fs/readFile`` params."""

    path: str
    follow_symlinks: bool = True
    sandbox: WireSandbox | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteFileParams:
    """``fs/writeFile`` params (``dataBase64`` decoded by the handler)."""

    path: str
    data_base64: str
    follow_symlinks: bool = True
    sandbox: WireSandbox | None = None

    def data(self) -> bytes:
        """The bytes to write; bad base64 is ``-32600`` here, not ``-32602``."""
        try:
            return decode_base64_strict(self.data_base64)
        except ValueError as exc:
            raise InvalidRequest(f"fs/writeFile requires valid base64 dataBase64: {exc}") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateDirectoryParams:
    """``fs/createDirectory`` params; ``recursive`` defaults to true."""

    path: str
    recursive: bool = True
    follow_symlinks: bool = True
    sandbox: WireSandbox | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class GetMetadataParams:
    """``fs/getMetadata`` params."""

    path: str
    follow_symlinks: bool = True
    sandbox: WireSandbox | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadDirectoryParams:
    """``fs/readDirectory`` params."""

    path: str
    sandbox: WireSandbox | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WalkOptions:
    """``fs/walk`` limits: all four fields are required on the wire."""

    max_depth: Usize
    max_directories: Usize
    max_entries: Usize
    follow_directory_symlinks: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class WalkParams:
    """``fs/walk`` params."""

    path: str
    options: WalkOptions
    sandbox: WireSandbox | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveParams:
    """``fs/remove`` params; ``recursive`` and ``force`` default to true."""

    path: str
    recursive: bool = True
    force: bool = True
    follow_symlinks: bool = True
    sandbox: WireSandbox | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyParams:
    """``fs/copy`` params; ``recursive`` is required."""

    source_path: str
    destination_path: str
    recursive: bool
    sandbox: WireSandbox | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CanonicalizeParams:
    """``fs/canonicalize`` params."""

    path: str
    sandbox: WireSandbox | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenParams:
    """``fs/open`` params; the handle id is chosen by the client."""

    handle_id: str
    path: str
    mode: OpenMode = OpenMode.READ
    sandbox: WireSandbox | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadBlockParams:
    """``fs/readBlock`` params (``len`` on the wire)."""

    handle_id: str
    offset: U64
    length: Usize = field(metadata={"wire": "len"})


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteBlockParams:
    """``fs/writeBlock`` params."""

    handle_id: str
    offset: U64
    chunk: Base64Bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class CloseParams:
    """``fs/close`` params."""

    handle_id: str


# --- results --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Metadata:
    """``fs/getMetadata`` result; times are milliseconds since the epoch (0: unknown)."""

    is_directory: bool
    is_file: bool
    is_symlink: bool
    size: int
    created_at_ms: int
    modified_at_ms: int

    def to_wire(self) -> dict[str, Any]:
        """Wire form, fields in the reference's order."""
        return {
            "isDirectory": self.is_directory,
            "isFile": self.is_file,
            "isSymlink": self.is_symlink,
            "size": self.size,
            "createdAtMs": self.created_at_ms,
            "modifiedAtMs": self.modified_at_ms,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class DirectoryEntry:
    """One ``fs/readDirectory`` entry (types describe a symlink's target)."""

    file_name: str
    is_directory: bool
    is_file: bool

    def to_wire(self) -> dict[str, Any]:
        """Wire form."""
        return {
            "fileName": self.file_name,
            "isDirectory": self.is_directory,
            "isFile": self.is_file,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class WalkEntry:
    """One ``fs/walk`` entry: a ``file:`` URI and its kind."""

    path: str
    kind: WalkKind

    def to_wire(self) -> dict[str, Any]:
        """Wire form."""
        return {"path": self.path, "kind": self.kind.value}


@dataclass(frozen=True, slots=True, kw_only=True)
class WalkError:
    """A directory ``fs/walk`` could not read, with the OS error text."""

    path: str
    message: str

    def to_wire(self) -> dict[str, Any]:
        """Wire form."""
        return {"path": self.path, "message": self.message}


@dataclass(frozen=True, slots=True, kw_only=True)
class WalkResult:
    """``fs/walk`` result."""

    entries: tuple[WalkEntry, ...]
    errors: tuple[WalkError, ...]
    truncated: bool

    def to_wire(self) -> dict[str, Any]:
        """Wire form."""
        return {
            "entries": [entry.to_wire() for entry in self.entries],
            "errors": [error.to_wire() for error in self.errors],
            "truncated": self.truncated,
        }
