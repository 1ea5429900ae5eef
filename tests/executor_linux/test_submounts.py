"""Mounts the host has inside the sandbox's trees keep the sandbox's meaning.

* a mount the host keeps read-only inside a writable root stays read-only (binding the root
  read-write must not make it writable);
* a writable mount inside a read-only carve-out (``.git``) is read-only too (the carve-out
  is read-only recursively).

The host side runs in a private mount namespace of the test's own (``unshare --mount``), so
the mounts it makes vanish with it and nothing changes on the machine.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.executor_linux.conftest import linux_sandbox_available
from tests.support.daemon import executor_command
from tests.support.enforcement import skip_unless

pytestmark = pytest.mark.enforcement


def test_host_submounts_keep_their_meaning_inside(tmp_path: Path) -> None:
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    skip_unless(os.getuid() == 0, "making the host-side mounts needs root")
    ws = tmp_path.resolve() / "ws"
    for directory in (ws / "rosub", ws / ".git" / "extra"):
        directory.mkdir(parents=True)
    inside = (
        "echo x > rosub/f; echo ro=$?; echo x > .git/extra/f; echo gitsub=$?; "
        "echo x > plain.txt; echo plain=$?"
    )
    run = " ".join(
        shlex.quote(part)
        for part in [
            *executor_command(),
            *("run", "--profile", "workspace", "--workspace", str(ws), "--no-tty", "--"),
            *("/bin/sh", "-c", inside),
        ]
    )
    host = (
        f"mount --bind {ws}/rosub {ws}/rosub && mount -o remount,bind,ro {ws}/rosub && "
        f"mount -t tmpfs -o size=1m tmpfs {ws}/.git/extra && cd {ws} && {run}"
    )
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", host],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    out = result.stdout
    assert "ro=0" not in out and "ro=" in out, out + result.stderr
    assert "gitsub=0" not in out and "gitsub=" in out, out + result.stderr
    assert "plain=0" in out
    assert (ws / "plain.txt").exists() and not (ws / "rosub" / "f").exists()
