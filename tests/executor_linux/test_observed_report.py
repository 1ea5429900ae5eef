"""The enforcement report is observed, not planned: the launcher checks from inside the
command that every planned layer is in force, fails the launch when one is not, and reports
what it saw (``executor run -v``, the daemon log)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.executor_linux.conftest import executor_run, linux_sandbox_available
from tests.support.enforcement import skip_unless

pytestmark = pytest.mark.enforcement

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"

#: Runs in a plain child (no layer applied) and verifies a plan that claims every layer.
UNCONFINED = """
import json, sys
sys.path.insert(0, sys.argv[1])
from executor_linux import observe
from executor_linux.launch_spec import LandlockRules, LaunchSpec, Mounts, Namespaces
before = observe.namespace_inodes()
observer = observe.Observer()
mounts = Mounts(
    staging="/nonexistent-executor-staging",
    readonly_root=True,
    private_dev=True,
    operations=(("ro", "/nonexistent-executor-test"), ("pin", sys.argv[2])),
)
launch = LaunchSpec(
    namespaces=Namespaces(user=False, net=True, proc=True, uid=0, gid=0, mounts=mounts),
    landlock=LandlockRules(fs=1, net=0, scoped=0),
    seccomp=b"x",
)
problems, _ = observer.verify(launch, before, landlock=False)
print(json.dumps(problems))
"""


def test_every_missing_layer_is_named(tmp_path: Path) -> None:
    """Against a process with no layer at all, each planned layer is reported missing."""
    result = subprocess.run(
        [sys.executable, "-I", "-c", UNCONFINED, str(PLUGINS), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    problems = json.loads(result.stdout)
    text = "; ".join(problems)
    for name in ("mnt", "pid", "ipc", "net"):
        assert f"the {name} namespace is the host's" in text
    for expected in (
        "/ is writable",
        "/dev is",
        "/nonexistent-executor-test is not mounted",
        f"{tmp_path} is not mounted",
        "no_new_privs is not set",
        "Landlock was not applied",
        "the seccomp filter is not loaded",
    ):
        assert expected in text, expected
    if os.getuid() == 0:
        assert "capabilities left in" in text


def test_run_verbose_shows_what_the_command_observed(tmp_path: Path) -> None:
    """`executor run -v`: namespaces by inode (not the host's), mounts, every layer."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    result = executor_run("workspace", tmp_path, ["true"], "-v", "--no-tty")
    assert result.returncode == 0, result.stderr
    line = next(text for text in result.stderr.splitlines() if "observed in the command" in text)
    host = {n: os.stat(f"/proc/self/ns/{n}").st_ino for n in ("mnt", "pid", "ipc", "net")}
    seen = dict(re.findall(r"(mnt|pid|ipc|net):(\d+)", line))
    assert set(seen) == set(host)
    for name, inode in seen.items():
        assert int(inode) != host[name], name
    for part in (
        "read-only /",
        "private /dev",
        "fresh /proc",
        "no_new_privs",
        "landlock(restricted",
        "capabilities(none)",
        "seccomp(filter mode",
    ):
        assert part in line, part
