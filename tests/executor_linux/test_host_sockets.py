"""Which host Unix sockets a networked sandbox gets masked, and when proxy mode is refused.

``host_sockets`` reads ``/proc/net/unix`` (here: tables the test writes, and sockets it
binds in its own temporary directory); the backend refuses proxy mode before anything runs
where it cannot join a session's network namespace.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from executor_linux import backend as linux_backend
from executor_linux import host_sockets, seccomp_policy
from executor_linux.launch_spec import Mounts
from executor_linux.probe import host_support

from executor.errors import SandboxUnavailable
from executor.protocol.intent import Access, NetworkMode
from executor.sandbox import NetworkRoute
from executor.sandbox.api import Command
from executor.sandbox.rules import PathRule, RuleSet
from tests.executor_linux.conftest import UNPRIVILEGED_UID, as_user, linux_sandbox_available
from tests.support.daemon import executor_command
from tests.support.enforcement import skip_unless

HEADER = "Num       RefCount Protocol Flags    Type St Inode Path\n"


def record(path: str | None, flags: str = "00010000", kind: str = "0001", state: str = "01") -> str:
    tail = "" if path is None else f" {path}"
    return f"0000000000000000: 00000002 00000000 {flags} {kind} {state} 123456{tail}\n"


def test_bound_paths_are_pathnames_only_each_once() -> None:
    table = (
        HEADER
        + record("/run/a.sock")
        + record(None)
        + record("@/tmp/.X11-unix/X0")
        + record("/run/dgram", flags="00000000", kind="0002", state="01")
        + record("/run/a.sock", flags="00000000", state="03")  # an accepted connection
        + record("relative.sock")
        + record("/tmp/with space")
    )
    assert host_sockets.bound_paths(table) == [
        "/run/a.sock",
        "/run/dgram",
        "relative.sock",
        "/tmp/with space",
    ]


def test_a_newline_in_a_name_continues_it() -> None:
    table = HEADER + record("/tmp/odd\nname") + record("/run/b.sock") + record("@x\ny")
    assert host_sockets.bound_paths(table) == ["/tmp/odd\nname", "/run/b.sock"]


def test_the_live_table_names_a_bound_socket(tmp_path: Path) -> None:
    """The kernel's own table, whatever else it holds, names the test's listener exactly."""
    path = str(tmp_path / "live.sock")
    with socket.socket(socket.AF_UNIX) as sock, socket.socket(socket.AF_UNIX) as abstract:
        sock.bind(path)
        sock.listen()
        abstract.bind("\0executor-test-live-" + tmp_path.name)
        table = host_sockets._read_table()
        found = host_sockets.sockets_to_mask(lambda _: True)
    assert path in host_sockets.bound_paths(table)
    assert path in found
    assert not any(name.startswith("@") for name in host_sockets.bound_paths(table))


@pytest.fixture
def sockets(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Real bound sockets in the test's directory, and a table naming them (and decoys)."""
    (tmp_path / "real").mkdir()
    (tmp_path / "hidden").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "plain").write_text("not a socket\n")
    opened = []
    for name in ("real/a.sock", "hidden/b.sock", "real/c.sock"):
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(tmp_path / name))
        opened.append(sock)
    names = {
        "a": str(tmp_path / "real/a.sock"),
        "a_by_link": str(tmp_path / "link/a.sock"),
        "b": str(tmp_path / "hidden/b.sock"),
        "c": str(tmp_path / "real/c.sock"),
        "plain": str(tmp_path / "plain"),
        "gone": str(tmp_path / "real/gone.sock"),
        "hidden_dir": str(tmp_path / "hidden"),
    }
    yield names
    for sock in opened:
        sock.close()


def table_of(*paths: str) -> str:
    return HEADER + "".join(record(path) for path in paths)


def test_masks_are_real_paths_of_sockets_not_hidden_already(sockets: dict[str, str]) -> None:
    mounts = Mounts(staging="/nonexistent", operations=(("mask_dir", sockets["hidden_dir"]),))
    table = table_of(
        sockets["a_by_link"], sockets["a"], sockets["b"], sockets["plain"], sockets["gone"], "x.s"
    )
    found = host_sockets.sockets_to_mask(host_sockets.unhidden_by(mounts), read=lambda: table)
    assert found == (sockets["a"],)


def test_a_private_dev_hides_host_devices_but_not_a_shared_shm() -> None:
    unhidden = host_sockets.unhidden_by(Mounts(staging="/s", private_dev=True, private_shm=False))
    assert not unhidden("/dev/log")
    assert unhidden("/dev/shm/app.sock")
    assert unhidden("/run/app.sock")
    private = host_sockets.unhidden_by(Mounts(staging="/s", private_dev=True, private_shm=True))
    assert not private("/dev/shm/app.sock")
    host_dev = host_sockets.unhidden_by(Mounts(staging="/s"))
    assert host_dev("/dev/log")


def test_more_sockets_than_the_cap_refuse(sockets: dict[str, str]) -> None:
    """Refused, not truncated: the sockets past the cap would stay reachable."""
    table = table_of(sockets["a"], sockets["c"])
    with pytest.raises(SandboxUnavailable) as refused:
        host_sockets.sockets_to_mask(lambda _: True, read=lambda: table, limit=1)
    assert "2 Unix sockets" in str(refused.value) and "nothing was started" in str(refused.value)
    assert len(host_sockets.sockets_to_mask(lambda _: True, read=lambda: table, limit=2)) == 2


def test_the_listen_variant_is_its_own_filter_built_once() -> None:
    skip_unless(seccomp_policy.available() is None, "libseccomp is needed")
    proxied = seccomp_policy.compile_filter(False, deny_listen=True)
    assert proxied != seccomp_policy.compile_filter(False)
    assert proxied is seccomp_policy.compile_filter(False, deny_listen=True)
    # The network off denies listen (and more) anyway: the flag adds nothing there.
    assert seccomp_policy.compile_filter(True, deny_listen=True) == seccomp_policy.compile_filter(
        True
    )


# --- refusals before anything runs ------------------------------------------------------------

ROUTE = NetworkRoute(ports=(8080,), netns_path="/proc/self/ns/net", netns_inode=1)
COMMAND = Command(executable="/bin/true", argv=("true",), env={}, cwd="/", tty=False)


def routed(**extra: object) -> RuleSet:
    return RuleSet(
        filesystem_restricted=True,
        rules=(PathRule("/", Access.READ),),
        network=NetworkMode.ENABLED,
        route=extra.pop("route", ROUTE),  # type: ignore[arg-type]
        **extra,  # type: ignore[arg-type]
    )


@pytest.fixture
def backend(tmp_path: Path) -> linux_backend.LinuxBackend:
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    return linux_backend.LinuxBackend(state_dir=str(tmp_path / "state"))


def refusal(backend: linux_backend.LinuxBackend, rules: RuleSet) -> str:
    with pytest.raises(SandboxUnavailable) as refused:
        backend.prepare(rules, COMMAND)
    return str(refused.value)


def test_an_unprivileged_daemon_refuses_proxy_mode(
    backend: linux_backend.LinuxBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without root the command's user namespace voids what joining needs: refused, and the
    probe does not offer the feature."""
    reason = "joining the session's network namespace needs a root daemon (test)"
    weaker = dataclasses.replace(host_support(), network_proxy_reason=reason)
    monkeypatch.setattr(linux_backend, "host_support", lambda: weaker)
    assert reason in refusal(backend, routed())


def test_legacy_landlock_and_a_route_without_a_namespace_are_refused(
    backend: linux_backend.LinuxBackend,
) -> None:
    skip_unless(not host_support().network_proxy_reason, "proxy mode needs a root daemon")
    assert "useLegacyLandlock" in refusal(backend, routed(landlock_only=True))
    bare = NetworkRoute(ports=(8080,))
    assert "names no network namespace" in refusal(backend, routed(route=bare))


def test_without_namespaces_full_mode_reports_host_sockets_reachable(
    backend: linux_backend.LinuxBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing to mask them in: said in the report, not hidden."""
    bare = dataclasses.replace(
        host_support(), namespaces=False, namespaces_reason="test", network_proxy_reason="test"
    )
    monkeypatch.setattr(linux_backend, "host_support", lambda: bare)
    plan = backend.prepare(
        RuleSet(filesystem_restricted=True, rules=(PathRule("/", Access.READ),)), COMMAND
    )
    assert plan.report.details["host_unix_sockets"].startswith("reachable by path")
    assert "proxy mode needs" in refusal(backend, routed())


def run_as_nobody(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``executor run ARGS`` as an ordinary user, in a workspace of its own under ``where``."""
    home = where / "nobody"
    home.mkdir()
    os.chown(home, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    os.chmod(where, 0o755)
    return subprocess.run(
        [*as_user(UNPRIVILEGED_UID), *executor_command(), "run", "--workspace", str(home), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=home,
        env={**os.environ, "HOME": str(home), "EXECUTOR_STATE_DIR": str(home / "state")},
    )


@pytest.fixture
def where() -> Iterator[Path]:
    """Not below pytest's private temporary directory: the user must reach its workspace."""
    skip_unless(linux_sandbox_available() and os.geteuid() == 0, "root drives this test")
    with tempfile.TemporaryDirectory(prefix="executor-sockets-", dir="/var/tmp") as path:
        yield Path(path)


@pytest.mark.enforcement
def test_a_socket_an_unprivileged_user_cannot_look_up_does_not_stop_its_launch(
    where: Path,
) -> None:
    """A host socket in a directory only root may search: an ordinary user's sandbox cannot
    mask it (nor reach it), and still starts."""
    private = where / "root-only"
    private.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(private / "service.sock"))
        listener.listen()
        argv = ["--", "/bin/sh", "-c", "echo started"]
        result = run_as_nobody(where, "--shared-loopback", "--profile", "workspace-network", *argv)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "started\n"


@pytest.mark.enforcement
def test_an_unprivileged_user_gets_no_full_network_sharing_the_loopback_unasked(
    where: Path,
) -> None:
    """Loopback isolation needs root: without it the full network is refused before anything
    runs, naming the operator's way out; proxy mode is refused too."""
    argv = ["--", "/bin/sh", "-c", "touch ran"]  # in its workspace, if it ran
    full = run_as_nobody(where, "--profile", "workspace-network", *argv)
    assert full.returncode == 125
    assert "cannot enforce loopback-isolation" in full.stderr
    assert "--shared-loopback" in full.stderr
    home = where / "nobody"
    proxied = run_as_nobody(home, "--profile", "workspace-proxy", *argv)
    assert proxied.returncode == 125
    assert "needs a private network namespace" in proxied.stderr
    assert not (home / "ran").exists()
    assert not (home / "nobody" / "ran").exists()
    shared = run_as_nobody(
        home / "nobody", "--shared-loopback", "--profile", "workspace-network", *argv
    )
    assert shared.returncode == 0, shared.stderr
    assert (home / "nobody" / "nobody" / "ran").exists()
