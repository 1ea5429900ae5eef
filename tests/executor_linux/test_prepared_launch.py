"""A sandboxed launch prepared ahead (``launcher.c``): used when it fits, never stale.

The native launcher keeps the next launch's supervisor and outer child forked, namespaces
made, for a while after a sandboxed launch. The probe (``prepared_launches.py``) runs three
launches 0.3 s apart in a private mount namespace and mounts a tmpfs before the third: the
second launch's outer child started well before its request (it was prepared), and the
third, whose prepared copy of the mount table went stale, sees the new mount.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.executor_linux.conftest import LAUNCH_ENV, PRIVATE_NS, linux_sandbox_available
from tests.support.enforcement import skip_unless

PROBE = Path(__file__).with_name("prepared_launches.py")

pytestmark = pytest.mark.enforcement


def test_a_prepared_launch_is_used_and_never_with_a_stale_mount_table(tmp_path: Path) -> None:
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    skip_unless(shutil.which("unshare") is not None, "util-linux unshare is needed")
    skip_unless(os.getuid() == 0, "mounting a tmpfs in a private namespace needs root")
    work = tmp_path / "work"
    work.mkdir()
    ran = subprocess.run(
        [*PRIVATE_NS, sys.executable, str(PROBE), str(work)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    first, second, third = json.loads(ran.stdout)
    assert first["output"] == second["output"] == "unseen\n"
    assert third["output"] == "mounted\n", third
    if os.environ.get(LAUNCH_ENV) == "native":
        ticks = os.sysconf("SC_CLK_TCK")
        assert second["ahead"] >= ticks // 10, second  # prepared >= 0.1 s before the request
        assert third["ahead"] < ticks // 10, third  # made for it: the prepared one was stale


def test_a_command_cannot_hand_its_outer_child_a_forged_exit(tmp_path: Path) -> None:
    """PID 1 made ahead gives the outer child the exit pipe as a datagram on an abstract
    socket of the launch's network namespace, which the command shares. A command that
    sends its own pipe there and writes "exit 0" into it is not believed: the outer child
    took PID 1's datagram (sent before the command started) and takes nothing from anyone
    else, so the exit reported is the command's own 7, prepared or not."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    skip_unless(shutil.which("python3") is not None, "the forging command is a python3 script")
    work = tmp_path / "work"
    work.mkdir()
    ran = subprocess.run(
        [sys.executable, str(PROBE), str(work), "--forge"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    launches = json.loads(ran.stdout)
    assert [launch["code"] for launch in launches] == [7, 7], launches
    assert all(launch["output"].split()[0] in ("sent", "refused") for launch in launches)
    if os.environ.get(LAUNCH_ENV) == "native":
        ticks = os.sysconf("SC_CLK_TCK")
        assert launches[1]["ahead"] >= ticks // 10, launches[1]  # the prepared one was used
