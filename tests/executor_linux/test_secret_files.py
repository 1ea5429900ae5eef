"""The daemon's own secrets (its WebSocket token file) are hidden from every sandbox.

A command that could read the token could connect to the daemon as a client and run
unsandboxed commands. The probe reads only files this test wrote: the token, and a
neighbour in the same directory that must stay readable.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.client import connect_sync
from tests.executor_linux.conftest import linux_sandbox_available
from tests.sandbox.wire import context, managed, special
from tests.support.daemon import RunningDaemon
from tests.support.enforcement import skip_unless

pytestmark = pytest.mark.enforcement

TOKEN = "secret-token-for-the-hiding-test"


@pytest.fixture
def secrets(tmp_path: Path) -> Iterator[tuple[RunningDaemon, Path, Path]]:
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    token_file = secrets_dir / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o644)  # readable by anyone on the host: only the sandbox hides it
    neighbour = secrets_dir / "neighbour"
    neighbour.write_text("neighbour is readable\n")
    # A state directory that sorts before the secrets: its mask then precedes the token's,
    # which once hid the empty file the token's mask is bound from (launch failed: ENOENT).
    state = tmp_path / "a-state"
    daemon = RunningDaemon(
        [
            *("--ws-auth", "capability-token", "--ws-token-file", str(token_file)),
            *("--state-dir", str(state)),
        ]
    )
    try:
        yield daemon, token_file, neighbour
    finally:
        daemon.stop()


@pytest.mark.parametrize("network", ["restricted", "enabled"])
def test_a_sandbox_cannot_read_the_token_file(
    secrets: tuple[RunningDaemon, Path, Path], network: str
) -> None:
    """Under a profile that reads everything, the token reads as denied; its neighbour works."""
    daemon, token_file, neighbour = secrets
    script = (
        f"cat {neighbour}; "
        f"if cat {token_file} 2>/dev/null; then echo TOKEN-READ; else echo token-denied; fi"
    )
    sandbox = context(managed(special("root", "read"), network=network), cwd="/tmp")
    with connect_sync(daemon.url, token=TOKEN, client_name="secret-files") as client:
        result = client.run(["/bin/sh", "-c", script], sandbox=sandbox, cwd="/tmp")
    out = (result.stdout + result.stderr).decode()
    assert "neighbour is readable" in out
    assert "token-denied" in out
    assert TOKEN not in out and "TOKEN-READ" not in out
