"""WebSocket authentication: the reference's ``capability-token`` mode (pure).

With ``--ws-auth capability-token`` the upgrade request must carry
``Authorization: Bearer <token>``. The daemon knows only the token's SHA-256 — read from a
file at startup (``--ws-token-file``, surrounding whitespace trimmed, never re-read) or given
as hex (``--ws-token-sha256``) — and compares digests in constant time. Answers and their
order follow the reference (observed on v0.169.0): the scheme is case-insensitive, only the
first ``Authorization`` header counts, and a failure is a 401 whose ``text/plain`` body says
which of three things went wrong. ``/readyz`` stays open.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from executor.errors import ConfigError

__all__ = ["INVALID_HEADER", "INVALID_TOKEN", "MISSING", "CapabilityToken", "from_flags"]

MISSING: Final = "missing websocket bearer token"
INVALID_HEADER: Final = "invalid authorization header"
INVALID_TOKEN: Final = "invalid websocket bearer token"

_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")


@dataclass(frozen=True, slots=True)
class CapabilityToken:
    """Accepts exactly the bearer token whose SHA-256 is ``digest``."""

    digest: bytes

    @classmethod
    def from_file(cls, path: str) -> CapabilityToken:
        """The token in ``path`` (read now, whitespace trimmed; an empty one is refused)."""
        try:
            token = Path(path).read_bytes().strip()
        except OSError as exc:
            raise ConfigError(
                f"failed to read websocket auth secret {path}: {exc.strerror}"
            ) from None
        if not token:
            raise ConfigError(f"websocket auth secret {path} must not be empty")
        return cls(hashlib.sha256(token).digest())

    @classmethod
    def from_sha256(cls, hex_digest: str) -> CapabilityToken:
        """A token known only by its hex SHA-256 (either case)."""
        if not _HEX_DIGEST.fullmatch(hex_digest):
            raise ConfigError("--ws-token-sha256 must be a 64-character hex SHA-256 digest")
        return cls(bytes.fromhex(hex_digest))

    def refusal(self, authorization: str | None) -> str | None:
        """Why the upgrade is refused (the 401 body), or None when the token is right."""
        if authorization is None:
            return MISSING
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return INVALID_HEADER
        presented = hashlib.sha256(token.encode("latin-1")).digest()
        return None if hmac.compare_digest(presented, self.digest) else INVALID_TOKEN


def from_flags(
    mode: str | None, token_file: str | None, token_sha256: str | None, *, stdio: bool
) -> CapabilityToken | None:
    """The authenticator the ``--ws-*`` flags ask for, with the reference's refusals."""
    if mode is None:
        if token_file is not None or token_sha256 is not None:
            raise ConfigError("websocket auth flags require `--ws-auth capability-token`")
        return None
    if stdio:
        raise ConfigError("WebSocket auth requires a WebSocket listener, not stdio")
    if mode != "capability-token":
        raise ConfigError(
            f"--ws-auth {mode} is not supported by this executor; use capability-token"
        )
    if token_file is not None and token_sha256 is not None:
        raise ConfigError("`--ws-token-file` and `--ws-token-sha256` are mutually exclusive")
    if token_file is not None:
        return CapabilityToken.from_file(token_file)
    if token_sha256 is not None:
        return CapabilityToken.from_sha256(token_sha256)
    raise ConfigError(
        "`--ws-token-file` or `--ws-token-sha256` is required when "
        "`--ws-auth capability-token` is set"
    )
