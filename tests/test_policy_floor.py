"""The policy floor (``serve --require-sandbox``) and ``--env-deny`` on real daemons.

Two floors: the shipped ``read-only``, and ``floor-test``, written here into a private
``EXECUTOR_PROFILES_DIR``: read-only, plus a directory of our own that it denies, plus the
daemon's ``TMPDIR`` writable, with the network on (so ``http/request`` is left to the http
policy). Every refusal is checked with its allowed counterpart; nothing touches host state
(our files in a temporary directory, our own HTTP listener on loopback).
"""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from executor.protocol.paths import to_uri
from tests.sandbox.wire import context, managed, path, special
from tests.support.client import WsClient, output_of
from tests.support.daemon import RunningDaemon, executor_command
from tests.support.enforcement import skip_unless

REFUSED = "sandbox is weaker than this executor's required sandbox"


def linux_sandbox_available() -> bool:
    """Landlock, seccomp and namespaces all work here (a floor must be enforceable)."""
    if not sys.platform.startswith("linux"):
        return False
    from executor_linux.probe import host_support

    support = host_support()
    return bool(support.landlock_abi and support.namespaces and support.seccomp)


@dataclass
class Scene:
    """Our own files: one the floor lets read, one in a directory it denies."""

    root: Path
    readme: Path
    denied: Path
    secret: Path
    link: Path  # -> denied
    daemon_tmp: Path
    profiles: Path


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Scene:
    root = tmp_path_factory.mktemp("floor").resolve()
    (root / "open").mkdir()
    readme = root / "open" / "readme.txt"
    readme.write_text("hello from the open side\n")
    denied = root / "denied"
    denied.mkdir()
    secret = denied / "secret.txt"
    secret.write_text("the secret\n")
    link = root / "link"
    link.symlink_to(denied)
    daemon_tmp = root / "daemon-tmp"
    daemon_tmp.mkdir()
    profiles = root / "profiles"
    profiles.mkdir()
    (profiles / "floor-test.toml").write_text(
        'description = "read-only, minus one directory, plus TMPDIR; network on"\n'
        'extends = "read-only"\n'
        "[filesystem]\n"
        f'"{denied}" = "deny"\n'
        '":tmpdir" = "write"\n'
        "[network]\n"
        "enabled = true\n"
    )
    return Scene(root, readme, denied, secret, link, daemon_tmp, profiles)


@pytest.fixture(scope="module")
def read_only_daemon() -> Iterator[RunningDaemon]:
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    daemon = RunningDaemon(["--require-sandbox", "read-only"])
    yield daemon
    daemon.stop()


@pytest.fixture(scope="module")
def custom_daemon(scene: Scene) -> Iterator[RunningDaemon]:
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    daemon = RunningDaemon(
        ["--require-sandbox", "floor-test", "--http-allow-private"],
        env={"EXECUTOR_PROFILES_DIR": str(scene.profiles), "TMPDIR": str(scene.daemon_tmp)},
    )
    yield daemon
    daemon.stop()


@pytest.fixture
def ro(read_only_daemon: RunningDaemon) -> Iterator[WsClient]:
    with read_only_daemon.session() as client:
        yield client


@pytest.fixture
def custom(custom_daemon: RunningDaemon) -> Iterator[WsClient]:
    with custom_daemon.session() as client:
        yield client


def start(client: WsClient, process_id: str, script: str, cwd: Path, **extra: Any) -> Any:
    return client.call(
        "process/start",
        {
            "processId": process_id,
            "argv": ["/bin/sh", "-c", script],
            "cwd": to_uri(str(cwd)),
            "env": {"PATH": "/usr/bin:/bin"},
            "tty": False,
            **extra,
        },
    )


def run(client: WsClient, process_id: str, script: str, cwd: Path, **extra: Any) -> bytes:
    response = start(client, process_id, script, cwd, **extra)
    assert "result" in response, response
    assert response["result"]["sandboxType"] != "none"
    return output_of(client.process_events(process_id))


def error(response: dict[str, Any]) -> tuple[int, str]:
    assert "error" in response, response
    return response["error"]["code"], response["error"]["message"]


# --- process/start ---------------------------------------------------------------------------


@pytest.mark.enforcement
def test_an_unsandboxed_command_runs_under_the_floor(ro: WsClient, scene: Scene) -> None:
    """read-only: the command reads our file, and its write next to it fails."""
    target = scene.root / "open" / "written"
    out = run(ro, "p", f"cat {scene.readme}; echo x > {target}; echo rc=$?", scene.root)
    assert b"hello from the open side" in out
    assert b"rc=0" not in out
    assert not target.exists()


@pytest.mark.enforcement
def test_the_floors_tmpdir_is_the_daemons(custom: WsClient, scene: Scene) -> None:
    """floor-test's ``:tmpdir`` is the daemon's TMPDIR, whatever the command's says."""
    inside, outside = scene.daemon_tmp / "ok", scene.root / "open" / "no"
    script = f"echo x > {inside}; echo x > {outside}; cat {scene.secret}; echo done"
    out = run(custom, "t", script, scene.root, env={"PATH": "/usr/bin:/bin", "TMPDIR": "/"})
    assert b"done" in out and b"the secret" not in out
    assert inside.exists() and not outside.exists()


WEAKER = [
    ("network", managed(special("root", "read"), network="enabled"), "exceed network."),
    ("writable-root", None, "it would exceed writes. writes: "),
    ("disabled", {"type": "disabled"}, "exceed reads, writes and network."),
    (
        "unrestricted",
        {"type": "managed", "file_system": {"type": "unrestricted"}, "network": "restricted"},
        "writes: / (the required sandbox allows reading only)",
    ),
]


@pytest.mark.enforcement
@pytest.mark.parametrize(
    ("permissions", "named"), [w[1:] for w in WEAKER], ids=[w[0] for w in WEAKER]
)
def test_a_weaker_sandbox_is_refused_naming_the_excess(
    ro: WsClient, scene: Scene, permissions: dict[str, Any] | None, named: str
) -> None:
    marker = scene.root / "open" / "ran"
    if permissions is None:
        permissions = managed(special("root", "read"), path(str(scene.root / "open"), "write"))
    sandbox = context(permissions, cwd=str(scene.root))
    code, message = error(start(ro, "w", f"touch {marker}", scene.root, sandbox=sandbox))
    assert code == -32602
    assert message.startswith(f"{REFUSED} `read-only`")
    assert named in message
    assert not marker.exists()


@pytest.mark.enforcement
@pytest.mark.parametrize(
    "entries",
    [
        [special("root", "read")],
        [special("minimal", "read"), path("/tmp", "read"), path("/usr", "read")],
    ],
    ids=["equal", "stronger"],
)
def test_an_equal_or_stronger_sandbox_runs(
    ro: WsClient, scene: Scene, entries: list[dict[str, Any]]
) -> None:
    entries = [*entries, path(str(scene.root), "read")]
    sandbox = context(managed(*entries), cwd=str(scene.root))
    out = run(ro, "s", f"cat {scene.readme}", scene.root, sandbox=sandbox)
    assert b"hello from the open side" in out


@pytest.mark.enforcement
def test_a_symlink_to_what_the_floor_denies_is_seen_through(custom: WsClient, scene: Scene) -> None:
    """An entry naming the link is an entry on the denied directory it leads to."""
    through_link = context(
        managed(special("minimal", "read"), path(str(scene.link), "read")), cwd=str(scene.root)
    )
    code, message = error(start(custom, "l", "true", scene.root, sandbox=through_link))
    assert code == -32602 and f"reads: {scene.denied} (read;" in message
    code, message = error(
        custom.call("fs/readFile", {"path": to_uri(str(scene.secret)), "sandbox": through_link})
    )
    assert code == -32602 and f"reads: {scene.denied}" in message
    honest = context(
        managed(special("minimal", "read"), path(str(scene.root / "open"), "read")),
        cwd=str(scene.root),
    )
    out = run(custom, "h", f"cat {scene.readme}", scene.root, sandbox=honest)
    assert b"hello from the open side" in out


# --- fs/*, capability discovery, fs/watchMissing -------------------------------------------------


@pytest.mark.enforcement
def test_unsandboxed_file_calls_see_the_floors_view(custom: WsClient, scene: Scene) -> None:
    read = custom.request("fs/readFile", {"path": to_uri(str(scene.readme))})
    assert read["dataBase64"]
    _, message = error(custom.call("fs/readFile", {"path": to_uri(str(scene.secret))}))
    assert "Permission denied" in message
    _, message = error(custom.call("fs/readDirectory", {"path": to_uri(str(scene.denied))}))
    assert "Permission denied" in message
    _, message = error(
        custom.call(
            "fs/writeFile", {"path": to_uri(str(scene.root / "open" / "w")), "dataBase64": "eA=="}
        )
    )
    assert "Read-only file system" in message
    written = scene.daemon_tmp / "via-fs"
    custom.request("fs/writeFile", {"path": to_uri(str(written)), "dataBase64": "eA=="})
    assert written.read_bytes() == b"x"


@pytest.mark.enforcement
def test_a_file_call_with_a_weaker_sandbox_is_refused(custom: WsClient, scene: Scene) -> None:
    everything = context(managed(special("root", "read")), cwd=str(scene.root))
    code, message = error(
        custom.call("fs/readFile", {"path": to_uri(str(scene.readme)), "sandbox": everything})
    )
    assert code == -32602
    assert f"{REFUSED} `floor-test`" in message and f"reads: {scene.denied}" in message
    same = context(
        managed(special("root", "read"), path(str(scene.denied), "deny")), cwd=str(scene.root)
    )
    assert custom.request("fs/readFile", {"path": to_uri(str(scene.readme)), "sandbox": same})
    code, message = error(
        custom.call("fs/readFile", {"path": to_uri(str(scene.secret)), "sandbox": same})
    )
    assert "Permission denied" in message


@pytest.mark.enforcement
def test_capability_discovery_reads_through_the_floor(custom: WsClient, scene: Scene) -> None:
    (scene.denied / "SKILL.md").write_text("hidden skill")
    (scene.root / "open" / "SKILL.md").write_text("open skill")
    roots = [
        {"id": "d", "path": to_uri(str(scene.denied))},
        {"id": "o", "path": to_uri(str(scene.root / "open"))},
    ]
    denied, allowed = custom.request("capabilityRoots/discoverV1", {"roots": roots})["roots"]
    # A denied directory still exists in the view: the walk fails (a warning), as it does
    # for a root whose own sandbox denies it.
    assert not denied["skills"] and "failed to scan capability path" in denied["warnings"][0]
    assert allowed["error"] is None and allowed["warnings"] == []
    weaker = context(managed(special("root", "read")), cwd=str(scene.root))
    (alone,) = custom.request(
        "capabilityRoots/discoverV1", {"roots": [{**roots[1], "sandbox": weaker}]}
    )["roots"]
    assert f"{REFUSED} `floor-test`" in alone["error"]
    assert [s["instructions"]["contents"] for s in allowed["skills"]] == ["open skill"]


@pytest.mark.enforcement
def test_watch_missing_does_not_watch_what_the_floor_hides(custom: WsClient, scene: Scene) -> None:
    hidden = {"watchId": 1, "missing": [to_uri(str(scene.denied / "nothing-yet"))]}
    assert custom.request("fs/watchMissing", hidden) == {"watching": False}
    shown = {"watchId": 2, "missing": [to_uri(str(scene.root / "open" / "nothing-yet"))]}
    assert custom.request("fs/watchMissing", shown) == {"watching": True}


# --- http/request ------------------------------------------------------------------------------


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def listener() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.mark.enforcement
def test_http_requests_follow_the_floors_network(
    ro: WsClient, custom: WsClient, listener: str
) -> None:
    """read-only restricts the network: refused, naming the floor. floor-test has it on: the
    operator's http policy decides (here: private addresses allowed)."""
    request = {"method": "GET", "url": listener, "requestId": "r", "streamResponse": False}
    code, message = error(ro.call("http/request", request))
    assert code == -32602
    assert "required sandbox `read-only`" in message and "restricts the network" in message
    assert custom.request("http/request", request)["status"] == 200


# --- --env-deny --------------------------------------------------------------------------------


def test_env_deny_keeps_variables_from_every_command() -> None:
    """The captured Codex request inherits everything and ignores the default excludes; the
    denied names still never reach the command (not even from ``set`` or ``env``), matching
    is case-sensitive, and everything else arrives."""
    secrets = {"AWS_SECRET_ACCESS_KEY": "s3cret", "AWS_REGION": "eu", "KEEP_ME": "1"}
    daemon = RunningDaemon(
        ["--env-deny", "AWS_*", "--env-deny", "*_PASSWORD"],
        env={**secrets, "aws_lower": "2", "DB_PASSWORD": "pw"},
    )
    try:
        with daemon.connect() as client:
            result = client.run(
                ["/usr/bin/env"],
                env={"AWS_FROM_ENV": "y", "FROM_ENV": "z"},
                env_policy={
                    "inherit": "all",
                    "ignoreDefaultExcludes": True,
                    "exclude": [],
                    "set": {"AWS_FROM_SET": "x"},
                    "includeOnly": [],
                },
            )
    finally:
        daemon.stop()
    names = {line.split("=", 1)[0] for line in result.stdout.decode().splitlines()}
    assert not {name for name in names if name.startswith("AWS_")}
    assert "DB_PASSWORD" not in names
    assert {"KEEP_ME", "aws_lower", "FROM_ENV", "PATH"} <= names


# --- startup ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--require-sandbox", "danger-full-access"], "type disabled confines nothing"),
        (["--require-sandbox", "no-such-profile"], "unknown profile 'no-such-profile'"),
        (["--require-sandbox", "/no/such/floor.toml"], "does not exist"),
        (["--workspace", "/tmp"], "--workspace only applies with --require-sandbox"),
    ],
    ids=["disabled", "unknown", "missing-file", "workspace-alone"],
)
def test_an_unusable_floor_stops_serve_with_one_line(argv: list[str], message: str) -> None:
    result = subprocess.run(
        [*executor_command(), "serve", "--listen", "ws://127.0.0.1:0", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "EXECUTOR_PROFILES_DIR": ""},
    )
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("executor: --require-sandbox") or last.startswith("executor: --work")
    assert message in last
