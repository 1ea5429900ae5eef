"""Proxy mode on Linux: a command joins its session's network namespace (issue 16).

Real launches through the backend and the launcher server, under the real kernel. The
session namespace is the test's own (``netns.PrivateNetwork``: only ``lo`` up, as the
daemon makes one per session), and so is every listener: one inside it, one on the host's
``127.0.0.1``, a host Unix socket and an abstract one, in a temporary directory of the
test. Each refusal is paired with the allowed thing that must keep working.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from executor_linux import launch_spec
from executor_linux.backend import LinuxBackend
from executor_linux.probe import host_support

from executor.protocol.intent import Access, NetworkMode
from executor.sandbox import Feature, LaunchPlan, NetworkRoute
from executor.sandbox.api import Command, HostInfo
from executor.sandbox.rules import PathRule, RuleSet
from executor.spawn.spawner import LaunchFailed, Spawner
from tests.executor_linux.conftest import linux_sandbox_available
from tests.executor_linux.netns import PrivateNetwork
from tests.executor_linux.probe_text import ATTEMPT
from tests.support.enforcement import skip_unless

pytestmark = pytest.mark.enforcement

#: Runs the steps it is given (``[name, action, *args]``) and prints ``{name: ok|ERRNO}``.
PROBE = (
    "import errno, json, socket, sys\n"
    + ATTEMPT
    + textwrap.dedent(
        """
        cfg = json.loads(sys.argv[1])
        token = cfg["token"].encode()


        def address(text):
            return "\\0" + text[1:] if text.startswith("@") else text


        def tcp_connect(port):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(token)


        def tcp_listen():
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                sock.listen()


        def unix_connect(path):
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(5)
                sock.connect(address(path))
                sock.sendall(token)


        def own_unix(path):
            with socket.socket(socket.AF_UNIX) as server, socket.socket(socket.AF_UNIX) as sock:
                server.bind(address(path))
                server.listen()
                sock.connect(address(path))
                conn, _ = server.accept()
                sock.sendall(b"x")
                assert conn.recv(1) == b"x"
                conn.close()


        def pair():
            one, two = socket.socketpair()
            one.sendall(b"x")
            assert two.recv(1) == b"x"


        ACTIONS = {
            "tcp_connect": tcp_connect,
            "tcp_listen": tcp_listen,
            "unix_connect": unix_connect,
            "own_unix": own_unix,
            "pair": pair,
        }
        for name, action, *args in cfg["steps"]:
            attempt(name, lambda: ACTIONS[action](*args))
        print(json.dumps(out))
        """
    )
)

#: Listens on 127.0.0.1:argv[1] and the Unix socket argv[2], says so, then prints what one
#: connection to each sent.
SERVE = textwrap.dedent(
    """
    import socket, sys
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", int(sys.argv[1])))
    tcp.listen()
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(sys.argv[2])
    unix.listen()
    print("ready", flush=True)
    for server in (tcp, unix):
        server.settimeout(20)
        conn, _ = server.accept()
        print(conn.recv(64).decode(), flush=True)
    """
)


@dataclass
class Ran:
    """A finished command."""

    code: int
    stdout: str
    stderr: str
    observed: str


class Box:
    """The test's own ground: a writable work directory, a host-side directory the sandbox
    may read only, a backend with a private state directory."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="executor-route-", dir="/var/tmp")).resolve()
        self.work = self.root / "work"
        self.hostside = self.root / "hostside"
        for directory in (self.work, self.hostside, self.root / "out"):
            directory.mkdir()
        self.backend = LinuxBackend(state_dir=str(self.root / "state"))
        self.token = "token-" + secrets.token_hex(6)
        self._count = 0

    def rules(self, route: NetworkRoute | None = None) -> RuleSet:
        """``/`` readable, the work directory writable, the network on (proxied with a route)."""
        return RuleSet(
            filesystem_restricted=True,
            rules=(PathRule("/", Access.READ), PathRule(str(self.work), Access.WRITE)),
            network=NetworkMode.ENABLED,
            route=route,
        )

    def plan(self, rules: RuleSet, argv: list[str]) -> LaunchPlan:
        command = Command(
            executable=argv[0], argv=tuple(argv), env={}, cwd=str(self.work), tty=False
        )
        return self.backend.prepare(rules, command)

    def probe_argv(self, *steps: list[Any]) -> list[str]:
        config = {"token": self.token, "steps": [list(step) for step in steps]}
        return [sys.executable, "-I", "-S", "-c", PROBE, json.dumps(config)]

    async def start(self, spawner: Spawner, plan: LaunchPlan) -> tuple[Any, Path, Path]:
        """Launch ``plan``; returns the launch and its output files."""
        self._count += 1
        out = self.root / "out" / f"{self._count}.out"
        err = self.root / "out" / f"{self._count}.err"
        assert plan.setup is not None
        request = Command(
            executable=plan.executable,
            argv=plan.argv,
            env={},
            cwd=str(self.work),
            tty=False,
            setup=plan.setup,
        )
        fds = [
            os.open(os.devnull, os.O_RDONLY),
            os.open(out, os.O_WRONLY | os.O_CREAT, 0o600),
            os.open(err, os.O_WRONLY | os.O_CREAT, 0o600),
        ]
        try:
            launch = spawner.launch(request, (fds[0], fds[1], fds[2]))
        finally:
            for fd in fds:
                os.close(fd)
        return launch, out, err

    async def finish(self, launch: Any, out: Path, err: Path, plan: LaunchPlan) -> Ran:
        try:
            await asyncio.wait_for(launch.started, 20)
            code = await asyncio.wait_for(launch.exited, 30)
            await asyncio.wait_for(launch.gone, 10)
        finally:
            if plan.release is not None:
                plan.release()
        return Ran(code, out.read_text(), err.read_text(), launch.observed or "")

    def run(self, rules: RuleSet, argv: list[str]) -> Ran:
        """Plan and run one command to its end."""
        plan = self.plan(rules, argv)

        async def go() -> Ran:
            spawner = Spawner()
            try:
                return await self.finish(*await self.start(spawner, plan), plan)
            finally:
                spawner.close()

        return asyncio.run(go())

    def probe(self, rules: RuleSet, *steps: list[Any]) -> dict[str, str]:
        ran = self.run(rules, self.probe_argv(*steps))
        assert ran.code == 0 and ran.stdout, ran
        report: dict[str, str] = json.loads(ran.stdout)
        return report

    def close(self) -> None:
        self.backend.placeholders.flush()
        shutil.rmtree(self.root, ignore_errors=True)


def proxy_available() -> bool:
    return linux_sandbox_available() and not host_support().network_proxy_reason


@pytest.fixture
def box() -> Iterator[Box]:
    skip_unless(proxy_available(), "proxy mode needs namespaces and a root daemon")
    made = Box()
    yield made
    made.close()


@pytest.fixture
def session_net() -> Iterator[PrivateNetwork]:
    network = PrivateNetwork()
    yield network
    network.close()


def route_of(network: PrivateNetwork, *, local_binding: bool = True) -> NetworkRoute:
    return NetworkRoute(
        ports=(), netns_path=network.path, netns_inode=network.inode, local_binding=local_binding
    )


def received(listener: socket.socket) -> list[bytes]:
    """What connections waiting on ``listener`` sent (complete: their command has ended)."""
    listener.setblocking(False)
    got: list[bytes] = []
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return got
        with conn:
            conn.settimeout(5)
            got.append(conn.recv(64))


def host_tcp_listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_the_probe_offers_proxy_mode_here(box: Box) -> None:
    """A root daemon with namespaces enforces network-proxy (and says so)."""
    status = box.backend.probe(HostInfo.current())
    assert Feature.NETWORK_PROXY in status.features
    assert status.details["network_proxy"] == "yes"


def test_a_routed_command_reaches_its_session_not_the_host_loopback(
    box: Box, session_net: PrivateNetwork
) -> None:
    """127.0.0.1:P is the session's listener, not the host's on the same port; the host's
    other port is refused."""
    host = host_tcp_listener()
    other = host_tcp_listener()
    port = host.getsockname()[1]
    inside = session_net.tcp_listener(port)
    try:
        rules = box.rules(route_of(session_net))
        plan = box.plan(rules, ["/bin/true"])
        assert "namespaces(mount,pid,ipc,net=session)" in plan.report.layers
        assert "seccomp(network-proxied)" in plan.report.layers
        report = box.probe(
            rules, ["session", "tcp_connect", port], ["host", "tcp_connect", other.getsockname()[1]]
        )
        assert report == {"session": "ok", "host": "ECONNREFUSED"}
        assert received(inside) == [box.token.encode()]
        assert received(host) == [] and received(other) == []
    finally:
        for sock in (host, other, inside):
            sock.close()


def test_the_observed_report_names_the_session_namespace(
    box: Box, session_net: PrivateNetwork
) -> None:
    """Checked from inside: the command's network namespace is the session's inode."""
    ran = box.run(box.rules(route_of(session_net)), ["/bin/true"])
    assert ran.code == 0, ran
    assert f"net:{session_net.inode}=session" in ran.observed


def test_commands_of_one_session_reach_each_other(box: Box, session_net: PrivateNetwork) -> None:
    """One command listens (TCP and a Unix socket in the work directory), the next one,
    planned while the first listens, connects to both."""
    rules = box.rules(route_of(session_net))
    path = str(box.work / "dev-server.sock")
    serve = box.plan(rules, [sys.executable, "-I", "-S", "-c", SERVE, "8000", path])

    async def go() -> tuple[Ran, dict[str, str]]:
        spawner = Spawner()
        try:
            server = await box.start(spawner, serve)
            deadline = time.monotonic() + 20
            while "ready" not in server[1].read_text():
                assert time.monotonic() < deadline, server[2].read_text()
                await asyncio.sleep(0.02)
            client_plan = box.plan(
                rules, box.probe_argv(["tcp", "tcp_connect", 8000], ["unix", "unix_connect", path])
            )
            assert ("mask_socket", path) not in _mount_ops(client_plan)
            client = await box.finish(*await box.start(spawner, client_plan), client_plan)
            return await box.finish(*server, serve), json.loads(client.stdout)
        finally:
            spawner.close()

    served, report = asyncio.run(go())
    assert report == {"tcp": "ok", "unix": "ok"}
    assert served.code == 0, served
    assert served.stdout.split() == ["ready", box.token, box.token]


def test_a_vanished_session_namespace_fails_before_anything_runs(
    box: Box, session_net: PrivateNetwork
) -> None:
    """Another inode at the path, or no path at all: the `network` stage fails, naming it."""
    marker = box.work / "ran"
    argv = ["/bin/sh", "-c", f"echo ran > {marker}"]
    wrong = NetworkRoute(ports=(), netns_path=session_net.path, netns_inode=session_net.inode + 1)
    missing = NetworkRoute(
        ports=(), netns_path=f"/proc/{os.getpid()}/fd/999999", netns_inode=session_net.inode
    )
    for route in (wrong, missing):
        with pytest.raises(LaunchFailed) as failed:
            box.run(box.rules(route), argv)
        assert failed.value.stage == "network"
        assert "the session's network namespace is gone" in str(failed.value)
    assert not marker.exists()


def test_without_local_binding_listen_fails_and_connect_works(
    box: Box, session_net: PrivateNetwork
) -> None:
    inside = session_net.tcp_listener()
    try:
        rules = box.rules(route_of(session_net, local_binding=False))
        assert "seccomp(network-proxied,no-listen)" in box.plan(rules, ["/bin/true"]).report.layers
        report = box.probe(
            rules,
            ["listen", "tcp_listen"],
            ["connect", "tcp_connect", inside.getsockname()[1]],
        )
        assert report == {"listen": "EPERM", "connect": "ok"}
        assert received(inside) == [box.token.encode()]
    finally:
        inside.close()


@pytest.mark.parametrize("mode", ["proxy", "full"])
def test_host_unix_sockets_are_out_of_reach(
    box: Box, session_net: PrivateNetwork, mode: str
) -> None:
    """A host service's pathname socket and (full mode: by Landlock scoping; proxy mode: by
    the namespace) an abstract one are unreachable; a socketpair and the command's own
    pathname and abstract sockets work."""
    pathname = socket.socket(socket.AF_UNIX)
    pathname.bind(str(box.hostside / "service.sock"))
    pathname.listen()
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0executor-test-" + secrets.token_hex(6))
    abstract.listen()
    try:
        rules = box.rules(route_of(session_net) if mode == "proxy" else None)
        plan = box.plan(rules, ["/bin/true"])
        assert ("mask_socket", str(box.hostside / "service.sock")) in _mount_ops(plan)
        assert any(
            layer.startswith("mounts(") and "host-unix-sockets:" in layer
            for layer in plan.report.layers
        )
        report = box.probe(
            rules,
            ["host_path", "unix_connect", pathname.getsockname()],
            ["host_abstract", "unix_connect", "@" + abstract.getsockname()[1:].decode()],
            ["pair", "pair"],
            ["own_path", "own_unix", str(box.work / "own.sock")],
            ["own_abstract", "own_unix", "@executor-own-" + secrets.token_hex(6)],
        )
        assert report == {
            # The mask is an empty mode-000 file: no socket, and no permission to try.
            "host_path": "EACCES",
            # Scoped by Landlock (full mode); another namespace's name (proxy mode).
            "host_abstract": "EPERM" if mode == "full" else "ECONNREFUSED",
            "pair": "ok",
            "own_path": "ok",
            "own_abstract": "ok",
        }
        assert received(pathname) == [] and received(abstract) == []
    finally:
        pathname.close()
        abstract.close()


def test_in_full_mode_an_earlier_commands_unix_listener_is_masked(box: Box) -> None:
    """The documented price of full mode: a command's pathname listener is a host socket
    (the host's network namespace) for the commands planned while it listens."""
    rules = box.rules()
    path = str(box.work / "dev-server.sock")
    serve = box.plan(rules, [sys.executable, "-I", "-S", "-c", SERVE, "0", path])

    async def go() -> dict[str, str]:
        spawner = Spawner()
        try:
            server = await box.start(spawner, serve)
            deadline = time.monotonic() + 20
            while "ready" not in server[1].read_text():
                assert time.monotonic() < deadline, server[2].read_text()
                await asyncio.sleep(0.02)
            plan = box.plan(rules, box.probe_argv(["unix", "unix_connect", path]))
            assert ("mask_socket", path) in _mount_ops(plan)
            client = await box.finish(*await box.start(spawner, plan), plan)
            os.killpg(server[0].started.result()[0], signal.SIGKILL)
            await box.finish(*server, serve)
            return dict(json.loads(client.stdout))
        finally:
            spawner.close()

    assert asyncio.run(go()) == {"unix": "EACCES"}


def _mount_ops(plan: LaunchPlan) -> tuple[tuple[str, str], ...]:
    assert plan.setup is not None
    spec = launch_spec.decode(plan.setup.payload)
    assert spec.namespaces is not None
    return spec.namespaces.mounts.operations
