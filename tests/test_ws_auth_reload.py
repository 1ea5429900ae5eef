"""Token rotation without a restart: SIGHUP re-reads the token or shared-secret file.

New upgrades need the new credentials, the old ones are refused, connections and sessions
that are already open carry on; a new file that cannot be read or is not valid is logged
and the old credentials stay. A stdio daemon (no credentials) treats SIGHUP as a hang-up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest

from executor.client import connect_sync
from executor.errors import ConfigError
from executor.transports.auth import (
    INVALID_JWT,
    INVALID_TOKEN,
    AuthFlags,
    ReloadingAuthenticator,
    from_flags,
)
from tests.support.daemon import RunningDaemon, start_stdio
from tests.support.rawws import http_request, upgrade_headers

OLD = "capability-old-7f3a"
NEW = "capability-new-91c2"
SECRET = b"a-shared-secret-of-at-least-32-bytes!"
NEW_SECRET = b"the-rotated-secret-of-at-least-32-bytes"


def bearer(token: str) -> str:
    return f"Bearer {token}"


def replace(path: Path, content: bytes) -> None:
    """Rotate the way operators do: write aside, rename over (atomic)."""
    aside = path.with_name(path.name + ".new")
    aside.write_bytes(content)
    os.replace(aside, path)


def signed(secret: bytes) -> str:
    return jwt.encode({"exp": int(time.time()) + 600}, secret, algorithm="HS256")


# --- the authenticator ----------------------------------------------------------------------


def test_a_token_file_is_read_again_on_reload(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(OLD + "\n")
    auth = from_flags(AuthFlags(mode="capability-token", token_file=str(path)), stdio=False)
    assert isinstance(auth, ReloadingAuthenticator)
    assert auth.refusal(bearer(OLD)) is None
    assert auth.reload() is False  # nothing changed
    replace(path, NEW.encode())
    assert auth.reload() is True
    assert auth.refusal(bearer(NEW)) is None
    assert auth.refusal(bearer(OLD)) == INVALID_TOKEN


@pytest.mark.parametrize("broken", ["empty", "missing"])
def test_an_unusable_new_token_file_keeps_the_old_token(tmp_path: Path, broken: str) -> None:
    path = tmp_path / "token"
    path.write_text(OLD)
    auth = from_flags(AuthFlags(mode="capability-token", token_file=str(path)), stdio=False)
    assert isinstance(auth, ReloadingAuthenticator)
    if broken == "empty":
        path.write_text("  \n")
    else:
        path.unlink()
    with pytest.raises(ConfigError, match=str(path)):
        auth.reload()
    assert auth.refusal(bearer(OLD)) is None


def test_a_shared_secret_file_is_read_again_and_a_short_one_refused(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(SECRET)
    flags = AuthFlags(mode="signed-bearer-token", shared_secret_file=str(path))
    auth = from_flags(flags, stdio=False)
    assert isinstance(auth, ReloadingAuthenticator)
    replace(path, b"too short")
    with pytest.raises(ConfigError, match="at least 32 bytes"):
        auth.reload()
    assert auth.refusal(bearer(signed(SECRET))) is None
    replace(path, NEW_SECRET)
    assert auth.reload() is True
    assert auth.refusal(bearer(signed(NEW_SECRET))) is None
    assert auth.refusal(bearer(signed(SECRET))) == INVALID_JWT


def test_a_digest_given_on_the_command_line_has_nothing_to_reload() -> None:
    digest = "0" * 64
    auth = from_flags(AuthFlags(mode="capability-token", token_sha256=digest), stdio=False)
    assert not isinstance(auth, ReloadingAuthenticator)


# --- a real daemon ------------------------------------------------------------------------


def wait_for_log(daemon: RunningDaemon, text: str, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while text not in (log := daemon.log()):
        if time.monotonic() > deadline:
            pytest.fail(f"the daemon never logged {text!r}:\n{log}")
        time.sleep(0.05)
    return log


def upgrade_status(daemon: RunningDaemon, token: str) -> int:
    answer = http_request(daemon.url, "GET", "/", upgrade_headers({"Authorization": bearer(token)}))
    return answer.status


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(OLD + "\n")
    return path


@pytest.fixture
def daemon(token_file: Path) -> Iterator[RunningDaemon]:
    running = RunningDaemon(["--ws-auth", "capability-token", "--ws-token-file", str(token_file)])
    try:
        yield running
    finally:
        running.stop()


def test_sighup_rotates_the_token_and_keeps_open_sessions(
    daemon: RunningDaemon, token_file: Path
) -> None:
    before = connect_sync(daemon.url, token=OLD, client_name="before-rotation")
    try:
        session_id = before.session_id
        assert before.run(["/bin/true"]).exit_code == 0

        replace(token_file, NEW.encode())
        daemon.process.send_signal(signal.SIGHUP)
        wait_for_log(daemon, f"SIGHUP: reloaded the websocket credentials from {token_file}")
        assert "(changed)" in daemon.log()

        assert upgrade_status(daemon, OLD) == 401
        # The connection opened with the old token still works: its session is untouched.
        assert before.run(["/bin/echo", "still here"]).stdout == b"still here\n"
    finally:
        before.close()
    # The session outlives its connection as before: resumed with the new token.
    with connect_sync(daemon.url, token=NEW, resume_session_id=session_id) as after:
        assert after.session_id == session_id
        assert after.run(["/bin/true"]).exit_code == 0
    assert daemon.process.poll() is None


def test_sighup_with_an_unusable_file_keeps_the_old_token(
    daemon: RunningDaemon, token_file: Path
) -> None:
    replace(token_file, b"\n")
    daemon.process.send_signal(signal.SIGHUP)
    log = wait_for_log(daemon, "SIGHUP: keeping the current websocket credentials")
    line = next(line for line in log.splitlines() if "keeping the current" in line)
    assert " ERROR " in line
    assert f"websocket auth secret {token_file} must not be empty" in line
    with connect_sync(daemon.url, token=OLD, client_name="old-token-still-good") as client:
        assert client.session_id
    assert upgrade_status(daemon, "nothing") == 401
    assert daemon.process.poll() is None


def test_sighup_without_credentials_is_logged_not_fatal() -> None:
    daemon = RunningDaemon()
    try:
        daemon.process.send_signal(signal.SIGHUP)
        wait_for_log(daemon, "SIGHUP: nothing to reload")
        with daemon.connect() as client:
            assert client.run(["/bin/true"]).exit_code == 0
    finally:
        status = daemon.stop()
    assert status == 0


def test_sighup_on_stdio_is_a_hang_up() -> None:
    client = start_stdio()
    try:
        client.initialize("hup")
        client.process.send_signal(signal.SIGHUP)
        assert client.wait() == 0
    finally:
        with contextlib.suppress(OSError):
            client.close_stdin()
        client.stop()
    assert "SIGHUP: the other end hung up; shutting down" in client.stderr.decode()
