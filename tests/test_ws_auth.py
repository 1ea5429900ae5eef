"""WebSocket authentication: ``--ws-auth capability-token`` and ``signed-bearer-token``.

The answers, their texts and their order are the reference's (v0.169.0): a missing or wrong
bearer token gets 401 with a one-line ``text/plain`` reason, a request that is not a valid
upgrade still gets its 400 first, an ``Origin`` still gets 403, ``/readyz`` stays open.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.client import connect_sync
from executor.errors import ConfigError
from executor.transports.auth import (
    INVALID_HEADER,
    INVALID_TOKEN,
    MISSING,
    AuthFlags,
    CapabilityToken,
    from_flags,
)
from executor.transports.handshake import Response, Upgrade, parse_head, route
from tests.support.daemon import RunningDaemon, executor_command
from tests.support.rawws import http_request, upgrade_headers

TOKEN = "capability-7f3a"
GOOD = hashlib.sha256(TOKEN.encode()).hexdigest()


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(f"  {TOKEN}\n")  # surrounding whitespace is trimmed, as the reference does
    path.chmod(0o600)
    return path


# --- the token check ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("authorization", "refusal"),
    [
        (None, MISSING),
        (f"Bearer {TOKEN}", None),
        (f"bearer {TOKEN}", None),
        (f"BEARER   {TOKEN}  ", None),
        ("Bearer nope", INVALID_TOKEN),
        (f"Bearer {TOKEN}x", INVALID_TOKEN),
        (f"Bearer {TOKEN[:-1]}", INVALID_TOKEN),
        (TOKEN, INVALID_HEADER),
        (f"Basic {TOKEN}", INVALID_HEADER),
        ("Bearer", INVALID_HEADER),
        ("", INVALID_HEADER),
    ],
    ids=[
        "missing",
        "right",
        "scheme-lowercase",
        "scheme-uppercase-extra-spaces",
        "wrong",
        "longer",
        "shorter",
        "no-scheme",
        "basic",
        "scheme-only",
        "empty",
    ],
)
def test_the_bearer_token_decides(authorization: str | None, refusal: str | None) -> None:
    assert CapabilityToken.from_sha256(GOOD).refusal(authorization) == refusal


def test_a_token_file_and_its_digest_accept_the_same_token(token_file: Path) -> None:
    from_file = CapabilityToken.from_file(str(token_file))
    assert from_file == CapabilityToken.from_sha256(GOOD)
    assert from_file == CapabilityToken.from_sha256(GOOD.upper())


SECRET_FILE = "/nonexistent/secret"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (AuthFlags(), None),
        (AuthFlags(mode="capability-token"), "`--ws-token-file` or `--ws-token-sha256` is req"),
        (AuthFlags(token_file="/f"), "websocket auth flags require `--ws-auth capability-token`"),
        (AuthFlags(token_sha256=GOOD), "require `--ws-auth capability-token` or `--ws-auth sig"),
        (AuthFlags(issuer="i"), "require `--ws-auth capability-token` or `--ws-auth signed"),
        (
            AuthFlags(mode="capability-token", token_file="/f", token_sha256=GOOD),
            "are mutually exclusive",
        ),
        (
            AuthFlags(mode="capability-token", token_sha256="abcd"),
            "must be a 64-character hex SHA-256 digest",
        ),
        (
            AuthFlags(mode="capability-token", token_sha256="z" * 64),
            "must be a 64-character hex SHA-256 digest",
        ),
        (
            AuthFlags(mode="capability-token", token_file="/nonexistent/token"),
            "failed to read websocket auth secret /nonexistent/token",
        ),
        (
            AuthFlags(mode="capability-token", token_sha256=GOOD, audience="a"),
            "`--ws-audience`, and `--ws-max-clock-skew-seconds` require `--ws-auth signed-bearer",
        ),
        (
            AuthFlags(mode="signed-bearer-token"),
            "`--ws-shared-secret-file` is required when `--ws-auth signed-bearer-token` is set",
        ),
        (
            AuthFlags(mode="signed-bearer-token", shared_secret_file="/s", token_sha256=GOOD),
            "require `--ws-auth capability-token`, not `signed-bearer-token`",
        ),
        (
            AuthFlags(mode="signed-bearer-token", shared_secret_file=SECRET_FILE),
            f"failed to read websocket auth secret {SECRET_FILE}",
        ),
        (AuthFlags(mode="basic"), "unknown --ws-auth mode 'basic'"),
    ],
    ids=[
        "off",
        "no-secret",
        "file-without-mode",
        "digest-without-mode",
        "jwt-flag-without-mode",
        "both-secrets",
        "short-digest",
        "non-hex-digest",
        "unreadable-file",
        "jwt-flag-with-capability-mode",
        "jwt-without-secret",
        "token-flag-with-jwt-mode",
        "unreadable-shared-secret",
        "unknown-mode",
    ],
)
def test_flag_combinations_are_checked_before_listening(
    flags: AuthFlags, message: str | None
) -> None:
    if message is None:
        assert from_flags(flags, stdio=False) is None
        return
    with pytest.raises(ConfigError) as refused:
        from_flags(flags, stdio=False)
    assert message in refused.value.message


def test_an_empty_token_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="must not be empty"):
        CapabilityToken.from_file(str(empty))


def test_auth_needs_a_websocket_listener(token_file: Path) -> None:
    with pytest.raises(ConfigError, match="requires a WebSocket listener, not stdio"):
        from_flags(AuthFlags(mode="capability-token", token_file=str(token_file)), stdio=True)


# --- routing ------------------------------------------------------------------------------


def _route(headers: list[str], path: str = "/") -> Response | Upgrade:
    head = "\r\n".join([f"GET {path} HTTP/1.1", "Host: x", *headers]).encode()
    return route(parse_head(head), CapabilityToken.from_sha256(GOOD))


def _upgrade(*extra: str) -> list[str]:
    return [f"{name}: {value}" for name, value in upgrade_headers().items()] + list(extra)


def test_only_the_first_authorization_header_counts() -> None:
    first_right = _route(_upgrade(f"Authorization: Bearer {TOKEN}", "Authorization: Bearer x"))
    first_wrong = _route(_upgrade("Authorization: Bearer x", f"Authorization: Bearer {TOKEN}"))
    assert isinstance(first_right, Upgrade)
    assert isinstance(first_wrong, Response)
    assert (first_wrong.status, first_wrong.body) == (401, INVALID_TOKEN.encode())


def test_a_request_that_is_no_upgrade_gets_its_400_before_any_401() -> None:
    answer = _route(["Connection: keep-alive"])
    assert isinstance(answer, Response)
    assert answer.status == 400


def test_origin_and_readyz_are_decided_before_auth() -> None:
    origin = _route(_upgrade("Origin: http://evil.example", f"Authorization: Bearer {TOKEN}"))
    readyz = _route([], path="/readyz")
    assert isinstance(origin, Response)
    assert isinstance(readyz, Response)
    assert (origin.status, readyz.status) == (403, 200)


# --- a real daemon ------------------------------------------------------------------------


@pytest.fixture
def daemon(token_file: Path) -> Iterator[RunningDaemon]:
    running = RunningDaemon(["--ws-auth", "capability-token", "--ws-token-file", str(token_file)])
    try:
        yield running
    finally:
        running.stop()


def test_the_right_token_opens_a_working_session(daemon: RunningDaemon) -> None:
    with connect_sync(daemon.url, token=TOKEN, client_name="auth-test") as client:
        result = client.run(["/bin/echo", "authenticated"])
    assert (result.exit_code, result.stdout) == (0, b"authenticated\n")


@pytest.mark.parametrize(
    ("headers", "body"),
    [({}, MISSING), ({"Authorization": "Bearer wrong"}, INVALID_TOKEN)],
    ids=["missing", "wrong"],
)
def test_a_missing_or_wrong_token_gets_401_and_a_log_line(
    daemon: RunningDaemon, headers: dict[str, str], body: str
) -> None:
    answer = http_request(daemon.url, "GET", "/", upgrade_headers(headers))
    assert answer.status == 401
    assert answer.headers["content-type"] == "text/plain; charset=utf-8"
    assert answer.body.decode() == body
    assert "refused a WebSocket upgrade from 127.0.0.1:" in daemon.log()
    # The daemon keeps serving everyone else.
    assert http_request(daemon.url, "GET", "/readyz").status == 200


def test_bad_flags_stop_the_daemon_with_a_clear_message(tmp_path: Path) -> None:
    result = subprocess.run(
        [*executor_command(), "serve", "--ws-auth", "capability-token"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "`--ws-token-file` or `--ws-token-sha256` is required" in result.stderr
