"""Sockets and dangerous ioctls under the seccomp layer (issue 11: host Unix sockets, TIOCSTI,
userfaultfd by the device).

``socket_probe.py`` runs for real: through ``executor run`` (read-only, workspace, and without
namespaces), through the daemon with ``useLegacyLandlock``, with the network off and on, under
the bare seccomp filter (no other layer, so each rule is seen on its own), and once with no
sandbox at all, which shows every escape row would succeed if nothing stopped it. The host
side is the test's own: a pathname and an abstract datagram socket and a loopback TCP
listener, read after each run; the probe's terminal is its own pty.
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from executor_linux import seccomp_policy

from tests.executor_linux.conftest import linux_sandbox_available
from tests.sandbox.wire import context, managed, special
from tests.support.client import output_of
from tests.support.daemon import RunningDaemon, executor_command
from tests.support.enforcement import skip_unless

pytestmark = pytest.mark.enforcement

PROBE = Path(__file__).with_name("socket_probe.py")


@dataclass(frozen=True)
class Route:
    """One way of running the probe."""

    name: str
    network: bool
    profile: str = "read-only"
    #: "cli" (``executor run``), "daemon" (``useLegacyLandlock`` over the wire), "filter"
    #: (the compiled filter alone) or "none" (no sandbox: the control).
    driver: str = "cli"
    namespaces: bool = True
    #: Give the command a terminal: Landlock alone keeps /dev/ptmx read-only, so the probe
    #: cannot open a pty of its own there and uses this one.
    tty: bool = False
    extra: tuple[str, ...] = ()


NETWORK_OFF = [
    Route("read-only", network=False),
    Route("workspace", network=False, profile="workspace"),
    Route("read-only-no-namespaces", network=False, namespaces=False, tty=True),
    Route("legacy-landlock", network=False, driver="daemon", tty=True),
    Route("filter-network-off", network=False, driver="filter"),
]
# The socket rules with the network on are the seccomp filter's: the host's loopback (the
# test's listener) is reachable only without loopback isolation (test_loopback_guard.py and
# tests/test_sandbox_network.py test that layer).
NETWORK_ON = [
    Route(
        "workspace-network",
        network=True,
        profile="workspace-network",
        extra=("--shared-loopback",),
    ),
    Route(
        "network-on-no-namespaces",
        network=True,
        namespaces=False,
        tty=True,
        extra=("--network", "on", "--shared-loopback"),
    ),
    Route("filter-network-on", network=True, driver="filter"),
]
SANDBOXED = NETWORK_OFF + NETWORK_ON
CONTROL = Route("no-sandbox", network=True, driver="none")


def ids(route: Route) -> str:
    """The test id of a route."""
    return route.name


@dataclass
class Host:
    """The test's own targets: datagram sockets, a TCP listener, a workspace."""

    root: Path
    token: str = field(default_factory=lambda: "probe-" + secrets.token_hex(8))
    sockets: dict[str, socket.socket] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root.mkdir()
        (self.root / "workspace").mkdir()
        (self.root / "state").mkdir()
        # Staged next to the targets: readable wherever the checkout lives (a private 0700
        # directory included).
        shutil.copy(PROBE, self.root / PROBE.name)
        path = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        path.bind(str(self.root / "host-dgram.sock"))
        abstract = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        abstract.bind("\0executor-test-dgram-" + secrets.token_hex(6))
        tcp = socket.socket()
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        self.sockets = {"path": path, "abstract": abstract, "tcp": tcp}
        for sock in self.sockets.values():
            sock.setblocking(False)

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    def config(self, **extra: Any) -> str:
        """The probe's argument."""
        return json.dumps(
            {
                "dgram_path": self.sockets["path"].getsockname(),
                "dgram_abstract": self.sockets["abstract"].getsockname()[1:].decode(),
                "tcp_port": self.sockets["tcp"].getsockname()[1],
                "token": self.token,
                **extra,
            }
        )

    def datagrams(self) -> list[bytes]:
        """Everything the host's datagram sockets received since the last call."""
        got = []
        for name in ("path", "abstract"):
            while True:
                try:
                    got.append(self.sockets[name].recv(256))
                except BlockingIOError:
                    break
        return got

    def tcp_payloads(self) -> list[bytes]:
        """What connections to the listener sent (they are complete when the probe exits)."""
        got: list[bytes] = []
        while True:
            try:
                conn, _ = self.sockets["tcp"].accept()
            except BlockingIOError:
                return got
            with conn:
                conn.settimeout(5)
                got.append(conn.recv(256))

    def close(self) -> None:
        for sock in self.sockets.values():
            sock.close()
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class Outcome:
    """The probe's report and what reached the host."""

    report: dict[str, str]
    datagrams: list[bytes]
    tcp: list[bytes]
    token: bytes


def parse(output: str, context_text: str) -> dict[str, str]:
    """The probe's JSON report (a terminal's CRLF is whitespace to JSON)."""
    assert output.strip(), f"probe printed nothing: {context_text}"
    report: dict[str, str] = json.loads(output)
    return report


class Runner:
    """Runs the probe by each route once per module; the daemon starts only if needed."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="executor-seccomp-", dir="/var/tmp")).resolve()
        self.cache: dict[Route, Outcome] = {}
        self.daemon: RunningDaemon | None = None

    def outcome(self, route: Route) -> Outcome:
        if route not in self.cache:
            host = Host(self.root / route.name)
            try:
                report = self._run(route, host)
                self.cache[route] = Outcome(
                    report, host.datagrams(), host.tcp_payloads(), host.token.encode()
                )
            finally:
                host.close()
        return self.cache[route]

    def _argv(self, host: Host, **extra: Any) -> list[str]:
        return [sys.executable, "-I", "-S", str(host.root / PROBE.name), host.config(**extra)]

    def _run(self, route: Route, host: Host) -> dict[str, str]:
        if route.driver == "daemon":
            return self._run_daemon(route, host)
        env = {k: v for k, v in os.environ.items() if k != "EXECUTOR_LINUX_NAMESPACES"}
        if route.driver == "none":
            argv = self._argv(host)
        elif route.driver == "filter":
            program = host.root / "filter.bpf"
            program.write_bytes(seccomp_policy.compile_filter(not route.network))
            argv = self._argv(host, seccomp_filter=str(program))
        else:
            env["EXECUTOR_STATE_DIR"] = str(host.root / "state")
            if not route.namespaces:
                env["EXECUTOR_LINUX_NAMESPACES"] = "off"
            argv = [
                *executor_command(),
                "run",
                "--profile",
                route.profile,
                "--workspace",
                str(host.workspace),
                *route.extra,
                "--tty" if route.tty else "--no-tty",
                "--",
                *self._argv(host),
            ]
        result = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=env,
            cwd=host.workspace,
            timeout=60,
            check=False,
        )
        return parse(result.stdout, result.stderr)

    def _run_daemon(self, route: Route, host: Host) -> dict[str, str]:
        if self.daemon is None:
            state = self.root / "daemon-state"
            state.mkdir()
            self.daemon = RunningDaemon(
                env={"EXECUTOR_STATE_DIR": str(state)}, unset=("EXECUTOR_LINUX_NAMESPACES",)
            )
        ws = str(host.workspace)
        sandbox = context(
            managed(special("root", "read")), cwd=ws, roots=(ws,), useLegacyLandlock=True
        )
        with self.daemon.session() as client:
            result, events = client.run(
                "probe",
                self._argv(host),
                cwd=f"file://{ws}",
                env={"PATH": "/usr/bin:/bin"},
                sandbox=sandbox,
                tty=route.tty,
                timeout=60,
            )
        assert result["sandboxType"] == "linuxSeccomp"
        return parse(output_of(events).decode(), repr(events[-3:]))

    def close(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def probe(sandbox_launch: str) -> Iterator[Callable[[Route], Outcome]]:
    """The probe's outcome per route (each route runs once per launcher)."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    runner = Runner()
    yield runner.outcome
    runner.close()


def rows(report: dict[str, str], *names: str) -> dict[str, str]:
    """The named rows of a report (compared whole, so a failure shows every row)."""
    return {name: report[name] for name in names}


def every(value: str, *names: str) -> dict[str, str]:
    """The expected rows: each of ``names`` is ``value``."""
    return dict.fromkeys(names, value)


DATAGRAM_SOCKETS = (
    "unix_dgram",
    "unix_dgram_flags",
    "unix_raw",
    "unix_dgram_highbits",
    "pair_dgram",
    "pair_raw",
)
IP_SOCKETS = ("inet_tcp", "inet_udp", "inet6_tcp", "inet6_udp", "netlink")
FOREIGN_FAMILIES = ("vsock", "packet", "alg", "bluetooth")
ALLOWED_UNIX = (
    "unix_stream",
    "unix_stream_flags",
    "unix_seqpacket",
    "pair_stream_roundtrip",
    "pair_seqpacket_roundtrip",
)
TERMINAL_REFUSED = ("pty_tiocsti", "pty_tiocsti_highbits", "pty_tioclinux")
DEVICE_ROWS = ("userfaultfd_device", "userfaultfd_device_highbits")


def test_the_probe_sees_every_escape_without_a_sandbox(probe: Callable[[Route], Outcome]) -> None:
    """The control: unsandboxed, the escape rows succeed, so their failure below means
    something (host-dependent rows — AF_ALG, AF_BLUETOOTH — are not asserted here)."""
    outcome = probe(CONTROL)
    report = outcome.report
    assert rows(report, *DATAGRAM_SOCKETS, *IP_SOCKETS) == every(
        "ok", *DATAGRAM_SOCKETS, *IP_SOCKETS
    )
    assert rows(report, "send_dgram_path", "send_raw_path", "send_dgram_abstract") == every(
        "ok", "send_dgram_path", "send_raw_path", "send_dgram_abstract"
    )
    assert outcome.datagrams == [outcome.token] * 6  # 3 from sockets, 3 from socketpairs
    assert report["pty_ctty"] == "ok"
    # As root TIOCSTI works; an ordinary user may meet dev.tty.legacy_tiocsti=0 (EIO).
    assert report["pty_tiocsti"] != "EPERM" and report["pty_tiocsti_highbits"] != "EPERM"
    assert report["pty_tioclinux"] != "EPERM"
    assert report["tcp_connect"] == "ok" and outcome.tcp == [outcome.token]


@pytest.mark.parametrize("route", NETWORK_OFF, ids=ids)
def test_no_datagram_socket_can_exist_with_the_network_off(
    probe: Callable[[Route], Outcome], route: Route
) -> None:
    """AF_UNIX datagram sockets by any name (SOCK_RAW, flags, high bits, socketpair): EPERM."""
    report = probe(route).report
    assert rows(report, *DATAGRAM_SOCKETS) == every("EPERM", *DATAGRAM_SOCKETS)


@pytest.mark.parametrize("route", NETWORK_OFF, ids=ids)
def test_addressed_sends_never_reach_the_host(
    probe: Callable[[Route], Outcome], route: Route
) -> None:
    """Every way to address the host's datagram sockets fails or stays inside the pair, and
    nothing arrives on the host; the allowed socket types ignore or refuse the address."""
    outcome = probe(route)
    report = outcome.report
    sends = {name: value for name, value in report.items() if name.startswith("send_")}
    assert sends == {
        "send_dgram_path": "EPERM",
        "send_raw_path": "EPERM",
        "send_dgram_abstract": "EPERM",
        "send_stream_path": "ENOTSUP",
        "send_pair_dgram_path": "EPERM",
        "send_pair_dgram_path_sendmsg": "EPERM",
        "send_pair_dgram_abstract": "EPERM",
        "send_pair_stream_path": "EISCONN",
        # The kernel drops the address of a seqpacket send: it goes to the pair's own peer.
        "send_pair_seqpacket_path": "to-peer",
        "send_pair_seqpacket_path_sendmsg": "to-peer",
        "send_pair_seqpacket_abstract": "to-peer",
    }
    assert outcome.datagrams == []


@pytest.mark.parametrize("route", NETWORK_OFF, ids=ids)
def test_other_families_are_refused_with_the_network_off(
    probe: Callable[[Route], Outcome], route: Route
) -> None:
    """IP, netlink, vsock, packet, crypto and bluetooth sockets: EPERM; nothing connects."""
    outcome = probe(route)
    names = (*IP_SOCKETS, *FOREIGN_FAMILIES, "tcp_connect")
    assert rows(outcome.report, *names) == every("EPERM", *names)
    assert outcome.tcp == []


@pytest.mark.parametrize("route", SANDBOXED, ids=ids)
def test_unix_stream_and_seqpacket_pairs_keep_working(
    probe: Callable[[Route], Outcome], route: Route
) -> None:
    """The allowed counterpart: socketpair traffic both ways and SCM_RIGHTS fd passing."""
    report = probe(route).report
    assert rows(report, *ALLOWED_UNIX) == every("ok", *ALLOWED_UNIX)


@pytest.mark.parametrize("route", NETWORK_ON, ids=ids)
def test_network_on_allows_ip_and_netlink(probe: Callable[[Route], Outcome], route: Route) -> None:
    """With the network on: IP and netlink sockets exist and a loopback TCP connection works."""
    outcome = probe(route)
    assert rows(outcome.report, *IP_SOCKETS) == every("ok", *IP_SOCKETS)
    assert outcome.report["tcp_connect"] == "ok"
    assert outcome.tcp == [outcome.token]


@pytest.mark.parametrize("route", NETWORK_ON, ids=ids)
def test_network_on_refuses_other_families(probe: Callable[[Route], Outcome], route: Route) -> None:
    """Outside the allow-list (AF_VSOCK, AF_PACKET, AF_ALG, AF_BLUETOOTH): EPERM."""
    report = probe(route).report
    assert rows(report, *FOREIGN_FAMILIES) == every("EPERM", *FOREIGN_FAMILIES)


@pytest.mark.parametrize("route", SANDBOXED, ids=ids)
def test_terminal_injection_is_refused_on_the_own_pty(
    probe: Callable[[Route], Outcome], route: Route
) -> None:
    """On its own controlling pty: TIOCGWINSZ works; TIOCSTI (also with high bits set in the
    request) and TIOCLINUX fail with EPERM."""
    report = probe(route).report
    assert report.get("pty_setup") is None, report.get("pty_setup")
    assert rows(report, "pty_ctty", "pty_tiocgwinsz") == every("ok", "pty_ctty", "pty_tiocgwinsz")
    assert rows(report, *TERMINAL_REFUSED) == every("EPERM", *TERMINAL_REFUSED)


@pytest.mark.parametrize("route", SANDBOXED, ids=ids)
def test_userfaultfd_is_never_obtained(probe: Callable[[Route], Outcome], route: Route) -> None:
    """Neither by the system call nor by ``/dev/userfaultfd``: its ioctl is refused (EPERM),
    also with high bits set, unless the device cannot even be opened."""
    report = probe(route).report
    assert report["userfaultfd_syscall"] == "EPERM"
    for name in DEVICE_ROWS:
        assert report[name] == "ioctl:EPERM" or report[name].startswith("open:"), report[name]
    if route.driver == "filter" and os.path.exists("/dev/userfaultfd"):
        # The bare filter leaves the device reachable: its ioctl rule is what refuses here.
        assert rows(report, *DEVICE_ROWS) == every("ioctl:EPERM", *DEVICE_ROWS)


def test_filter_variants_build_and_differ() -> None:
    """Each (network, metadata) variant compiles to its own BPF program, once."""
    skip_unless(seccomp_policy.available() is None, "libseccomp is needed")
    variants = {
        (network_restricted, lock_metadata): seccomp_policy.compile_filter(
            network_restricted, lock_metadata
        )
        for network_restricted in (True, False)
        for lock_metadata in (True, False)
    }
    for program in variants.values():
        assert program and len(program) % 8 == 0
    assert len(set(variants.values())) == 4
    assert seccomp_policy.compile_filter(True) is seccomp_policy.compile_filter(True)
