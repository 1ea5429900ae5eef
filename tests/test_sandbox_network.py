"""Sandboxed network beyond on and off, end to end: real daemons, real sandboxed commands, the
real proxy, HTTP servers of our own on loopback (no outside network exists here).

* proxy mode (a profile's ``mode = "proxy"``, the policy floor, ``enforceManagedNetwork``,
  ``networkProxy``): an allowed host works through curl and urllib; an unlisted name, an IP
  literal, loopback behind a wildcard, a direct connection and ``curl --noproxy '*'`` fail;
  ``local_ports`` lets exactly the listed port through; a session's commands reach each
  other's listeners and nothing else on the host's loopback;
* full mode: the host's loopback services (this daemon's port included) are out of reach,
  the session's own listeners are not.

Every refusal comes with its allowed counterpart; nothing touches host state.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.client import RunResult, ServerError, SyncEnvironment
from executor.client.sync import SyncProcess
from tests.sandbox.wire import context, managed, special
from tests.support.daemon import RunningDaemon, executor_command
from tests.support.enforcement import skip_unless

pytestmark = pytest.mark.enforcement

PROBE = r"""
import json, socket, sys, urllib.request, urllib.error
out = {}
for name, url in json.loads(sys.argv[1]).items():
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            out[name] = response.read().decode()
    except urllib.error.HTTPError as exc:
        out[name] = f"HTTP {exc.code}"
    except Exception as exc:
        out[name] = type(exc).__name__ + ": " + str(getattr(exc, "reason", exc))
for name, port in json.loads(sys.argv[2]).items():
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        out[name] = "connected"
    except OSError as exc:
        out[name] = type(exc).__name__
print(json.dumps(out))
"""


class Server:
    """An HTTP server on ``host`` answering every GET with its own name."""

    def __init__(self, host: str, name: str, port: int = 0) -> None:
        body = name.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer((host, port), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://{host}:{self.port}/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def linux_network_proxy() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    from executor_linux.probe import host_support

    support = host_support()
    return bool(support.namespaces and support.landlock_abi and os.geteuid() == 0)


@pytest.fixture(scope="module", autouse=True)
def _enforced() -> None:
    skip_unless(linux_network_proxy(), "proxy mode needs namespaces and a root daemon")


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Server]]:
    made = {
        # the host's loopback services: one listed in local_ports, one not
        "listed": Server("127.0.0.1", "listed"),
        "host": Server("127.0.0.1", "host-service"),
        # an "outside" host the proxy may be allowed to reach (by IP literal)
        "remote": Server("127.0.0.2", "remote"),
    }
    yield made
    for server in made.values():
        server.close()


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory, servers: dict[str, Server]) -> Path:
    root = tmp_path_factory.mktemp("network").resolve()
    (root / "ws").mkdir()
    (root / "profiles").mkdir()
    (root / "probe.py").write_text(PROBE)
    remote, listed = servers["remote"].port, servers["listed"].port
    (root / "profiles" / "test-proxy.toml").write_text(
        'extends = "workspace"\n'
        "[network]\n"
        'enabled = true\nmode = "proxy"\n'
        'allow = ["127.0.0.2", "localhost", "*.example"]\n'
        'deny = ["bad.example"]\n'
        f"local_ports = [{listed}, {remote}]\n"
    )
    (root / "profiles" / "test-wildcard.toml").write_text(
        'extends = "workspace"\n[network]\nenabled = true\nmode = "proxy"\nallow = ["*"]\n'
        f"local_ports = [{listed}]\n"  # the port is not what refuses it
    )
    return root


def run(
    scene: Path, profile: str, argv: list[str], *extra: str
) -> subprocess.CompletedProcess[str]:
    """``executor run --profile profile -- argv`` in the scene's workspace."""
    return subprocess.run(
        [*executor_command(), "run", "--profile", profile, *extra, "--", *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=scene / "ws",
        env={**os.environ, "EXECUTOR_PROFILES_DIR": str(scene / "profiles")},
    )


def probe(
    scene: Path, profile: str, urls: dict[str, str], ports: dict[str, int] | None = None
) -> dict[str, str]:
    """What urllib (honouring the proxy variables) and plain connects get in the sandbox."""
    result = run(
        scene,
        profile,
        [sys.executable, "-I", str(scene / "probe.py"), json.dumps(urls), json.dumps(ports or {})],
    )
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


# --- proxy mode through executor run -----------------------------------------------------


def test_an_allowed_host_is_reached_through_the_proxy_and_nothing_else_is(
    scene: Path, servers: dict[str, Server]
) -> None:
    remote, host = servers["remote"], servers["host"]
    seen = probe(
        scene,
        "test-proxy",
        {
            "allowed": remote.url,
            "unlisted-name": "http://unlisted.invalid/",
            "unlisted-literal": f"http://127.0.0.3:{remote.port}/",
            "denied": "http://bad.example/",
        },
        {"direct-host-service": host.port, "direct-daemon-like": remote.port},
    )
    assert seen["allowed"] == "remote"
    assert seen["unlisted-name"] == "HTTP 403"
    assert seen["unlisted-literal"] == "HTTP 403"
    assert seen["denied"] == "HTTP 403"
    # no route but the proxy: the host's loopback is not this network's
    assert seen["direct-host-service"] == "ConnectionRefusedError"


def test_curl_through_the_proxy_and_around_it(scene: Path, servers: dict[str, Server]) -> None:
    skip_unless(shutil.which("curl") is not None, "curl is needed")
    remote = servers["remote"]
    script = (
        f"curl -fsS -m 5 {remote.url}; echo; "
        f"curl -sS -m 5 --noproxy '*' {remote.url} >/dev/null; echo direct=$?; "
        f"curl -fsS -m 5 http://127.0.0.3:{remote.port}/ >/dev/null; echo literal=$?"
    )
    result = run(scene, "test-proxy", ["/bin/sh", "-c", script])
    lines = result.stdout.splitlines()
    assert lines[0] == "remote"
    assert lines[1] == "direct=7"  # cannot connect: there is no route around the proxy
    assert lines[2] == "literal=22"  # the proxy's 403


def test_loopback_only_when_named_and_only_at_local_ports(
    scene: Path, servers: dict[str, Server]
) -> None:
    listed, host = servers["listed"], servers["host"]
    seen = probe(
        scene,
        "test-proxy",
        {},
        {"relayed": listed.port, "unlisted-port": host.port},
    )
    # local_ports: the listed port is relayed into the sandbox's own loopback, no other
    assert seen == {"relayed": "connected", "unlisted-port": "ConnectionRefusedError"}
    script = (
        f"curl -fsS -m 5 --noproxy '' http://localhost:{listed.port}/; echo; "
        f"curl -fsS -m 5 --noproxy '' http://localhost:{host.port}/ >/dev/null; echo other=$?"
    )
    # through the proxy (--noproxy ''), "localhost" is named: only the listed port again
    skip_unless(shutil.which("curl") is not None, "curl is needed")
    lines = run(scene, "test-proxy", ["/bin/sh", "-c", script]).stdout.splitlines()
    assert lines == ["listed", "other=22"]


def test_loopback_behind_a_wildcard_is_refused(scene: Path, servers: dict[str, Server]) -> None:
    listed = servers["listed"]
    result = run(
        scene,
        "test-wildcard",
        [
            sys.executable,
            "-I",
            "-c",
            "import urllib.request as u, os;"
            "os.environ['no_proxy'] = '';"
            f"u.urlopen('http://localhost:{listed.port}/', timeout=5)",
        ],
    )
    assert result.returncode == 1
    assert "403" in result.stderr
    # the refusal is the verdict's evidence, named precisely
    assert f"the sandbox's proxy refused localhost:{listed.port}" in result.stderr
    assert "list the host explicitly" in result.stderr


# --- over the wire ----------------------------------------------------------------------------


WORKSPACE_NETWORK = managed(
    special("root", "read"), special("project_roots", "write"), network="enabled"
)


def start(client: SyncEnvironment, scene: Path, argv: list[str], **extra: Any) -> SyncProcess:
    """``argv`` in the scene's workspace under WORKSPACE_NETWORK; ``extra``: more
    ``process/start`` params (``env`` is added to a PATH)."""
    ws = scene / "ws"
    return client.start(
        argv,
        cwd=str(ws),
        env={"PATH": "/usr/bin:/bin", **extra.pop("env", {})},
        sandbox=context(WORKSPACE_NETWORK, cwd=str(ws), roots=(str(ws),)),
        extra=extra,
    )


def finished(process: SyncProcess) -> tuple[str, RunResult]:
    result = process.collect(timeout=30)
    return (result.stdout + result.stderr).decode(), result


LISTENER = (
    "import socket, sys\n"
    "s = socket.create_server(('127.0.0.1', 0)); print(s.getsockname()[1], flush=True)\n"
    "c, _ = s.accept(); c.sendall(b'hello from the dev server'); c.close()\n"
)
CONNECT = (
    "import socket, sys\n"
    "for port in map(int, sys.argv[1:]):\n"
    "    try:\n"
    "        c = socket.create_connection(('127.0.0.1', port), timeout=5)\n"
    "    except OSError as exc:\n"
    "        print(port, type(exc).__name__)\n"
    "        continue\n"
    "    c.settimeout(1)\n"
    "    try:\n"
    "        print(port, c.recv(100).decode() or 'connected')\n"
    "    except TimeoutError:\n"
    "        print(port, 'connected')  # a server that waits for a request\n"
)


def own_address() -> str | None:
    """This machine's address on its default route (None: it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.123", 9))  # no packet is sent: it picks a source address
        except OSError:
            return None
        address = str(sock.getsockname()[0])
    return None if address.startswith("127.") else address


def daemon_port(daemon: RunningDaemon) -> int:
    return int(daemon.url.rsplit(":", 1)[1])


@pytest.mark.parametrize("floor", [None, "test-proxy"], ids=["full", "proxy-floor"])
def test_a_sessions_commands_reach_each_others_listeners_and_not_the_hosts(
    scene: Path, servers: dict[str, Server], floor: str | None
) -> None:
    args = ["--require-sandbox", floor, "--workspace", str(scene / "ws")] if floor else []
    daemon = RunningDaemon(args, env={"EXECUTOR_PROFILES_DIR": str(scene / "profiles")})
    try:
        with daemon.connect() as client, daemon.connect("other") as other:
            server = start(client, scene, [sys.executable, "-I", "-c", LISTENER])
            port = int(next(iter(server.output())).data.split()[0])
            ports = [port, servers["host"].port, daemon_port(daemon)]
            output, _exited = finished(
                start(client, scene, [sys.executable, "-I", "-c", CONNECT, *map(str, ports)])
            )
            lines = dict(line.split(" ", 1) for line in output.splitlines())
            assert lines[str(port)] == "hello from the dev server"
            refused = "ConnectionRefusedError" if floor else "PermissionError"
            assert lines[str(servers["host"].port)] == refused
            assert lines[str(daemon_port(daemon))] == refused
            # another session's command does not reach this session's listener
            output, _ = finished(
                start(other, scene, [sys.executable, "-I", "-c", CONNECT, str(port)])
            )
            assert output.split()[1] in ("ConnectionRefusedError", "PermissionError")
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def daemon(scene: Path) -> Iterator[RunningDaemon]:
    running = RunningDaemon(env={"EXECUTOR_PROFILES_DIR": str(scene / "profiles")})
    yield running
    running.stop()


@pytest.fixture
def client(daemon: RunningDaemon) -> Iterator[SyncEnvironment]:
    with daemon.connect() as env:
        yield env


def test_managed_networking_reaches_the_clients_proxy_and_nothing_else(
    client: SyncEnvironment, scene: Path, servers: dict[str, Server]
) -> None:
    proxy, host = servers["listed"], servers["host"]  # the "client's proxy" is ours
    script = CONNECT
    env = {"HTTP_PROXY": f"http://127.0.0.1:{proxy.port}"}
    output, exited = finished(
        start(
            client,
            scene,
            [sys.executable, "-I", "-c", script, str(proxy.port), str(host.port)],
            env=env,
            enforceManagedNetwork=True,
        )
    )
    lines = dict(line.split(" ", 1) for line in output.splitlines())
    assert lines[str(proxy.port)] == "connected"
    assert lines[str(host.port)] == "ConnectionRefusedError"
    assert exited.exit_code == 0
    # without proxy variables it is refused before anything runs
    with pytest.raises(ServerError, match="managed proxy mode requires proxy environment variab"):
        client.start(
            ["/bin/true"],
            cwd=str(scene / "ws"),
            env={},
            sandbox=context(WORKSPACE_NETWORK, cwd=str(scene / "ws")),
            extra={"enforceManagedNetwork": True},
        )


def test_network_proxy_launches_our_proxy_with_the_clients_domains(
    client: SyncEnvironment, scene: Path, servers: dict[str, Server]
) -> None:
    remote = servers["remote"]
    proxy = {
        "enabled": True,
        "enableSocks5": True,
        "enableSocks5Udp": True,
        "allowUpstreamProxy": True,
        "dangerouslyAllowAllUnixSockets": False,
        "mode": "full",
        "allowLocalBinding": False,
        "domains": {"127.0.0.2": "allow", "blocked.example": "deny"},
    }
    urls = {"loopback": remote.url, "blocked": "http://blocked.example/"}
    outside = own_address()
    if outside is not None:  # listed, but this machine itself: like its loopback
        public = Server(outside, "outside")
        proxy["domains"] = {**proxy["domains"], outside: "allow"}  # type: ignore[dict-item]
        urls["outside"] = public.url
    launched = start(
        client,
        scene,
        [sys.executable, "-I", str(scene / "probe.py"), json.dumps(urls), "{}"],
        enforceManagedNetwork=True,
        networkProxy={"proxy": proxy},
    )
    output, exited = finished(launched)
    seen = json.loads(output)
    # 127.0.0.2 is this host's loopback: listed, but reached only at local ports (none here)
    assert seen["loopback"] == "HTTP 403"
    assert seen["blocked"] == "HTTP 403"
    if outside is not None:
        public.close()
        assert seen["outside"] == "HTTP 403"
    assert exited.exit_code == 0 and not exited.sandbox_denied
    # a command that fails after a refusal: the refusal is the denial
    failing = start(
        client,
        scene,
        [
            sys.executable,
            "-I",
            "-c",
            "import urllib.request as u; u.urlopen('http://blocked.example/', timeout=5)",
        ],
        enforceManagedNetwork=True,
        networkProxy={"proxy": proxy},
    )
    _output, exited = finished(failing)
    assert exited.exit_code == 1
    assert exited.sandbox_denied
