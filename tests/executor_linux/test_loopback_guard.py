"""Loopback isolation: real cgroup-v2 BPF hooks on this kernel, real sockets.

Every listener here is the test's own (an ephemeral port on 127.0.0.1, 127.0.0.2, ::1, the
host's interface address, or port 53 on an unused 127/8 address); guarded processes are
small Python children that join their cgroup first. Each refusal is checked beside the
same call from outside the guard (or from the same scope) succeeding.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import os
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from executor_linux import bpf
from executor_linux.backend import LinuxBackend
from executor_linux.local_addresses import STATIC_LOCAL, local_prefixes
from executor_linux.loopback_guard import GuardedCommand, LoopbackGuard, loopback_guard_support
from executor_linux.loopback_programs import _MAPPED_WORD2, DNS_PORT, _native16, trie_key

from executor.protocol.intent import Access, NetworkMode
from executor.sandbox import Feature, HostInfo, LaunchPlan, RuleSet
from executor.sandbox.api import Command
from executor.sandbox.rules import PathRule
from executor.spawn.spawner import Spawner
from tests.executor_linux.conftest import UNPRIVILEGED_UID, as_user, linux_sandbox_available
from tests.support.enforcement import skip_unless

#: Joins the cgroups named in argv[1], runs the operations, prints one result per operation
#: ("ok", a bound port, an errno name or "timeout"; port -1 is the last one bound); with
#: argv[2] == "serve" it then keeps its sockets open until its stdin closes.
CHILD = r"""
import errno, json, os, socket, sys
joins, ops = json.loads(sys.argv[1])
for join in joins:
    fd = os.open(join, os.O_WRONLY)
    os.write(fd, b"0")
    os.close(fd)
held, results = [], []
def family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET
last = 0
for kind, host, port in ops:
    port = last if port == -1 else port
    try:
        if kind == "tcp":
            s = socket.socket(family(host), socket.SOCK_STREAM)
            s.settimeout(1.0)
            s.connect((host, port))
            results.append("ok")
        elif kind == "mptcp":
            s = socket.socket(family(host), socket.SOCK_STREAM, 262)
            s.settimeout(1.0)
            s.connect((host, port))
            results.append("ok")
        elif kind == "fastopen":
            s = socket.socket(family(host), socket.SOCK_STREAM)  # blocking: connects first
            s.sendto(b"x", socket.MSG_FASTOPEN, (host, port))
            results.append("ok")
        elif kind == "udp":
            s = socket.socket(family(host), socket.SOCK_DGRAM)
            s.sendto(b"x", (host, port))
            results.append("ok")
        elif kind == "udp6-mapped":
            s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            s.sendto(b"x", (host, port))
            results.append("ok")
        elif kind == "udp-connect":
            s = socket.socket(family(host), socket.SOCK_DGRAM)
            s.connect((host, port))
            results.append("ok")
        elif kind == "listen":
            s = socket.socket(family(host), socket.SOCK_STREAM)
            if host == "::":
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind((host, port))
            s.listen()
            held.append(s)
            last = s.getsockname()[1]
            results.append(last)
            continue
        elif kind == "listen-udp":
            s = socket.socket(family(host), socket.SOCK_DGRAM)
            s.bind((host, port))
            held.append(s)
            results.append(s.getsockname()[1])
            continue
        s.close()
    except TimeoutError:
        results.append("timeout")
    except OSError as exc:
        results.append(errno.errorcode.get(exc.errno or 0, str(exc)))
print(json.dumps(results), flush=True)
if sys.argv[2:] == ["serve"]:
    sys.stdin.read()
"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def _supported() -> None:
    ok, reason = loopback_guard_support()
    skip_unless(ok, f"loopback isolation is unavailable here: {reason}")


@pytest.fixture(scope="module")
def guard(sandbox_launch: str) -> LoopbackGuard:
    """One guard for the module, as one daemon has."""
    return LoopbackGuard()


@contextmanager
def guarded(
    guard: LoopbackGuard, scope: str | None, ports: tuple[int, ...] = ()
) -> Iterator[GuardedCommand]:
    command = guard.join(scope, ports)
    try:
        yield command
    finally:
        command.release()


def run(command: GuardedCommand | None, *ops: tuple[str, str, int]) -> list[object]:
    """The operations' results from a child in ``command``'s cgroup (None: unguarded)."""
    joins = list(command.joins) if command is not None else []
    argv = [sys.executable, "-I", "-S", "-c", CHILD, json.dumps([joins, ops])]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    results: list[object] = json.loads(done.stdout)
    return results


@contextmanager
def server(command: GuardedCommand, *ops: tuple[str, str, int]) -> Iterator[list[int]]:
    """A child in ``command``'s cgroup holding the listeners ``ops`` open; yields their ports."""
    argv = [
        sys.executable,
        "-I",
        "-S",
        "-c",
        CHILD,
        json.dumps([list(command.joins), ops]),
        "serve",
    ]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdin is not None and child.stdout is not None
        try:
            ports = json.loads(child.stdout.readline())
            assert all(isinstance(p, int) for p in ports), ports
            yield [int(p) for p in ports]
        finally:
            child.stdin.close()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()


def listener(stack: ExitStack, host: str, kind: int = socket.SOCK_STREAM, port: int = 0) -> int:
    """The test's own listener (TCP, or a bound UDP socket) on ``host``; its port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = stack.enter_context(socket.socket(family, kind))
    sock.bind((host, port))
    if kind == socket.SOCK_STREAM:
        sock.listen()
    return int(sock.getsockname()[1])


def interface_address() -> str | None:
    """An IPv4 address of this host outside 127/8, if it has one."""
    for prefix in local_prefixes():
        network = ipaddress.ip_network(prefix)
        if (
            network.version == 4
            and network.prefixlen == 32
            and not network.is_loopback
            and not network.is_multicast
            and str(network.network_address) != "255.255.255.255"
        ):
            address = str(network.network_address)
            try:  # a broadcast address can be bound, but not connected to
                with socket.socket() as server, socket.socket() as client:
                    server.bind((address, 0))
                    server.listen()
                    client.connect(server.getsockname())
                return address
            except OSError:
                continue
    return None


# --- without the kernel ---------------------------------------------------------------------


def test_static_prefixes_cover_loopback_unspecified_and_mapped_forms() -> None:
    assert {"127.0.0.0/8", "0.0.0.0/8", "::1/128", "::/128"} <= set(STATIC_LOCAL)
    key = trie_key(ipaddress.ip_network("127.0.0.0/8"))
    # prefix 96 + 8 over ::ffff:127.0.0.0, the form the programs build for IPv4
    assert key == struct.pack("=I", 104) + bytes(10) + b"\xff\xff\x7f\0\0\0"


def test_assembler_resolves_forward_jumps_and_two_slot_loads() -> None:
    a = bpf.Asm()
    a.jump("jeq", bpf.R1, 0, "end")
    a.load_imm64(bpf.R0, 2**40 + 5)
    a.label("end")
    a.exit()
    code = a.code()
    assert len(code) == 4 * 8
    _op, _regs, offset, _imm = struct.unpack_from("<BBhi", code, 0)
    assert offset == 2  # over both slots of ld_imm64
    low = struct.unpack_from("<i", code, 8 + 4)[0]
    high = struct.unpack_from("<i", code, 16 + 4)[0]
    assert (high << 32) | (low & 0xFFFFFFFF) == 2**40 + 5


def test_local_prefixes_hold_every_interface_address() -> None:
    """The rtnetlink snapshot: each IPv6 address of /proc/net/if_inet6 is in it."""
    found = {ipaddress.ip_network(p) for p in local_prefixes()}
    assert ipaddress.ip_network("127.0.0.0/8") in found
    for line in Path("/proc/net/if_inet6").read_text().splitlines():
        address = ipaddress.ip_address(
            ":".join(line.split()[0][i : i + 4] for i in range(0, 32, 4))
        )
        assert any(address in network for network in found), address


# --- the kernel's view ----------------------------------------------------------------------


@pytest.mark.enforcement
def test_the_probe_says_yes_as_root_and_why_not_unprivileged() -> None:
    skip_unless(os.getuid() == 0, "the test runs as root")
    assert loopback_guard_support() == (True, "")
    script = (
        "import sys; sys.path[:0] = sys.argv[1:];"
        "from executor_linux.loopback_guard import loopback_guard_support as s; print(s())"
    )
    plugins = str(Path(__file__).parents[2] / "plugins")
    root = str(Path(__file__).parents[2])  # the guard's modules import the plugin API
    done = subprocess.run(
        [*as_user(UNPRIVILEGED_UID), sys.executable, "-I", "-c", script, plugins, root],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert "(False, 'attaching cgroup BPF programs needs CAP_NET_ADMIN" in done.stdout


@pytest.mark.enforcement
def test_a_refused_program_carries_the_verifier_log() -> None:
    _supported()
    a = bpf.Asm()
    a.load("w", bpf.R0, bpf.R1, 4096)  # past the end of struct bpf_sock_addr
    a.exit()
    with pytest.raises(bpf.VerifierError) as caught:
        bpf.prog_load(
            bpf.PROG_TYPE_CGROUP_SOCK_ADDR,
            a.code(),
            expected_attach_type=bpf.CGROUP_INET4_CONNECT,
            name="bad",
        )
    assert caught.value.errno == errno.EACCES
    assert "invalid bpf_context access" in str(caught.value)


@pytest.mark.enforcement
def test_host_loopback_is_refused_inside_and_reachable_outside(guard: LoopbackGuard) -> None:
    """127.0.0.1, 127.0.0.2, ::1, the IPv4-mapped form, 0.0.0.0 and :: (both mean this
    host to connect), the host's interface address, TCP fast open and UDP: EPERM inside,
    while the same calls from an unguarded process work."""
    _supported()
    with ExitStack() as stack:
        one = listener(stack, "127.0.0.1")
        two = listener(stack, "127.0.0.2")
        six = listener(stack, "::1")
        udp = listener(stack, "127.0.0.1", socket.SOCK_DGRAM)
        ops = [
            ("tcp", "127.0.0.1", one),
            ("tcp", "127.0.0.2", two),
            ("tcp", "::1", six),
            ("tcp", "::ffff:127.0.0.1", one),
            ("tcp", "0.0.0.0", one),
            ("tcp", "::", six),
            ("fastopen", "127.0.0.1", one),
            ("udp", "127.0.0.1", udp),
            ("udp6-mapped", "::ffff:127.0.0.1", udp),
            ("udp-connect", "127.0.0.1", udp),
        ]
        address = interface_address()
        if address is not None:
            ops.append(("tcp", address, listener(stack, address)))
        outside = run(None, *ops)
        assert outside == ["ok"] * len(ops)
        with guarded(guard, f"scope-{secrets.token_hex(4)}") as command:
            assert run(command, *ops) == ["EPERM"] * len(ops)


@pytest.mark.enforcement
def test_mptcp_to_host_loopback_is_refused(guard: LoopbackGuard) -> None:
    """MPTCP (a TCP subflow under another protocol number) does not get around the hooks;
    where the kernel has no MPTCP, it cannot work from inside either."""
    _supported()
    with ExitStack() as stack:
        port = listener(stack, "127.0.0.1")
        outside = run(None, ("mptcp", "127.0.0.1", port))
        with guarded(guard, None) as command:
            inside = run(command, ("mptcp", "127.0.0.1", port))
        assert inside == (["EPERM"] if outside == ["ok"] else outside)


@pytest.mark.enforcement
def test_listed_local_ports_and_dns_are_reachable(guard: LoopbackGuard) -> None:
    """A port in local_ports works (its neighbour does not); port 53 on loopback works
    over UDP and TCP (the test's own resolver stand-in on an unused 127/8 address)."""
    _supported()
    with ExitStack() as stack:
        listed = listener(stack, "127.0.0.1")
        other = listener(stack, "127.0.0.1")
        dns_host = None
        for _attempt in range(20):
            host = f"127.{secrets.randbelow(200) + 20}.{secrets.randbelow(250) + 1}.53"
            try:
                listener(stack, host, socket.SOCK_DGRAM, DNS_PORT)
                listener(stack, host, socket.SOCK_STREAM, DNS_PORT)
            except OSError:
                continue
            dns_host = host
            break
        assert dns_host is not None, "no free 127/8 address for port 53"
        with guarded(guard, None, (listed,)) as command:
            assert run(
                command,
                ("tcp", "127.0.0.1", listed),
                ("tcp", "::ffff:127.0.0.1", listed),
                ("tcp", "127.0.0.1", other),
                ("udp", dns_host, DNS_PORT),
                ("tcp", dns_host, DNS_PORT),
            ) == ["ok", "ok", "EPERM", "ok", "ok"]


@pytest.mark.enforcement
def test_listeners_of_the_same_scope_are_reachable_and_no_one_elses(guard: LoopbackGuard) -> None:
    """A dev server started in one command of a session (127.0.0.1, ::1, a dual-stack ::
    listener, UDP) is reachable from the session's next command, not from another session's
    or from a command without one; a command reaches its own listeners."""
    _supported()
    session = f"session-{secrets.token_hex(4)}"
    with (
        guarded(guard, session) as first,
        server(
            first,
            ("listen", "127.0.0.1", 0),
            ("listen", "::1", 0),
            ("listen", "::", 0),
            ("listen-udp", "127.0.0.1", 0),
        ) as ports,
    ):
        v4, v6, dual, udp = ports
        ops = [
            ("tcp", "127.0.0.1", v4),
            ("tcp", "::1", v6),
            ("tcp", "127.0.0.1", dual),
            ("tcp", "::ffff:127.0.0.1", dual),
            ("udp", "127.0.0.1", udp),
        ]
        with guarded(guard, session) as second:
            assert run(second, *ops) == ["ok"] * len(ops)
        with guarded(guard, f"other-{secrets.token_hex(4)}") as stranger:
            assert run(stranger, *ops) == ["EPERM"] * len(ops)
        with guarded(guard, None) as lonely:
            assert run(lonely, *ops) == ["EPERM"] * len(ops)
    with guarded(guard, None) as alone:
        # One process: its own listener, then a connection to it.
        port, connected = run(alone, ("listen", "127.0.0.1", 0), ("tcp", "127.0.0.1", -1))
        assert isinstance(port, int)
        assert connected == "ok"


@pytest.mark.enforcement
def test_a_closed_listeners_port_is_not_inherited(guard: LoopbackGuard) -> None:
    """The tag is the socket's, not the port's: once the session's listener is gone, a host
    listener on the same port is out of reach."""
    _supported()
    session = f"session-{secrets.token_hex(4)}"
    with guarded(guard, session) as first:
        with server(first, ("listen", "127.0.0.1", 0)) as ports:
            port = ports[0]
        with ExitStack() as stack:
            listener(stack, "127.0.0.1", port=port)
            with guarded(guard, session) as second:
                assert run(second, ("tcp", "127.0.0.1", port)) == ["EPERM"]


@pytest.mark.enforcement
def test_destinations_that_are_not_local_are_untouched(guard: LoopbackGuard) -> None:
    """A connect to an address that is not this host's gets whatever the network says
    (a timeout, unreachable, refused), never EPERM."""
    _supported()
    local = [ipaddress.ip_network(p) for p in local_prefixes()]
    remote = next(
        a
        for a in ("192.0.2.1", "198.51.100.1", "203.0.113.1")
        if not any(ipaddress.ip_address(a) in n for n in local)
    )
    with guarded(guard, None) as command:
        tcp, udp = run(command, ("tcp", remote, 9), ("udp", remote, 9))
    assert tcp != "EPERM" and tcp in (
        "timeout",
        "ECONNREFUSED",
        "EHOSTUNREACH",
        "ENETUNREACH",
        "ok",
    )
    assert udp != "EPERM"


@pytest.mark.enforcement
def test_release_removes_the_cgroup_and_what_is_left_in_it(guard: LoopbackGuard) -> None:
    _supported()
    command = guard.join(None, ())
    directory = Path(command.cgroup)
    assert directory.is_dir()
    leftover = subprocess.Popen(["sh", "-c", f"echo 0 > {command.joins[0]}; exec sleep 30"])
    try:
        deadline = 100
        while str(leftover.pid) not in (directory / "cgroup.procs").read_text().split():
            deadline -= 1
            assert deadline, "the process never joined"
            subprocess.run(["sleep", "0.05"], check=True)
        command.release()
        assert leftover.wait(timeout=10) == -9
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()
    assert not directory.exists()


@pytest.mark.enforcement
def test_a_commands_own_v2_cgroup_is_guarded_in_place(guard: LoopbackGuard) -> None:
    """When the command's limits already put it in a v2 cgroup (a process is in one only),
    the programs go there and the child joins nothing more; release leaves it alone."""
    _supported()
    own = Path(guard.hierarchy.base) / f"limits-test-{secrets.token_hex(4)}"
    own.mkdir()
    try:
        join = str(own / "cgroup.procs")
        command = guard.join(None, (), joined=("/sys/fs/cgroup/pids/tasks", join))
        assert command.joins == ()
        assert command.cgroup == str(own)
        with ExitStack() as stack:
            port = listener(stack, "127.0.0.1")
            assert run(
                GuardedCommand(cgroup=str(own), joins=(join,)), ("tcp", "127.0.0.1", port)
            ) == ["EPERM"]
        command.release()
        assert own.is_dir()
    finally:
        own.rmdir()


@pytest.mark.enforcement
def test_a_detached_private_cgroup2_mount_works_and_leaves_no_mount() -> None:
    """Hosts without a cgroup2 mount: the guard mounts one detached; the child reaches its
    cgroup through /proc/<daemon>/fd, and the host's mount table does not change."""
    _supported()
    before = Path("/proc/self/mountinfo").read_text().count(" - cgroup2 ")
    private = LoopbackGuard(private_mount=True)
    assert private.hierarchy.mount_fd is not None
    assert private.hierarchy.own.startswith(f"/proc/{os.getpid()}/fd/")
    assert Path("/proc/self/mountinfo").read_text().count(" - cgroup2 ") == before
    with ExitStack() as stack:
        port = listener(stack, "127.0.0.1")
        with guarded(private, None) as command:
            assert command.joins[0].startswith(f"/proc/{os.getpid()}/fd/")
            assert run(command, ("tcp", "127.0.0.1", port)) == ["EPERM"]
        assert not Path(command.cgroup).exists()


def test_ports_and_addresses_compare_in_network_byte_order() -> None:
    """user_port and user_ip4 hold network-order bytes; loaded as a native integer, the
    constants the programs compare with must be the same bytes (the real hooks check the
    rest: a listed port works, its neighbour does not)."""
    assert struct.pack("=H", _native16(8080)) == struct.pack("!H", 8080)
    assert struct.pack("=i", _MAPPED_WORD2) == b"\0\0\xff\xff"


# --- through the backend: a real sandboxed launch ----------------------------------------------

#: Runs in the sandbox: argv[1] is JSON [steps]; prints one result per step. Steps:
#: ["tcp", port] connects to 127.0.0.1; ["escape", path] writes its pid to a cgroup.procs;
#: ["serve", ready_file] listens on 127.0.0.1, writes its port to ready_file, accepts once.
SANDBOXED = r"""
import errno, json, os, socket, sys
out = []
for step in json.loads(sys.argv[1]):
    try:
        if step[0] == "tcp":
            with socket.create_connection(("127.0.0.1", step[1]), timeout=5):
                out.append("ok")
        elif step[0] == "escape":
            with open(step[1], "w") as handle:
                handle.write(str(os.getpid()))
            out.append("ok")
        elif step[0] == "serve":
            with socket.socket() as server:
                server.bind(("127.0.0.1", 0))
                server.listen()
                server.settimeout(20)
                with open(step[1] + ".tmp", "w") as handle:
                    handle.write(str(server.getsockname()[1]))
                os.rename(step[1] + ".tmp", step[1])
                server.accept()[0].close()
                out.append("ok")
    except OSError as exc:
        out.append(errno.errorcode.get(exc.errno or 0, str(exc)))
print(json.dumps(out))
"""


class Sandbox:
    """Real launches through ``LinuxBackend`` (workspace-like rules, full network, loopback
    isolated) and the launcher server, in a private directory of the test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.work = root / "work"
        self.work.mkdir()
        self.backend = LinuxBackend(state_dir=str(root / "state"))
        self.count = 0

    def rules(self, scope: str | None, ports: tuple[int, ...] = ()) -> RuleSet:
        return RuleSet(
            filesystem_restricted=True,
            rules=(PathRule("/", Access.READ), PathRule(str(self.work), Access.WRITE)),
            network=NetworkMode.ENABLED,
            isolate_loopback=True,
            local_ports=ports,
            network_scope=scope,
        )

    def plan(self, rules: RuleSet, steps: list[list[object]]) -> LaunchPlan:
        argv = (sys.executable, "-I", "-S", "-c", SANDBOXED, json.dumps(steps))
        command = Command(executable=argv[0], argv=argv, env={}, cwd=str(self.work), tty=False)
        return self.backend.prepare(rules, command)

    async def run(self, spawner: Spawner, plan: LaunchPlan) -> list[str]:
        self.count += 1
        out = self.root / f"{self.count}.out"
        assert plan.setup is not None
        request = Command(
            executable=plan.executable,
            argv=plan.argv,
            env={},
            cwd=str(self.work),
            tty=False,
            setup=plan.setup,
        )
        fds = (
            os.open(os.devnull, os.O_RDONLY),
            os.open(out, os.O_WRONLY | os.O_CREAT, 0o600),
            os.open(os.devnull, os.O_WRONLY),
        )
        try:
            launch = spawner.launch(request, fds)
        finally:
            for fd in fds:
                os.close(fd)
        try:
            await asyncio.wait_for(launch.started, 20)
            assert await asyncio.wait_for(launch.exited, 30) == 0
            await asyncio.wait_for(launch.gone, 10)
        finally:
            if plan.release is not None:
                plan.release()
        results: list[str] = json.loads(out.read_text())
        return results


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    _supported()
    skip_unless(linux_sandbox_available(), "the Linux sandbox needs Landlock and namespaces")
    root = Path(tempfile.mkdtemp(prefix="executor-loopback-", dir="/var/tmp")).resolve()
    try:
        yield Sandbox(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.enforcement
def test_a_sandboxed_command_reaches_listed_ports_only_and_cannot_leave_its_cgroup(
    sandbox: Sandbox, guard: LoopbackGuard
) -> None:
    """Full network, loopback isolated: the host's listener is refused, the listed one
    reached; the command (uid 0 without capabilities under a root daemon) cannot write itself
    into another cgroup; the plan says so; the backend offers the feature."""
    status = sandbox.backend.probe(HostInfo.current())
    assert Feature.LOOPBACK_ISOLATION in status.features
    escape = os.path.join(guard.hierarchy.own, "cgroup.procs")
    with ExitStack() as stack:
        listed = listener(stack, "127.0.0.1")
        other = listener(stack, "127.0.0.1")
        plan = sandbox.plan(
            sandbox.rules(None, (listed,)),
            [["tcp", listed], ["tcp", other], ["escape", escape], ["tcp", other]],
        )
        assert plan.report.layers[1] == "loopback-guard(cgroup-bpf)"
        assert plan.report.details["loopback_isolation"].startswith(f"local ports {listed},")

        async def go() -> list[str]:
            spawner = Spawner()
            try:
                return await sandbox.run(spawner, plan)
            finally:
                spawner.close()

        tcp_listed, tcp_other, escaped, tcp_after = asyncio.run(go())
    assert (tcp_listed, tcp_other, tcp_after) == ("ok", "EPERM", "EPERM")
    assert escaped in ("EACCES", "EROFS", "EPERM"), escaped


@pytest.mark.enforcement
def test_the_next_command_of_a_session_reaches_the_dev_server_of_the_first(
    sandbox: Sandbox,
) -> None:
    """Two process/starts of one session: the second connects to the first's listener;
    a command of another session cannot, nor can one without a session."""
    session = f"session-{secrets.token_hex(4)}"
    ready = sandbox.work / "port"

    async def go() -> tuple[list[str], list[str], list[str], list[str]]:
        spawner = Spawner()
        try:
            server = asyncio.ensure_future(
                sandbox.run(spawner, sandbox.plan(sandbox.rules(session), [["serve", str(ready)]]))
            )
            for _tick in range(400):
                if ready.exists() or server.done():
                    break
                await asyncio.sleep(0.05)
            port = int(ready.read_text())
            stranger = await sandbox.run(
                spawner, sandbox.plan(sandbox.rules("another"), [["tcp", port]])
            )
            lonely = await sandbox.run(spawner, sandbox.plan(sandbox.rules(None), [["tcp", port]]))
            friend = await sandbox.run(
                spawner, sandbox.plan(sandbox.rules(session), [["tcp", port]])
            )
            return stranger, lonely, friend, await asyncio.wait_for(server, 30)
        finally:
            spawner.close()

    stranger, lonely, friend, served = asyncio.run(go())
    assert (stranger, lonely, friend, served) == (["EPERM"], ["EPERM"], ["ok"], ["ok"])
