"""A sandbox sees a minimal ``/dev`` and a ``/proc`` without host secrets (issue 11, 2-3, 7).

Every probe aims at something the test owns (its own pseudo-terminal, opened on the host) or
only *looks* at a host device (``stat``, an ``O_PATH`` open): nothing here could change the
host if the sandbox failed. Each forbidden thing is paired with the allowed counterpart that
must keep working: the standard devices, the command's own new terminals, its own
``/dev/shm``, ``/proc/self``.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.executor_linux.conftest import executor_run, linux_sandbox_available
from tests.executor_linux.probe_text import ATTEMPT
from tests.support.enforcement import skip_unless

pytestmark = pytest.mark.enforcement

PROFILES = ["read-only", "workspace"]

#: Host devices a sandbox has no business reaching (whichever exist on this host).
HOST_ONLY_DEVICES = (
    "/dev/kvm",
    "/dev/userfaultfd",
    "/dev/vcs",
    "/dev/vcsa",
    "/dev/loop-control",
    "/dev/loop0",
    "/dev/kmsg",
    "/dev/mem",
    "/dev/tty0",
    "/dev/vda",
    "/dev/fuse",
    "/dev/vsock",
)

PROBE = (
    textwrap.dedent(
        """
    import errno, json, os, sys
    cfg = json.loads(sys.argv[1])
    """
    )
    + ATTEMPT
    + textwrap.dedent(
        """

    def read_text(path):
        with open(path, "rb") as handle:
            return handle.read()

    attempt("host_pty_open", lambda: os.close(os.open(cfg["host_pty"], os.O_RDWR | os.O_NOCTTY)))
    for device in cfg["devices"]:
        attempt("device:" + device, lambda d=device: os.stat(d))
    out["dev_listing"] = sorted(os.listdir("/dev"))
    out["pts_listing"] = sorted(os.listdir("/dev/pts"))

    def own_pty():
        master, slave = os.openpty()
        os.write(master, b"ping\\n")
        assert os.read(slave, 5) == b"ping\\n"
        out["own_pty_name"] = os.ttyname(slave)
        os.close(master)
        os.close(slave)

    attempt("own_pty", own_pty)
    attempt("null_write", lambda: open("/dev/null", "w").write("x"))
    attempt("urandom_open", lambda: os.close(os.open("/dev/urandom", os.O_RDONLY)))
    attempt("zero_read", lambda: os.read(os.open("/dev/zero", os.O_RDONLY), 4))
    shm = "/dev/shm/" + cfg["shm_name"]
    attempt("shm_write", lambda: open(shm, "w").write("x"))
    attempt("dev_create", lambda: open("/dev/planted", "w").write("x"))
    out["keys"] = len(read_text("/proc/keys"))
    out["key_users"] = len(read_text("/proc/key-users"))
    attempt("sysrq_open_w", lambda: os.close(os.open("/proc/sysrq-trigger", os.O_WRONLY)))
    attempt("sysctl_open_w", lambda: os.close(os.open("/proc/sys/kernel/hostname", os.O_WRONLY)))
    attempt("sysctl_read", lambda: read_text("/proc/sys/kernel/ostype"))
    attempt("proc_self", lambda: read_text("/proc/self/status"))
    out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    print(json.dumps(out))
    """
    )
)


@pytest.fixture(scope="module")
def sandboxed(sandbox_launch: str) -> None:
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")


@pytest.fixture
def host_pty() -> Iterator[str]:
    """A pseudo-terminal of the test's own: what another session's ``tty:true`` looks like."""
    master, slave = os.openpty()
    try:
        yield os.ttyname(slave)
    finally:
        os.close(master)
        os.close(slave)


def run_probe(profile: str, workspace: Path, host_pty: str) -> dict[str, object]:
    cfg = {
        "host_pty": host_pty,
        "devices": [d for d in HOST_ONLY_DEVICES if os.path.exists(d)],
        "shm_name": f"executor-test-{os.getpid()}",
    }
    argv = ["python3", "-I", "-c", PROBE, json.dumps(cfg)]
    result = executor_run(profile, workspace, argv, "--no-tty")
    assert result.returncode == 0, result.stderr
    report: dict[str, object] = json.loads(result.stdout)
    return report


@pytest.mark.parametrize("profile", PROFILES)
def test_host_terminals_and_devices_are_out_of_reach(
    sandboxed: None, profile: str, tmp_path: Path, host_pty: str
) -> None:
    """Another terminal of the host cannot be opened; the command's own new ones work."""
    report = run_probe(profile, tmp_path, host_pty)
    assert report["host_pty_open"] == "ENOENT"
    assert report["own_pty"] == "ok"
    # Its own terminals live in a private devpts: numbered from 0 there, and only its own.
    assert str(report["own_pty_name"]).startswith("/dev/pts/")
    assert report["pts_listing"] == ["ptmx"]
    assert os.path.exists(host_pty), "the host's terminal is untouched"


@pytest.mark.parametrize("profile", PROFILES)
def test_dev_holds_the_standard_devices_and_nothing_else(
    sandboxed: None, profile: str, tmp_path: Path, host_pty: str
) -> None:
    """kvm, userfaultfd, consoles, loop and block devices, kmsg: not there at all."""
    report = run_probe(profile, tmp_path, host_pty)
    for device in (d for d in HOST_ONLY_DEVICES if os.path.exists(d)):
        assert report[f"device:{device}"] == "ENOENT", device
    assert report["dev_listing"] == [
        "fd",
        "full",
        "null",
        "ptmx",
        "pts",
        "random",
        "shm",
        "stderr",
        "stdin",
        "stdout",
        "tty",
        "urandom",
        "zero",
    ]
    for allowed in ("null_write", "urandom_open", "zero_read", "shm_write"):
        assert report[allowed] == "ok", allowed
    assert report["dev_create"] != "ok", "nothing new can be planted in /dev"
    assert not Path("/dev/shm", f"executor-test-{os.getpid()}").exists(), "/dev/shm is private"
    assert not Path("/dev/planted").exists()


@pytest.mark.parametrize("profile", PROFILES)
def test_proc_shows_no_host_secrets_and_writes_no_kernel_setting(
    sandboxed: None, profile: str, tmp_path: Path, host_pty: str
) -> None:
    """Keyrings are empty, sysrq and sysctls cannot be opened for writing; reading works."""
    report = run_probe(profile, tmp_path, host_pty)
    assert report["keys"] == 0 and report["key_users"] == 0
    assert report["sysrq_open_w"] != "ok"
    assert report["sysctl_open_w"] != "ok"
    assert report["sysctl_read"] == "ok"
    assert report["proc_self"] == "ok"
    pids = report["pids"]
    assert isinstance(pids, list) and len(pids) <= 3, f"only the sandbox's processes: {pids}"
