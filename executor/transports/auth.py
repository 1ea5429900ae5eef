"""WebSocket authentication: the reference's two ``--ws-auth`` modes (pure).

The upgrade request must carry ``Authorization: Bearer <token>``; what the token must be
depends on the mode:

* ``capability-token``: a shared secret. The daemon knows only its SHA-256 — read from a
  file at startup (``--ws-token-file``, surrounding whitespace trimmed) or given as hex
  (``--ws-token-sha256``) — and compares digests in constant time.
* ``signed-bearer-token``: a JWT signed with HS256 under the secret in
  ``--ws-shared-secret-file`` (trimmed, at least 32 bytes). ``exp`` is required, ``nbf`` is
  honoured, both with ``--ws-max-clock-skew-seconds`` of leeway (default 30); ``iss`` and
  ``aud`` must match ``--ws-issuer`` / ``--ws-audience`` when those are given. Parsing
  and the signature check are PyJWT's; a token longer than ``MAX_TOKEN_CHARS`` or one
  that does not parse (huge integers, deep nesting) is refused like any other bad token.

Answers and their order follow the reference (observed on v0.169.0): the scheme is
case-insensitive, only the first ``Authorization`` header counts, and a failure is a 401
whose ``text/plain`` body names what went wrong. ``/readyz`` stays open.

Credentials read from a file can be re-read while the daemon runs (``ReloadingAuthenticator``;
``executor serve`` does on SIGHUP), so a token is rotated without a restart: new upgrades
need the new one, connections already open are not touched, and a new file that cannot be
read or is not valid leaves the old credentials in place.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import jwt
from jwt.algorithms import HMACAlgorithm

from executor.errors import ConfigError

__all__ = [
    "DEFAULT_MAX_CLOCK_SKEW",
    "EXPIRED_JWT",
    "IMMATURE_JWT",
    "INVALID_HEADER",
    "INVALID_JWT",
    "INVALID_TOKEN",
    "MAX_TOKEN_CHARS",
    "MISSING",
    "WRONG_AUDIENCE",
    "WRONG_ISSUER",
    "AuthFlags",
    "Authenticator",
    "CapabilityToken",
    "ReloadingAuthenticator",
    "SignedBearerToken",
    "from_flags",
]

MISSING: Final = "missing websocket bearer token"
INVALID_HEADER: Final = "invalid authorization header"
INVALID_TOKEN: Final = "invalid websocket bearer token"
INVALID_JWT: Final = "invalid websocket jwt"
EXPIRED_JWT: Final = "expired websocket jwt"
IMMATURE_JWT: Final = "websocket jwt is not valid yet"
WRONG_ISSUER: Final = "websocket jwt issuer mismatch"
WRONG_AUDIENCE: Final = "websocket jwt audience mismatch"

DEFAULT_MAX_CLOCK_SKEW: Final = 30
_MIN_SHARED_SECRET: Final = 32
#: Longest bearer JWT parsed (characters). Ours are a few hundred; the bound keeps the
#: JSON that is parsed before the signature is known (the header) small.
MAX_TOKEN_CHARS: Final = 8 * 1024
_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")


class Authenticator(Protocol):
    """Decides whether an upgrade request may become a connection."""

    def refusal(self, authorization: str | None) -> str | None:
        """Why the upgrade is refused (the 401 body), or None to accept it."""


def _bearer(authorization: str | None) -> tuple[str | None, str | None]:
    """``(token, None)``, or ``(None, refusal)`` when there is no usable bearer token."""
    if authorization is None:
        return None, MISSING
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None, INVALID_HEADER
    return token, None


def _read_secret(path: str) -> bytes:
    try:
        secret = Path(path).read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"failed to read websocket auth secret {path}: {exc.strerror}") from None
    if not secret:
        raise ConfigError(f"websocket auth secret {path} must not be empty")
    return secret


@dataclass(frozen=True, slots=True)
class CapabilityToken:
    """Accepts exactly the bearer token whose SHA-256 is ``digest``."""

    digest: bytes

    @classmethod
    def from_file(cls, path: str) -> CapabilityToken:
        """The token in ``path`` (read now, whitespace trimmed; an empty one is refused)."""
        return cls(hashlib.sha256(_read_secret(path)).digest())

    @classmethod
    def from_sha256(cls, hex_digest: str) -> CapabilityToken:
        """A token known only by its hex SHA-256 (either case)."""
        if not _HEX_DIGEST.fullmatch(hex_digest):
            raise ConfigError("--ws-token-sha256 must be a 64-character hex SHA-256 digest")
        return cls(bytes.fromhex(hex_digest))

    def refusal(self, authorization: str | None) -> str | None:
        """Why the upgrade is refused (the 401 body), or None when the token is right."""
        token, refused = _bearer(authorization)
        if token is None:
            return refused
        presented = hashlib.sha256(token.encode("latin-1")).digest()
        return None if hmac.compare_digest(presented, self.digest) else INVALID_TOKEN


@dataclass(frozen=True, slots=True)
class SignedBearerToken:
    """Accepts an unexpired HS256 JWT signed with ``secret`` (and naming ``issuer`` and
    ``audience`` when those are set).

    The JWS layer — splitting, base64url, the JSON of header and claims, the ``alg``
    allow-list and the constant-time signature check — is PyJWT's: those are the sharp
    edges. The claim rules stay here because they follow the reference, not PyJWT's
    defaults (which coerce ``"123"`` and ``1.5`` to whole seconds, treat ``exp == now -
    leeway`` as expired, check ``nbf`` before ``exp`` and refuse an unrequested ``aud``).
    """

    secret: bytes
    issuer: str | None = None
    audience: str | None = None
    max_clock_skew: int = DEFAULT_MAX_CLOCK_SKEW
    clock: Callable[[], float] = field(default=time.time, compare=False)

    def __post_init__(self) -> None:
        # PyJWT refuses HMAC secrets that look like PEM/SSH/DER keys or a JWK; say so at
        # startup instead of refusing every token later.
        try:
            HMACAlgorithm(HMACAlgorithm.SHA256).prepare_key(self.secret)
        except jwt.InvalidKeyError as exc:
            raise ConfigError(f"unusable signed websocket bearer secret: {exc}") from None

    @classmethod
    def from_file(cls, path: str, **options: Any) -> SignedBearerToken:
        """The shared secret in ``path`` (trimmed; at least 32 bytes, as the reference)."""
        secret = _read_secret(path)
        if len(secret) < _MIN_SHARED_SECRET:
            raise ConfigError(
                f"signed websocket bearer secret {path} must be at least {_MIN_SHARED_SECRET} bytes"
            )
        return cls(secret, **options)

    def refusal(self, authorization: str | None) -> str | None:
        """Why the upgrade is refused (the 401 body), or None when the JWT is acceptable."""
        token, refused = _bearer(authorization)
        if token is None:
            return refused
        claims = self._verified_claims(token)
        if claims is None:
            return INVALID_JWT
        now = int(self.clock())
        if claims["exp"] < now - self.max_clock_skew:
            return EXPIRED_JWT
        if "nbf" in claims and claims["nbf"] > now + self.max_clock_skew:
            return IMMATURE_JWT
        if self.issuer is not None and claims.get("iss") != self.issuer:
            return WRONG_ISSUER
        if self.audience is not None:
            audience = claims.get("aud")
            named = [audience] if isinstance(audience, str) else audience or []
            if self.audience not in named:
                return WRONG_AUDIENCE
        return None

    def _verified_claims(self, token: str) -> dict[str, Any] | None:
        """The claims of a well-formed, HS256-signed token with valid claim types; else None.

        The token is size-bounded before anything parses it, and every failure of the
        parse — including ``ValueError`` from a 5,000-digit integer and ``RecursionError``
        from deep nesting, which older PyJWT releases let through — is a refusal, never
        an exception out of the handshake.
        """
        if len(token) > MAX_TOKEN_CHARS or not token.isascii():
            return None
        try:
            # PyJWT checks the signature, then parses the claims; the claim rules are ours.
            claims = jwt.decode(
                token,
                self.secret,
                algorithms=["HS256"],
                options={
                    "verify_signature": True,
                    "verify_exp": False,
                    "verify_nbf": False,
                    "verify_iat": False,
                    "verify_iss": False,
                    "verify_aud": False,
                    "verify_sub": False,
                    "verify_jti": False,
                    "require": [],
                },
            )
        except (jwt.PyJWTError, ValueError, RecursionError):
            return None
        return claims if _claim_types_valid(claims) else None


class ReloadingAuthenticator:
    """The authenticator built from the file ``source``, rebuilt from it on ``reload()``."""

    def __init__(self, load: Callable[[], Authenticator], source: str) -> None:
        self._load = load
        self.source = source
        self.current = load()  # a file that is unusable now stops the daemon from starting

    def refusal(self, authorization: str | None) -> str | None:
        """Why the upgrade is refused under the credentials loaded last, or None."""
        return self.current.refusal(authorization)

    def reload(self) -> bool:
        """Read ``source`` again; returns whether the credentials changed.

        Raises ``ConfigError`` (naming the file and the problem) when the file cannot be read
        or holds nothing valid; the credentials loaded before stay in force.
        """
        fresh = self._load()
        changed = fresh != self.current
        self.current = fresh
        return changed


def _is_timestamp(value: object) -> bool:
    # Whole seconds only: the reference refuses 1.5 and "1" (and so does this).
    return type(value) is int and value >= 0


def _claim_types_valid(claims: dict[str, Any]) -> bool:
    if not _is_timestamp(claims.get("exp")):
        return False
    if "nbf" in claims and not _is_timestamp(claims["nbf"]):
        return False
    if "iss" in claims and not isinstance(claims["iss"], str):
        return False
    audience = claims.get("aud")
    return (
        audience is None
        or isinstance(audience, str)
        or (isinstance(audience, list) and all(isinstance(item, str) for item in audience))
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthFlags:
    """The ``--ws-*`` flags of ``executor serve`` as given (None: not given)."""

    mode: str | None = None
    token_file: str | None = None
    token_sha256: str | None = None
    shared_secret_file: str | None = None
    issuer: str | None = None
    audience: str | None = None
    max_clock_skew: int | None = None

    def token_flags(self) -> bool:
        return self.token_file is not None or self.token_sha256 is not None

    def jwt_flags(self) -> bool:
        return any(
            value is not None
            for value in (self.shared_secret_file, self.issuer, self.audience, self.max_clock_skew)
        )


def from_flags(flags: AuthFlags, *, stdio: bool) -> Authenticator | None:
    """The authenticator the ``--ws-*`` flags ask for, with the reference's refusals."""
    if flags.mode is None:
        if flags.token_flags() or flags.jwt_flags():
            raise ConfigError(
                "websocket auth flags require `--ws-auth capability-token` or "
                "`--ws-auth signed-bearer-token`"
            )
        return None
    if stdio:
        raise ConfigError("WebSocket auth requires a WebSocket listener, not stdio")
    if flags.mode == "capability-token":
        return _capability_token(flags)
    if flags.mode == "signed-bearer-token":
        return _signed_bearer_token(flags)
    raise ConfigError(
        f"unknown --ws-auth mode {flags.mode!r}: use capability-token or signed-bearer-token"
    )


def _capability_token(flags: AuthFlags) -> Authenticator:
    if flags.jwt_flags():
        raise ConfigError(
            "`--ws-shared-secret-file`, `--ws-issuer`, `--ws-audience`, and "
            "`--ws-max-clock-skew-seconds` require `--ws-auth signed-bearer-token`"
        )
    if flags.token_file is not None and flags.token_sha256 is not None:
        raise ConfigError("`--ws-token-file` and `--ws-token-sha256` are mutually exclusive")
    if flags.token_file is not None:
        path = flags.token_file
        return ReloadingAuthenticator(lambda: CapabilityToken.from_file(path), path)
    if flags.token_sha256 is not None:
        return CapabilityToken.from_sha256(flags.token_sha256)
    raise ConfigError(
        "`--ws-token-file` or `--ws-token-sha256` is required when "
        "`--ws-auth capability-token` is set"
    )


def _signed_bearer_token(flags: AuthFlags) -> Authenticator:
    if flags.token_flags():
        raise ConfigError(
            "`--ws-token-file` and `--ws-token-sha256` require `--ws-auth capability-token`, "
            "not `signed-bearer-token`"
        )
    if flags.shared_secret_file is None:
        raise ConfigError(
            "`--ws-shared-secret-file` is required when `--ws-auth signed-bearer-token` is set"
        )
    skew = DEFAULT_MAX_CLOCK_SKEW if flags.max_clock_skew is None else flags.max_clock_skew
    path, issuer, audience = flags.shared_secret_file, flags.issuer, flags.audience

    def load() -> SignedBearerToken:
        return SignedBearerToken.from_file(
            path, issuer=issuer, audience=audience, max_clock_skew=skew
        )

    return ReloadingAuthenticator(load, path)
