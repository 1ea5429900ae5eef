"""Symlink-swap races under a sandbox: no write ever lands outside the writable root."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from executor.fs.syscalls import DISABLE_OPENAT2_ENV, openat2_supported
from tests.fs.helpers import b64, uri, workspace_sandbox
from tests.fs.race import Swapper
from tests.support.daemon import RunningDaemon

ROUNDS = 150


@pytest.fixture
def arena(tmp_path: Path) -> tuple[Path, Path]:
    """A writable workspace and an outside directory holding the victim file."""
    root = tmp_path.resolve()
    workspace, outside = root / "ws", root / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "victim").write_bytes(b"original")
    (workspace / "src.txt").write_bytes(b"pwned")
    return workspace, outside


def _attempts(
    workspace: Path, context: dict[str, Any], round_: int
) -> list[tuple[str, dict[str, Any]]]:
    box = {"sandbox": context}
    write = {"dataBase64": b64("pwned"), **box}
    copy = {"sourcePath": uri(workspace / "src.txt"), "recursive": False, **box}
    handle = f"h{round_}"
    return [
        ("fs/writeFile", {"path": uri(workspace / "sw" / "victim"), **write}),
        ("fs/writeFile", {"path": uri(workspace / "fsw"), **write}),
        ("fs/writeFile", {"path": uri(workspace / "sw" / f"new-{round_}"), **write}),
        ("fs/createDirectory", {"path": uri(workspace / "sw" / f"dir-{round_}" / "x"), **box}),
        ("fs/copy", {"destinationPath": uri(workspace / "sw" / "victim"), **copy}),
        ("fs/copy", {"destinationPath": uri(workspace / "fsw"), **copy}),
        ("fs/open", {"handleId": handle, "path": uri(workspace / "fsw"), "mode": "replace", **box}),
        ("fs/writeBlock", {"handleId": handle, "offset": 0, "chunk": b64("pwned")}),
        ("fs/close", {"handleId": handle}),
        ("fs/remove", {"path": uri(workspace / "sw" / "victim"), **box}),
    ]


@pytest.mark.parametrize(
    "openat2",
    [
        # On CI the openat2 variant must run: a skip fails there (the `enforcement` mark).
        pytest.param(True, marks=pytest.mark.enforcement, id="openat2"),
        pytest.param(False, id="component-walk"),
    ],
)
def test_symlink_swap_never_writes_outside(
    daemon_factory: type[RunningDaemon], arena: tuple[Path, Path], openat2: bool
) -> None:
    """Writes, creations, copies, streamed writes and removals race a swapping attacker."""
    if openat2 and not openat2_supported():
        pytest.skip("openat2 is not available on this host")
    workspace, outside = arena
    daemon = daemon_factory(env={DISABLE_OPENAT2_ENV: "0" if openat2 else "1"})
    context = workspace_sandbox(workspace)
    codes: dict[int, int] = {}
    with daemon.session() as client, Swapper(workspace, outside) as swapper:
        for round_ in range(ROUNDS):
            for method, params in _attempts(workspace, context, round_):
                response = client.call(method, params)
                code = response.get("error", {}).get("code", 0)
                codes[code] = codes.get(code, 0) + 1
                assert "internal error" not in response.get("error", {}).get("message", "")
    assert swapper.flips > ROUNDS
    assert (outside / "victim").read_bytes() == b"original"
    assert sorted(os.listdir(outside)) == ["victim"]
    assert codes.get(0, 0) > 0, codes  # some attempts landed inside, as they may
