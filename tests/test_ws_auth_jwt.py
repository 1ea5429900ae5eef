"""``--ws-auth signed-bearer-token``: an HS256 JWT under a shared secret.

Each rule below was observed on the reference (v0.169.0): ``exp`` is required and must be
whole seconds, ``nbf`` is honoured, both with 30 s of leeway by default, only HS256 is
accepted (``none`` and other algorithms are refused), ``iss``/``aud`` are checked only when
configured, and the 401 body says which rule failed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.client import connect_sync
from executor.errors import ConfigError
from executor.transports.auth import (
    EXPIRED_JWT,
    IMMATURE_JWT,
    INVALID_HEADER,
    INVALID_JWT,
    MAX_TOKEN_CHARS,
    MISSING,
    WRONG_AUDIENCE,
    WRONG_ISSUER,
    SignedBearerToken,
)
from tests.support.daemon import RunningDaemon, executor_command
from tests.support.rawws import http_request, upgrade_headers

SECRET = b"a-shared-secret-of-at-least-32-bytes!"
NOW = 1_800_000_000


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(
    claims: dict[str, Any], *, secret: bytes = SECRET, header: dict[str, Any] | None = None
) -> str:
    """A compact JWS; HS256 unless ``header`` says otherwise (it is signed with HS256 anyway)."""
    head = _b64url(json.dumps(header or {"alg": "HS256", "typ": "JWT"}).encode())
    body = _b64url(json.dumps(claims).encode())
    signature = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64url(signature)}"


def raw_jws(header: bytes, body: bytes, *, secret: bytes = SECRET) -> str:
    """A compact JWS of exactly these JSON bytes (json.dumps cannot write some hostile ones)."""
    signing_input = f"{_b64url(header)}.{_b64url(body)}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64url(signature)}"


HS256 = b'{"alg":"HS256","typ":"JWT"}'
HUGE_INT = b"9" * 5000  # beyond Python's 4,300-digit int parsing limit: ValueError
DEEP = b"[" * 5000  # beyond the JSON parser's recursion limit: RecursionError
WRONG_SECRET = b"another-secret-of-at-least-32-bytes"

#: Tokens whose parse raised in the hand-written parser (before the signature was checked),
#: each with the right and a wrong signature; every one must be a plain 401.
HOSTILE = {
    f"{name}-{signed}": raw_jws(header, body, secret=SECRET if signed == "signed" else WRONG_SECRET)
    for name, header, body in [
        ("huge-int-claim", HS256, b'{"exp":' + HUGE_INT + b"}"),
        ("deep-claims", HS256, b'{"exp":1,"x":' + DEEP + b"}"),
        ("huge-int-header", b'{"alg":"HS256","n":' + HUGE_INT + b"}", b'{"exp":1}'),
        ("deep-header", b'{"alg":"HS256","x":' + DEEP + b"}", b'{"exp":1}'),
    ]
    for signed in ("signed", "wrong-secret")
}


def checker(**options: Any) -> SignedBearerToken:
    return SignedBearerToken(SECRET, clock=lambda: NOW, **options)


VALID = {"exp": NOW + 60, "iss": "executor-tests", "aud": "devbox"}


@pytest.mark.parametrize(
    ("token", "refusal"),
    [
        (jwt(VALID), None),
        (jwt({"exp": NOW + 60}), None),  # iss and aud only matter when configured
        (jwt({**VALID, "exp": NOW - 30}), None),  # within the default leeway
        (jwt({**VALID, "exp": NOW - 31}), EXPIRED_JWT),
        (jwt({**VALID, "nbf": NOW + 30}), None),
        (jwt({**VALID, "nbf": NOW + 31}), IMMATURE_JWT),
        (jwt({**VALID, "iat": NOW + 3600}), None),  # iat is not checked
        (jwt({"iss": "x"}), INVALID_JWT),  # exp is required
        (jwt({**VALID, "exp": NOW + 60.5}), INVALID_JWT),
        (jwt({**VALID, "exp": str(NOW + 60)}), INVALID_JWT),
        (jwt({**VALID, "exp": True}), INVALID_JWT),
        (jwt({**VALID, "iss": 5}), INVALID_JWT),
        (jwt({**VALID, "aud": 5}), INVALID_JWT),
        (jwt(VALID, secret=b"another-secret-of-at-least-32-bytes"), INVALID_JWT),
        (jwt(VALID, header={"alg": "HS384"}), INVALID_JWT),
        (jwt(VALID, header={"alg": "none"}), INVALID_JWT),
        (jwt(VALID).rsplit(".", 1)[0] + ".", INVALID_JWT),  # unsigned
        (jwt(VALID, header={"alg": "HS256"}), None),  # typ is optional
        (jwt(VALID, header={"alg": "HS256", "kid": "k1"}), None),
        ("a.b", INVALID_JWT),
        ("a.b.c", INVALID_JWT),
        ("!!.??.**", INVALID_JWT),
    ],
    ids=[
        "valid",
        "minimal",
        "expired-within-leeway",
        "expired",
        "not-before-within-leeway",
        "not-yet-valid",
        "issued-in-the-future",
        "no-exp",
        "float-exp",
        "string-exp",
        "bool-exp",
        "int-iss",
        "int-aud",
        "wrong-secret",
        "hs384",
        "alg-none",
        "unsigned",
        "no-typ",
        "kid",
        "two-parts",
        "not-base64-json",
        "not-base64url",
    ],
)
def test_the_jwt_rules(token: str, refusal: str | None) -> None:
    assert checker().refusal(f"Bearer {token}") == refusal


@pytest.mark.parametrize("token", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_json_is_an_invalid_jwt_not_an_exception(token: str) -> None:
    assert len(token) <= MAX_TOKEN_CHARS  # reaches the parser: not refused by the size bound
    assert checker().refusal(f"Bearer {token}") == INVALID_JWT


def test_a_token_beyond_the_size_bound_is_refused_unparsed() -> None:
    padded = jwt({**VALID, "pad": "x" * MAX_TOKEN_CHARS})
    assert checker().refusal(f"Bearer {padded}") == INVALID_JWT
    fits = jwt({**VALID, "pad": "x" * (MAX_TOKEN_CHARS // 2)})
    assert checker().refusal(f"Bearer {fits}") is None


def test_a_secret_pyjwt_would_refuse_stops_startup() -> None:
    pem = b"-----BEGIN PUBLIC KEY-----\n" + b"A" * 64 + b"\n-----END PUBLIC KEY-----"
    with pytest.raises(ConfigError, match="unusable signed websocket bearer secret"):
        SignedBearerToken(pem)


@pytest.mark.parametrize(
    ("claims", "refusal"),
    [
        (VALID, None),
        ({**VALID, "aud": ["other", "devbox"]}, None),
        ({**VALID, "iss": "someone-else"}, WRONG_ISSUER),
        ({"exp": NOW + 60, "aud": "devbox"}, WRONG_ISSUER),
        ({**VALID, "aud": "elsewhere"}, WRONG_AUDIENCE),
        ({**VALID, "aud": []}, WRONG_AUDIENCE),
        ({"exp": NOW + 60, "iss": "executor-tests"}, WRONG_AUDIENCE),
        ({**VALID, "exp": NOW - 100, "iss": "someone-else"}, EXPIRED_JWT),  # expiry first
    ],
    ids=[
        "both-match",
        "audience-in-a-list",
        "wrong-issuer",
        "no-issuer",
        "wrong-audience",
        "empty-audience-list",
        "no-audience",
        "expiry-before-issuer",
    ],
)
def test_issuer_and_audience_when_configured(claims: dict[str, Any], refusal: str | None) -> None:
    configured = checker(issuer="executor-tests", audience="devbox")
    assert configured.refusal(f"Bearer {jwt(claims)}") == refusal


def test_leeway_is_configurable() -> None:
    strict = checker(max_clock_skew=0)
    assert strict.refusal(f"Bearer {jwt({'exp': NOW})}") is None
    assert strict.refusal(f"Bearer {jwt({'exp': NOW - 1})}") == EXPIRED_JWT
    assert strict.refusal(f"Bearer {jwt({'exp': NOW + 60, 'nbf': NOW + 1})}") == IMMATURE_JWT


def test_the_header_itself_is_checked_as_in_the_capability_mode() -> None:
    assert checker().refusal(None) == MISSING
    assert checker().refusal(f"Basic {jwt(VALID)}") == INVALID_HEADER
    assert checker().refusal(f"bearer   {jwt(VALID)} ") is None


def test_the_shared_secret_is_trimmed_and_must_be_long_enough(tmp_path: Path) -> None:
    good = tmp_path / "secret"
    good.write_bytes(b"  " + SECRET + b"\n")
    assert SignedBearerToken.from_file(str(good)).secret == SECRET
    short = tmp_path / "short"
    short.write_bytes(b"0123456789abcdef0123456789abcde\n")  # 31 bytes once trimmed
    with pytest.raises(ConfigError, match="must be at least 32 bytes"):
        SignedBearerToken.from_file(str(short))


# --- a real daemon ------------------------------------------------------------------------


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[RunningDaemon]:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET + b"\n")
    secret.chmod(0o600)
    args = ["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", str(secret)]
    running = RunningDaemon([*args, "--ws-issuer", "executor-tests", "--ws-audience", "devbox"])
    try:
        yield running
    finally:
        running.stop()


def test_a_valid_jwt_opens_a_working_session(daemon: RunningDaemon) -> None:
    token = jwt({**VALID, "exp": int(time.time()) + 60})
    with connect_sync(daemon.url, token=token, client_name="jwt-test") as client:
        result = client.run(["/bin/echo", "signed"])
    assert (result.exit_code, result.stdout) == (0, b"signed\n")


def test_an_expired_jwt_gets_401(daemon: RunningDaemon) -> None:
    token = jwt({**VALID, "exp": int(time.time()) - 3600})
    answer = http_request(
        daemon.url, "GET", "/", upgrade_headers({"Authorization": f"Bearer {token}"})
    )
    assert (answer.status, answer.body.decode()) == (401, EXPIRED_JWT)


def test_hostile_tokens_get_401_and_the_daemon_keeps_serving(daemon: RunningDaemon) -> None:
    for name, token in HOSTILE.items():
        answer = http_request(
            daemon.url, "GET", "/", upgrade_headers({"Authorization": f"Bearer {token}"})
        )
        assert (name, answer.status, answer.body.decode()) == (name, 401, INVALID_JWT)
    good = jwt({**VALID, "exp": int(time.time()) + 60})
    with connect_sync(daemon.url, token=good, client_name="after-hostile-tokens") as client:
        assert client.session_id
    log = daemon.log()
    assert log.count("refused a WebSocket upgrade from") == len(HOSTILE), log
    assert "Traceback" not in log, log


def test_a_short_secret_stops_the_daemon_with_a_clear_message(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("too short\n")
    flags = ["--ws-auth", "signed-bearer-token", "--ws-shared-secret-file", str(short)]
    result = subprocess.run(
        [*executor_command(), "serve", *flags],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "must be at least 32 bytes" in result.stderr
