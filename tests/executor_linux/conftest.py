"""Fixtures for the Linux backend: a scene of targets the escape probes aim at, and drivers.

The scene lives outside /tmp (the ``workspace`` profile may write /tmp): a workspace with a
git directory, a directory "outside" it, a secret in the executor's (test-private) state
directory, TCP/UDP/Unix listeners and a victim process. The daemon and ``executor run`` are
started inside a private UTS and mount namespace, so that a probe that changes the hostname
or mounts something could only ever change that namespace.

Every test here runs twice, once per launcher that applies the layers (``sandbox_launch``):
the native one (``executor/spawn/sandbox.c``) and the Python one (``launcher.py``, the
fallback). Both must pass the same contract.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from executor.client import connect_sync
from tests.support.client import WsClient
from tests.support.daemon import executor_command
from tests.support.enforcement import skip_unless

PROBE = Path(__file__).with_name("escape_probe.py")
PRIVATE_NS = ["unshare", "--uts", "--mount", "--propagation", "private", "--"]
#: The unprivileged driver's user: ``nobody`` on Debian-like systems.
UNPRIVILEGED_UID = 65534


def as_user(uid: int) -> list[str]:
    """A ``setpriv`` prefix that runs a command as ``uid``, with no groups.

    It keeps one ambient capability, CAP_DAC_READ_SEARCH, only so that the test interpreter
    is reachable when it lives under a private home (pyenv in ``/root`` on CI). It does not
    reach the sandboxed command: the backend drops every capability, and the user namespace
    the unprivileged path creates voids those of the parent namespace anyway (the probe's
    ``read_denied`` would see it otherwise).
    """
    return [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
        "--",
    ]


#: The launchers that apply the sandbox layers, as ``EXECUTOR_SANDBOX_LAUNCH`` names them.
LAUNCH_PATHS = ("native", "python")
LAUNCH_ENV = "EXECUTOR_SANDBOX_LAUNCH"


def native_sandbox_launcher() -> bool:
    """The native launcher is built here and applies sandbox specs."""
    from executor.spawn.spawner import Spawner, native_launcher

    if native_launcher() is None:
        return False
    previous = os.environ.pop(LAUNCH_ENV, None)
    try:
        spawner = Spawner()
        try:
            return spawner.sandbox_supervisor == "native"
        finally:
            spawner.close()
    finally:
        if previous is not None:
            os.environ[LAUNCH_ENV] = previous


@pytest.fixture(scope="package", autouse=True, params=LAUNCH_PATHS)
def sandbox_launch(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the package's tests with the layers applied by this launcher: the daemons,
    ``executor run`` and in-process spawners all read ``EXECUTOR_SANDBOX_LAUNCH``.

    Package-scoped, so pytest runs every module once per launcher. A fixture that outlives
    a test must ask for this one (``test_fixtures_per_launcher.py`` checks): a module run on
    its own (or by ``--dist loadfile``) switches launchers inside the module, and a module
    fixture that does not name it would be kept across the switch."""
    path: str = request.param
    if path == "native":
        skip_unless(native_sandbox_launcher(), "the native launcher is not built")
    previous = os.environ.get(LAUNCH_ENV)
    os.environ[LAUNCH_ENV] = path
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(LAUNCH_ENV, None)
        else:
            os.environ[LAUNCH_ENV] = previous


def linux_sandbox_available() -> bool:
    """Landlock and namespaces both work here (root, or unprivileged user namespaces)."""
    if not sys.platform.startswith("linux"):
        return False
    from executor_linux.probe import host_support

    support = host_support()
    return bool(support.landlock_abi and support.namespaces and support.seccomp)


def launcher_of(pid1_exe: str) -> str:
    """The launcher a sandbox's PID 1 is (``readlink /proc/1/exe`` inside it): the one that
    applied the layers stays the init of the command's PID namespace."""
    name = os.path.basename(pid1_exe.strip())
    if name == "executor-launcher":
        return "native"
    return "python" if name.startswith("python") else f"neither ({name})"


@pytest.fixture(scope="module")
def require_linux_sandbox(sandbox_launch: str) -> None:
    """Enforcement tests run for real; on CI a missing layer fails instead of skipping.
    (Like every fixture that outlives a test here, one per launcher.)"""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    skip_unless(shutil.which("unshare") is not None, "util-linux unshare is needed")


@dataclass
class Scene:
    """Everything the probes target, all created by the test."""

    root: Path
    workspace: Path
    outside: Path
    state_dir: Path
    secret: Path
    listeners: dict[str, Any] = field(default_factory=dict)
    victim: subprocess.Popen[bytes] | None = None
    peer: subprocess.Popen[bytes] | None = None
    shm_name: str = ""
    #: Who owns the scene and runs the daemon: this process's user, or the unprivileged one.
    owner: int = field(default_factory=os.getuid)
    #: The escape probe the sandboxed command runs: a copy every user can read (``staged``).
    probe: Path = PROBE

    def config(self, *, workspace_writable: bool) -> dict[str, Any]:
        """The probe configuration."""
        assert self.victim is not None
        return {
            "workspace": str(self.workspace),
            "outside": str(self.outside),
            "workspace_writable": workspace_writable,
            "denied_file": str(self.secret),
            "tcp_port": self.listeners["tcp"].getsockname()[1],
            "udp_port": self.listeners["udp"].getsockname()[1],
            "unix_path": self.listeners["unix_path"].getsockname(),
            "unix_abstract": "@" + self.listeners["unix_abstract"].getsockname()[1:].decode(),
            "victim_pid": self.victim.pid,
            "peer_pid": self.peer.pid if self.peer is not None else 0,
            "shm_name": self.shm_name,
            "private_uts": True,
            "private_mounts": True,
        }

    def env(self) -> dict[str, str]:
        """Environment of the daemon or ``executor run``: a test-private state directory."""
        return {**os.environ, "EXECUTOR_STATE_DIR": str(self.state_dir)}

    def pending_connections(self) -> list[str]:
        """Listeners that received anything from the sandbox (must stay empty)."""
        hits = []
        for name in ("tcp", "unix_path", "unix_abstract"):
            sock = self.listeners[name]
            sock.setblocking(False)
            try:
                conn, _ = sock.accept()
                conn.close()
                hits.append(name)
            except BlockingIOError:
                pass
        udp = self.listeners["udp"]
        udp.setblocking(False)
        try:
            udp.recv(64)
            hits.append("udp")
        except BlockingIOError:
            pass
        return hits


def _listeners(root: Path) -> dict[str, Any]:
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix_path = socket.socket(socket.AF_UNIX)
    unix_path.bind(str(root / "host.sock"))
    unix_path.listen()
    unix_abstract = socket.socket(socket.AF_UNIX)
    unix_abstract.bind("\0executor-test-" + secrets.token_hex(6))
    unix_abstract.listen()
    return {"tcp": tcp, "udp": udp, "unix_path": unix_path, "unix_abstract": unix_abstract}


def staged(source: Path) -> Path:
    """A copy of ``source`` that every user can read, alone in a fresh directory.

    The checkout may live in a private (0700) directory, which the sandboxed commands of an
    unprivileged daemon cannot traverse: they keep no capability. The copy lies outside
    /tmp (which the ``workspace`` profile may write) and belongs to this process's user, so
    no sandboxed command can change it. Remove it with ``shutil.rmtree(copy.parent)``.
    """
    directory = Path(tempfile.mkdtemp(prefix="executor-staged-", dir="/var/tmp")).resolve()
    directory.chmod(0o755)
    copy = directory / source.name
    shutil.copyfile(source, copy)
    copy.chmod(0o644)
    return copy


def build_scene(owner: int | None = None) -> Scene:
    """Create the targets (outside /tmp, which the workspace profile may write).

    With ``owner``, every file, the listeners' socket file and the two host processes belong
    to that user, as they would for a daemon run by that user.
    """
    root = Path(tempfile.mkdtemp(prefix="executor-escapes-", dir="/var/tmp")).resolve()
    workspace, outside, state = root / "workspace", root / "outside", root / "state"
    for directory in (workspace / "sub", workspace / ".git" / "hooks", outside, state):
        directory.mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    (workspace / "seed.txt").write_text("seed\n")
    (workspace / "movable.txt").write_text("movable\n")
    (workspace / "link-out").symlink_to(outside)
    (outside / "seed.txt").write_text("outside seed\n")
    (outside / "meta.txt").write_text("metadata target\n")
    os.chmod(outside / "meta.txt", 0o644)
    secret = state / "secret.txt"
    secret.write_text("executor state\n")
    # Two host processes: one the probes try to signal, one whose environ/root they try to read.
    user = owner if owner is not None and owner != os.getuid() else None
    victim = subprocess.Popen(["sleep", "600"], user=user)
    peer = subprocess.Popen(["sleep", "600"], env={"SECRET_MARKER": "peer-secret"}, user=user)
    scene = Scene(root, workspace, outside, state, secret, _listeners(root), victim, peer)
    scene.shm_name = "executor-test-" + secrets.token_hex(6)
    scene.probe = staged(PROBE)
    if user is not None:
        scene.owner = user
        os.chown(root, user, user)
        for path in root.rglob("*"):
            os.chown(path, user, user, follow_symlinks=False)
        os.chmod(state, 0o700)
    return scene


def destroy_scene(scene: Scene) -> None:
    """Stop the victim, close listeners, remove every file."""
    for process in (scene.victim, scene.peer):
        if process is not None:
            process.kill()
            process.wait()
    for sock in scene.listeners.values():
        sock.close()
    shutil.rmtree(scene.root, ignore_errors=True)
    if scene.probe != PROBE:
        shutil.rmtree(scene.probe.parent, ignore_errors=True)
    Path("/dev/shm", scene.shm_name).unlink(missing_ok=True)


@pytest.fixture
def scene(require_linux_sandbox: None) -> Iterator[Scene]:
    """A fresh scene per test (probes change the workspace)."""
    built = build_scene()
    yield built
    destroy_scene(built)


def executor_run(
    profile: str,
    workspace: Path | None,
    argv: list[str],
    *extra: str,
    prefix: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``executor run --profile PROFILE [--workspace WORKSPACE] EXTRA -- ARGV``, captured."""
    roots = ["--workspace", str(workspace)] if workspace is not None else []
    return subprocess.run(
        [*prefix, *executor_command(), "run", "--profile", profile, *roots, *extra, "--", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=False,
    )


def run_cli(
    scene: Scene, profile: str, argv: list[str], *extra: str
) -> subprocess.CompletedProcess[str]:
    """``executor run`` inside a private UTS+mount namespace."""
    return executor_run(
        profile,
        scene.workspace,
        argv,
        *extra,
        prefix=tuple(PRIVATE_NS),
        env=scene.env(),
        cwd=scene.workspace,
    )


def probe_cli(scene: Scene, profile: str) -> dict[str, dict[str, str]]:
    """Run the escape probe through ``executor run``."""
    cfg = scene.config(workspace_writable=profile != "read-only")
    result = run_cli(scene, profile, ["python3", str(scene.probe), json.dumps(cfg)])
    assert result.stdout, f"probe printed nothing: {result.stderr}"
    report: dict[str, dict[str, str]] = json.loads(result.stdout)
    return report


class WrappedDaemon:
    """A daemon started inside a private UTS+mount namespace (as ``user``, if given)."""

    def __init__(self, env: dict[str, str], user: int | None = None) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        prefix = [*PRIVATE_NS, *(as_user(user) if user is not None else [])]
        self.process = subprocess.Popen(
            [*prefix, *executor_command(), "serve", "--listen", "ws://127.0.0.1:0"],
            stdout=subprocess.PIPE,
            stderr=self.log,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().decode().strip()
        assert self.url.startswith("ws://"), self.url

    def session(self) -> WsClient:
        """A connection that completed the handshake."""
        client = WsClient(self.url)
        client.initialize("escape-tests")
        return client

    def stop(self) -> None:
        """SIGTERM and wait."""
        self.process.terminate()
        self.process.wait(timeout=20)
        assert self.process.stdout is not None
        self.process.stdout.close()
        self.log.close()


def sandbox_context(scene: Scene, profile: str) -> dict[str, Any]:
    """The wire ``sandbox`` object of a shipped profile for the scene's workspace."""
    from executor.sandbox.profiles import default_library

    ws = str(scene.workspace)
    return default_library().get(profile).wire_context(workspace_roots=(ws,), cwd=ws)


def probe_daemon(scene: Scene, profile: str, daemon: WrappedDaemon) -> dict[str, dict[str, str]]:
    """Run the escape probe through the daemon, driven by the shipped client."""
    cfg = scene.config(workspace_writable=profile != "read-only")
    with connect_sync(daemon.url, client_name="escape-tests") as client:
        process = client.start(
            ["python3", str(scene.probe), json.dumps(cfg)],
            cwd=str(scene.workspace),
            env={"PATH": "/usr/bin:/bin", "HOME": "/root"},
            sandbox=sandbox_context(scene, profile),
        )
        result = process.collect(timeout=60)
    assert process.sandbox_type == "linuxSeccomp"
    assert result.stdout, f"probe printed nothing: {result.stderr!r}"
    report: dict[str, dict[str, str]] = json.loads(result.stdout)
    return report
