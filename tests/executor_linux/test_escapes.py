"""The escape catalog: every escape is denied AND its allowed counterpart works.

Run for the shipped ``read-only`` and ``workspace`` profiles, through ``executor run`` and
through the daemon over the wire, under real Landlock, seccomp and namespaces. Each case also
checks the host: no file appeared outside, no listener was reached, the victim lives.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.executor_linux.conftest import (
    UNPRIVILEGED_UID,
    Scene,
    WrappedDaemon,
    build_scene,
    destroy_scene,
    linux_sandbox_available,
    probe_cli,
    probe_daemon,
)
from tests.support.enforcement import skip_unless
from tests.support.processes import eventually

pytestmark = pytest.mark.enforcement

PROFILES = ["read-only", "workspace"]
DRIVERS = ["executor-run", "daemon"]

# probe name -> what must hold on the host afterwards (beyond "escape failed, allowed worked")
HOST_CHECKS: dict[str, Callable[[Scene], bool]] = {
    "write_outside": lambda s: not (s.outside / "new.txt").exists(),
    "overwrite_outside": lambda s: (s.outside / "seed.txt").read_text() == "outside seed\n",
    "dotdot": lambda s: not (s.outside / "dotdot.txt").exists(),
    "symlink_out": lambda s: not (s.outside / "via-link.txt").exists(),
    "create_symlink": lambda s: not (s.outside / "f.txt").exists(),
    "hardlink_in": lambda s: not (s.workspace / "hardlink.txt").exists(),
    "rename_out": lambda s: not (s.outside / "moved-out.txt").exists(),
    "rename_in": lambda s: (
        (s.outside / "seed.txt").exists() and not (s.workspace / "moved-in.txt").exists()
    ),
    "proc_self_root": lambda s: not (s.outside / "proc-self.txt").exists(),
    "proc_1_root": lambda s: not (s.outside / "proc-1.txt").exists(),
    "proc_pid_root": lambda s: not (s.outside / "proc-pid.txt").exists(),
    "chmod": lambda s: (s.outside / "meta.txt").stat().st_mode & 0o777 == 0o644,
    "chown": lambda s: (s.outside / "meta.txt").stat().st_uid == s.owner,
    "utime": lambda s: (s.outside / "meta.txt").stat().st_mtime > 0,
    "setxattr": lambda s: "user.escaped" not in os.listxattr(s.outside / "meta.txt"),
    "git_write": lambda s: (s.workspace / ".git" / "config").read_text() == "[core]\n",
    "git_hooks": lambda s: not (s.workspace / ".git" / "hooks" / "pre-commit").exists(),
    "mkdir_codex": lambda s: not (s.workspace / ".codex").exists(),
    "rename_git": lambda s: (
        (s.workspace / ".git").is_dir() and not (s.workspace / ".git-moved").exists()
    ),
    "signal_host": lambda s: s.victim is not None and s.victim.poll() is None,
    "dev_shm": lambda s: not Path("/dev/shm", s.shm_name).exists(),
}
#: Probes whose escape has one exact answer, by driver ("*": every driver). The clone-flags
#: rule answers EPERM (`unshare` has a rule of its own, so only a direct clone reaches it).
#: A write to /dev/shm lands in the sandbox's private tmpfs where there is a mount namespace
#: ("ok", and the host check shows nothing reached the host's), and is refused without one.
EXACT_ESCAPE: dict[str, dict[str, str]] = {
    "clone_newuser": {"*": "EPERM"},
    "dev_shm": {"*": "ok", "daemon-no-namespaces": "EACCES"},
}
PROBES = [
    "write_outside",
    "overwrite_outside",
    "read_denied",
    "dotdot",
    "symlink_out",
    "create_symlink",
    "hardlink_in",
    "rename_out",
    "rename_in",
    "proc_self_root",
    "proc_1_root",
    "proc_pid_root",
    "chmod",
    "chown",
    "utime",
    "setxattr",
    "sethostname",
    "mount",
    "git_write",
    "git_hooks",
    "mkdir_codex",
    "rename_git",
    "tcp_connect",
    "tcp_listen",
    "udp_send",
    "unix_pathname",
    "unix_abstract",
    "signal_host",
    "proc_environ",
    "ptrace",
    "io_uring",
    "nested_userns",
    "clone_newuser",
    "dev_shm",
]


#: Without namespaces (EXECUTOR_LINUX_NAMESPACES=off: Landlock, seccomp and dropped
#: capabilities alone) only read-only can be enforced; the executor's state directory is
#: then not hidden (it holds no secrets), so the probe that reads it is not expected to fail.
NO_NAMESPACES = ("read-only", "daemon-no-namespaces")
NOT_ENFORCED_WITHOUT_NAMESPACES = {"read_denied"}
#: Without a mount namespace seccomp refuses metadata changes everywhere (docs/sandbox.md),
#: so their counterpart on the command's own file is refused too, by that rule: EPERM.
METADATA_LOCKED_WITHOUT_NAMESPACES = {"chmod", "chown", "utime", "setxattr"}
#: The daemon run by an ordinary user: the backend takes its user-namespace path.
UNPRIVILEGED = [(profile, "daemon-unprivileged") for profile in PROFILES]


@pytest.fixture(
    scope="module",
    params=[*[(p, d) for p in PROFILES for d in DRIVERS], NO_NAMESPACES, *UNPRIVILEGED],
    ids=lambda v: f"{v[0]}-{v[1]}",
)
def outcome(
    request: pytest.FixtureRequest, sandbox_launch: str
) -> Iterator[tuple[Scene, dict[str, dict[str, str]], list[str], str]]:
    """One probe run per profile and driver; yields the scene, report, listener hits, driver."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    profile, driver = request.param
    unprivileged = driver == "daemon-unprivileged"
    if unprivileged:
        skip_unless(shutil.which("setpriv") is not None, "util-linux setpriv is needed")
        skip_unless(os.getuid() == 0, "switching to an unprivileged user needs root")
    scene = build_scene(owner=UNPRIVILEGED_UID if unprivileged else None)
    daemon = None
    if driver.startswith("daemon"):
        env = scene.env()
        if driver == "daemon-no-namespaces":
            env["EXECUTOR_LINUX_NAMESPACES"] = "off"
        daemon = WrappedDaemon(env, user=UNPRIVILEGED_UID if unprivileged else None)
    try:
        report = (
            probe_daemon(scene, profile, daemon)
            if daemon is not None
            else probe_cli(scene, profile)
        )
        yield scene, report, scene.pending_connections(), driver
    finally:
        if daemon is not None:
            daemon.stop()
        destroy_scene(scene)


@pytest.mark.parametrize("probe", PROBES)
def test_escape_is_denied_and_counterpart_works(
    outcome: tuple[Scene, dict[str, dict[str, str]], list[str], str], probe: str
) -> None:
    """The escape fails inside, the legitimate neighbour succeeds, the host is intact."""
    scene, report, _hits, driver = outcome
    result = report[probe]
    if driver == "daemon-no-namespaces" and probe in NOT_ENFORCED_WITHOUT_NAMESPACES:
        # Documented limitation: the state directory is only hidden with a mount namespace.
        assert result == {"escape": "ok", "allowed": "ok"}
        return
    exact = EXACT_ESCAPE.get(probe, {})
    expected = exact.get(driver, exact.get("*"))
    if expected is not None:
        assert result["escape"] == expected, f"{probe}: expected {expected}, got {result}"
    else:
        assert result["escape"] != "ok", f"{probe}: the escape succeeded"
    allowed = "ok"
    if driver == "daemon-no-namespaces" and probe in METADATA_LOCKED_WITHOUT_NAMESPACES:
        allowed = "EPERM"
    assert result["allowed"] == allowed, (
        f"{probe}: the allowed counterpart gave {result['allowed']}, not {allowed}"
    )
    check = HOST_CHECKS.get(probe)
    if check is not None:
        # Polled: a placeholder the daemon made for the command lingers a moment after it.
        assert eventually(lambda: check(scene)), f"{probe}: the host was changed"


def test_nothing_reached_the_host_listeners(
    outcome: tuple[Scene, dict[str, dict[str, str]], list[str], str],
) -> None:
    """No TCP, UDP, pathname or abstract Unix listener of the host heard from the sandbox."""
    _scene, _report, hits, _driver = outcome
    assert hits == []


def test_hostname_is_unchanged(
    outcome: tuple[Scene, dict[str, dict[str, str]], list[str], str],
) -> None:
    """sethostname failed, so the (private) hostname seen inside is not the attacker's."""
    _scene, report, _hits, _driver = outcome
    assert report["hostname_after"]["escape"] != "escaped"


def test_the_command_runs_as_the_daemons_user(
    outcome: tuple[Scene, dict[str, dict[str, str]], list[str], str],
) -> None:
    """Root's daemon runs commands as root (no user namespace); an ordinary user's daemon
    runs them as that user, through the user-namespace path, enforced all the same."""
    _scene, report, _hits, driver = outcome
    expected = UNPRIVILEGED_UID if driver == "daemon-unprivileged" else os.getuid()
    assert report["uid"]["escape"] == str(expected)
