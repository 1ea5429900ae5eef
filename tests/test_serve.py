"""``executor serve``: listen URLs, the bound-URL line, warnings, logs, signals and shutdown."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from executor.errors import ConfigError
from executor.serve import ListenAddress, parse_listen
from tests.support.client import WsClient, output_of
from tests.support.daemon import RunningDaemon, executor_command
from tests.support.processes import gone, pid_from_first_output
from tests.support.rawws import http_request


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("stdio", ListenAddress("stdio")),
        ("stdio://", ListenAddress("stdio")),
        ("ws://127.0.0.1:0", ListenAddress("ws", "127.0.0.1", 0)),
        ("ws://127.0.0.1:8765", ListenAddress("ws", "127.0.0.1", 8765)),
        ("ws://[::1]:9000", ListenAddress("ws", "::1", 9000)),
        ("ws://localhost:1/", ListenAddress("ws", "localhost", 1)),
    ],
    ids=["stdio", "stdio-url", "port-zero", "port", "ipv6", "trailing-slash"],
)
def test_parse_listen_accepts(url: str, expected: ListenAddress) -> None:
    """The supported listen spellings."""
    assert parse_listen(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:1",
        "ws://127.0.0.1",
        "ws://:80",
        "ws://127.0.0.1:99999",
        "ws://h:1/x",
        "tcp",
    ],
    ids=["scheme", "no-port", "no-host", "bad-port", "path", "word"],
)
def test_parse_listen_rejects(url: str) -> None:
    """Anything else is an operator error with a clear message."""
    with pytest.raises(ConfigError):
        parse_listen(url)


def test_bad_listen_url_exits_2_with_message() -> None:
    """The CLI reports a bad --listen on stderr and exits 2, printing nothing on stdout."""
    result = subprocess.run(
        [*executor_command(), "serve", "--listen", "http://127.0.0.1:1"],
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == b""
    assert b"unsupported listen URL" in result.stderr


def test_port_zero_prints_the_bound_url_first(shared_daemon: RunningDaemon) -> None:
    """The first stdout line is the bound URL with the kernel-chosen port, and it serves."""
    assert shared_daemon.url.startswith("ws://127.0.0.1:")
    assert int(shared_daemon.url.rsplit(":", 1)[1]) > 0
    assert http_request(shared_daemon.url, "GET", "/readyz").status == 200


def test_ipv6_loopback(daemon_factory: type[RunningDaemon]) -> None:
    """An IPv6 loopback listen address prints a bracketed URL and serves."""
    daemon = daemon_factory(["--listen", "ws://[::1]:0"])
    assert daemon.url.startswith("ws://[::1]:")
    with WsClient(daemon.url) as client:
        assert "sessionId" in client.initialize()
    assert "non-loopback" not in daemon.log()


def test_non_loopback_bind_warns(daemon_factory: type[RunningDaemon]) -> None:
    """Binding a non-loopback address logs a warning on stderr (and still serves loopback)."""
    daemon = daemon_factory(["--listen", "ws://0.0.0.0:0"])
    port = daemon.url.rsplit(":", 1)[1]
    assert http_request(f"ws://127.0.0.1:{port}", "GET", "/readyz").status == 200
    assert "non-loopback" in daemon.log()
    assert "WARNING" in daemon.log()


def test_loopback_bind_does_not_warn(shared_daemon: RunningDaemon) -> None:
    """The default loopback bind logs no warning."""
    assert "non-loopback" not in shared_daemon.log()


def _json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_json_logs_one_object_per_line(daemon_factory: type[RunningDaemon]) -> None:
    """--log-format json: one JSON object per stderr line; connection and refusal lines."""
    daemon = daemon_factory(["--log-format", "json"])
    with daemon.client() as client:
        client.call("environment/status")  # refused: no handshake yet
        client.initialize()
        client.call("process/read", {"processId": "nope"})
        client.send_raw("{broken")
        client.out_of_band()
    time.sleep(0.2)
    assert daemon.stop() == 0
    entries = _json_lines(daemon.log())
    assert entries
    for entry in entries:
        assert {"ts", "level", "logger", "message"} <= set(entry)
    messages = [str(entry["message"]) for entry in entries]
    assert sum("opened" in m for m in messages) == 1
    assert sum(m.startswith("connection") and m.endswith("closed") for m in messages) == 1
    refused = [entry for entry in entries if entry.get("event") == "refused"]
    assert len(refused) == 3  # two requests and the bad message, as audit fields
    assert any(entry.get("error") == "unknown process id nope" for entry in refused)
    assert any("bad message" in m for m in messages)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_signal_shuts_down_cleanly_and_ends_trees(
    daemon_factory: type[RunningDaemon], signum: int
) -> None:
    """SIGTERM/SIGINT: exit 0 promptly; pipe, tty and TERM-ignoring children are all gone."""
    daemon = daemon_factory(["--stop-grace", "0.3"])
    client = daemon.session()
    base = {"cwd": "file:///tmp", "env": {"PATH": "/usr/bin:/bin"}}
    scripts = {
        "pipe": ("echo $$; exec sleep 1004", False),
        "tty": ("echo $$; exec sleep 1004", True),
        "stubborn": ("trap '' TERM; echo $$; sleep 1004; sleep 1004", False),
    }
    pids = []
    for process_id, (script, tty) in scripts.items():
        client.request(
            "process/start",
            {"processId": process_id, "argv": ["/bin/sh", "-c", script], "tty": tty, **base},
        )
        pids.append(pid_from_first_output(client, process_id))
    supervisor_children = [
        child.pid for pid in pids for child in psutil.Process(pid).children(recursive=True)
    ]
    started = time.monotonic()
    assert daemon.stop(signum) == 0
    assert time.monotonic() - started < 5
    for pid in [*pids, *supervisor_children]:
        assert gone(pid), pid
    lines = daemon.log()
    assert "shutting down" in lines
    client.close()


def test_shutdown_closes_connections_with_going_away(daemon_factory: type[RunningDaemon]) -> None:
    """Connected clients get a 1001 close frame when the daemon stops."""
    daemon = daemon_factory()
    client = daemon.session()
    daemon.stop()
    deadline = time.monotonic() + 5
    while not client.inbox.closed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.inbox.closed
    assert client.ws.close_code == 1001


def test_the_daemon_raises_its_descriptor_limit_and_commands_keep_theirs() -> None:
    """Proxy tunnels hold descriptors: the daemon takes its hard limit; a command still gets
    the soft limit the daemon was started with (select-based programs rely on 1024)."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if not hasattr(resource, "prlimit") or (hard != resource.RLIM_INFINITY and hard <= 1024):
        pytest.skip("raised on Linux only, and only below a higher hard limit")

    def lowered() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))

    daemon = RunningDaemon(preexec=lowered)
    try:
        limits = Path(f"/proc/{daemon.pid}/limits").read_text()
        row = next(line for line in limits.splitlines() if line.startswith("Max open files"))
        assert int(row.split()[3]) > 1024
        client = daemon.session()
        _, events = client.run("n", ["/bin/sh", "-c", "ulimit -Sn"])
        assert output_of(events).decode().strip() == "1024"
    finally:
        daemon.stop()
