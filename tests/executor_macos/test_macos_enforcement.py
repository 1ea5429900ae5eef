"""Escape probes under the real Seatbelt: only on a Mac (skipped elsewhere).

Each test materializes an intent with the real ``LocalHost``, plans the launch with the
backend and runs the plan's argv with ``subprocess`` (the daemon's spawner is not used here).
These tests have not been run by this project's CI, which has no macOS runner.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from executor_macos.plugin import MacosBackend

from executor.protocol.intent import parse_sandbox
from executor.sandbox import Command, HostInfo, NetworkRoute, RuleSet
from executor.sandbox.host import LocalHost, state_directory
from executor.sandbox.materialize import materialize
from executor.sandbox.purpose import Purpose

pytestmark = [
    pytest.mark.macos,
    pytest.mark.skipif(
        sys.platform != "darwin", reason="needs a Mac: Seatbelt (sandbox-exec) exists only on macOS"
    ),
]

ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}


def special(kind: str) -> dict[str, Any]:
    """A special path."""
    return {"type": "special", "value": {"kind": kind}}


def intent(
    workspace: Path, entries: list[dict[str, Any]], network: str = "restricted"
) -> dict[str, Any]:
    """A wire ``sandbox`` for ``workspace``."""
    uri = workspace.as_uri()
    return {
        "permissions": {
            "type": "managed",
            "file_system": {"type": "restricted", "entries": entries},
            "network": network,
        },
        "cwd": uri,
        "workspaceRoots": [uri],
        "windowsSandboxLevel": "disabled",
    }


WORKSPACE = [
    {"path": special("root"), "access": "read"},
    {"path": special("project_roots"), "access": "write"},
]


@pytest.fixture(scope="module")
def backend() -> MacosBackend:
    """The real backend, after its self-test passed on this Mac."""
    backend = MacosBackend()
    status = backend.probe(HostInfo.current())
    assert status.available, status.reason
    return backend


def materialized(sandbox: Mapping[str, Any], cwd: Path, env: Mapping[str, str] = ENV) -> RuleSet:
    """The rule set of ``sandbox`` on this host."""
    host = LocalHost(hidden_paths=(state_directory(),))
    rules = materialize(
        parse_sandbox(dict(sandbox)),
        host,
        purpose=Purpose.PROCESS,
        process_cwd=str(cwd),
        child_env=env,
    )
    assert rules is not None
    return rules


def start(
    backend: MacosBackend,
    sandbox: Mapping[str, Any] | RuleSet,
    argv: list[str],
    cwd: Path,
    env: Mapping[str, str] = ENV,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` sandboxed by ``sandbox`` (a wire intent materialized on this host, or a
    rule set)."""
    rules = sandbox if isinstance(sandbox, RuleSet) else materialized(sandbox, cwd, env)
    command = Command(executable=argv[0], argv=tuple(argv), env=dict(env), cwd=str(cwd), tty=False)
    plan = backend.prepare(rules, command)
    return subprocess.Popen(
        plan.argv, cwd=cwd, env={**env, **plan.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def run(
    backend: MacosBackend,
    sandbox: Mapping[str, Any],
    script: str,
    cwd: Path,
    env: Mapping[str, str] = ENV,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``/bin/sh -c script`` sandboxed and wait for it."""
    process = start(backend, sandbox, ["/bin/sh", "-c", script], cwd, env)
    stdout, stderr = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_write_inside_allowed_outside_denied(backend: MacosBackend, workspace: Path) -> None:
    """The workspace is writable; a sibling directory is not (EPERM)."""
    outside = workspace.parent / "outside"
    outside.mkdir()
    done = run(
        backend,
        intent(workspace, WORKSPACE),
        "echo in > inside.txt; echo out > ../outside/x.txt",
        workspace,
    )
    assert (workspace / "inside.txt").read_text() == "in\n"
    assert not (outside / "x.txt").exists()
    assert done.returncode != 0
    assert b"Operation not permitted" in done.stderr


def test_read_of_denied_path_fails(backend: MacosBackend, workspace: Path) -> None:
    """A denied directory and deny-glob matches (existing or new) are unreadable/unwritable."""
    (workspace / "private").mkdir()
    (workspace / "private" / "secret").write_text("s")
    (workspace / "a.env").write_text("e")
    entries = [
        *WORKSPACE,
        {"path": {"type": "path", "path": (workspace / "private").as_uri()}, "access": "deny"},
        {"path": {"type": "glob_pattern", "pattern": "**/*.env"}, "access": "deny"},
    ]
    sandbox = intent(workspace, entries)
    assert run(backend, sandbox, "cat private/secret", workspace).returncode != 0
    assert run(backend, sandbox, "cat a.env", workspace).returncode != 0
    assert run(backend, sandbox, "echo x > sub.env", workspace).returncode != 0
    assert not (workspace / "sub.env").exists()
    assert run(backend, sandbox, "echo ok > fine.txt", workspace).returncode == 0


def test_deny_glob_classes_deny_exactly_what_they_name(
    backend: MacosBackend, workspace: Path
) -> None:
    """Bracket classes with punctuation, a listed "/", negation and a non-ASCII range: Seatbelt
    reads the emitted regexes as the core reads the globs (no more, no less)."""
    (workspace / "d").mkdir()
    for name in ("k.key", "kxkey", "n.x", "n.1", "d/y", "dxy", "\u00e9", "z"):
        (workspace / name).write_text("s")
    globs = ["k[._]key", "n.[!0-9]", "d[/x]y", "[\u00e0-\u00ff]"]
    entries = [
        *WORKSPACE,
        *({"path": {"type": "glob_pattern", "pattern": g}, "access": "deny"} for g in globs),
    ]
    sandbox = intent(workspace, entries)
    for denied in ("k.key", "n.x", "dxy", "\u00e9"):
        assert run(backend, sandbox, f"cat '{denied}'", workspace).returncode != 0, denied
    for readable in ("kxkey", "n.1", "d/y", "z"):
        assert run(backend, sandbox, f"cat '{readable}'", workspace).returncode == 0, readable
    assert run(backend, sandbox, "echo x > k_key", workspace).returncode != 0
    assert not (workspace / "k_key").exists()


def test_git_stays_read_only(backend: MacosBackend, workspace: Path) -> None:
    """.git can be read but not written, renamed or filled."""
    (workspace / ".git").mkdir()
    (workspace / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    sandbox = intent(workspace, WORKSPACE)
    assert run(backend, sandbox, "cat .git/HEAD", workspace).returncode == 0
    assert run(backend, sandbox, "echo x > .git/HEAD", workspace).returncode != 0
    assert run(backend, sandbox, "mkdir .git/hooks", workspace).returncode != 0
    assert run(backend, sandbox, "mv .git moved", workspace).returncode != 0
    assert (workspace / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"


def test_hard_link_does_not_open_a_protected_file(backend: MacosBackend, workspace: Path) -> None:
    """A hard link made inside the workspace cannot be used to write a file under .git."""
    (workspace / ".git").mkdir()
    (workspace / ".git" / "config").write_text("[core]\n")
    run(
        backend,
        intent(workspace, WORKSPACE),
        "ln .git/config linked; echo evil >> linked",
        workspace,
    )
    assert (workspace / ".git" / "config").read_text() == "[core]\n"


def test_workspace_in_writable_parent_cannot_be_renamed_away(
    backend: MacosBackend, workspace: Path
) -> None:
    """With $TMPDIR (the workspace's parent) writable, the workspace keeps its .git in place."""
    (workspace / ".git").mkdir()
    env = {**ENV, "TMPDIR": str(workspace.parent)}
    entries = [*WORKSPACE, {"path": special("tmpdir"), "access": "write"}]
    done = run(backend, intent(workspace, entries), "cd .. && mv workspace moved", workspace, env)
    assert done.returncode != 0
    assert (workspace / ".git").is_dir()


def test_missing_codex_cannot_be_created(backend: MacosBackend, workspace: Path) -> None:
    """mkdir .codex fails although .codex does not exist yet."""
    done = run(backend, intent(workspace, WORKSPACE), "mkdir .codex", workspace)
    assert done.returncode != 0
    assert not (workspace / ".codex").exists()


@pytest.mark.parametrize(
    ("network", "reachable"),
    [("restricted", False), ("enabled", True)],
    ids=["restricted", "enabled"],
)
def test_tcp_connect(backend: MacosBackend, workspace: Path, network: str, reachable: bool) -> None:
    """With network restricted a TCP connect to a host listener fails; enabled, it works."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5).close()"
        process = start(
            backend,
            intent(workspace, WORKSPACE, network),
            [sys.executable, "-I", "-S", "-c", code],
            workspace,
        )
        process.communicate(timeout=60)
    assert (process.returncode == 0) is reachable


def test_minimal_profile_runs_system_binaries(backend: MacosBackend, workspace: Path) -> None:
    """With :minimal the system's programs run, the workspace is usable, the rest is hidden."""
    outside = workspace.parent / "notes.txt"
    outside.write_text("private")
    entries = [
        {"path": special("minimal"), "access": "read"},
        {"path": special("project_roots"), "access": "write"},
    ]
    sandbox = intent(workspace, entries)
    done = run(backend, sandbox, "/bin/echo hi && /bin/ls . && echo x > made.txt", workspace)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"hi\n")
    assert (workspace / "made.txt").exists()
    assert run(backend, sandbox, f"/bin/cat {outside}", workspace).returncode != 0


def test_slash_tmp_is_writable_under_both_spellings(backend: MacosBackend, workspace: Path) -> None:
    """:slash_tmp makes /tmp (really /private/tmp) writable by either name."""
    name = f"executor-macos-test-{uuid.uuid4().hex}"
    entries = [*WORKSPACE, {"path": special("slash_tmp"), "access": "write"}]
    try:
        done = run(
            backend,
            intent(workspace, entries),
            f"echo a > /tmp/{name} && echo b > /private/tmp/{name}.2",
            workspace,
        )
        assert done.returncode == 0, done.stderr
    finally:
        for suffix in ("", ".2"):
            Path(f"/private/tmp/{name}{suffix}").unlink(missing_ok=True)


@pytest.fixture
def outside_home() -> Any:
    """A directory the test creates in the home directory: not writable under `workspace`
    (which writes the workspace, /tmp and $TMPDIR, where pytest's tmp_path lives on macOS)."""
    import shutil

    path = Path.home() / f".executor-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_executor_run_enforces_the_workspace_profile(workspace: Path, outside_home: Path) -> None:
    """Through `executor run`, as an operator runs it: inside writable, outside and network not."""
    from tests.support.daemon import executor_command

    script = (
        f"echo in > {workspace}/inside.txt && echo inside-ok; "
        f"echo out > {outside_home}/x.txt || echo outside-denied; "
        "/usr/bin/nc -z -w 2 127.0.0.1 22 || echo network-denied"
    )
    result = subprocess.run(
        [
            *executor_command(),
            "run",
            "--profile",
            "workspace",
            "--workspace",
            str(workspace),
            "--",
            "/bin/sh",
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout.split() == ["inside-ok", "outside-denied", "network-denied"]
    assert (workspace / "inside.txt").read_text() == "in\n"
    assert not (outside_home / "x.txt").exists()


# --- managed network -------------------------------------------------------------------------

#: Run in the sandbox: try each (kind, address, port) and print what happened, as JSON.
#: "ok" is a connect or bind that succeeded; otherwise the errno's name (EPERM: Seatbelt).
PROBE = """
import errno, json, socket, sys
results = []
for kind, address, port in json.loads(sys.argv[1]):
    family = socket.AF_UNIX if kind == "unix" else (
        socket.AF_INET6 if ":" in address else socket.AF_INET)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(5)
    target = address if kind == "unix" else (address, port)
    try:
        if kind == "bind":
            sock.bind(target)
            sock.listen()
        else:
            sock.connect(target)
        results.append("ok")
    except OSError as exc:
        results.append(errno.errorcode.get(exc.errno, str(exc)))
    finally:
        sock.close()
print(json.dumps(results))
"""


def probe(
    backend: MacosBackend, rules: RuleSet, cwd: Path, targets: list[tuple[str, str, int]]
) -> list[str]:
    """What each connect or bind in ``targets`` gives under ``rules``."""
    argv = [sys.executable, "-I", "-S", "-c", PROBE, json.dumps(targets)]
    process = start(backend, rules, argv, cwd)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    results: list[str] = json.loads(stdout)
    return results


@contextlib.contextmanager
def host_listener(address: str = "127.0.0.1") -> Iterator[int]:
    """A host loopback service the sandbox must not reach unless listed; yields its port."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.create_server((address, 0), family=family) as server:
        yield server.getsockname()[1]


@contextlib.contextmanager
def host_unix_listener() -> Iterator[str]:
    """A host Unix socket in /tmp (like tmux's), created outside the sandbox; yields its path."""
    with tempfile.TemporaryDirectory(dir="/private/tmp") as directory:
        path = os.path.join(directory, "host.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(path)
            server.listen()
            yield path
        finally:
            server.close()


def network_rules(workspace: Path, **fields: Any) -> RuleSet:
    """The workspace profile with network on, plus the managed-network ``fields``."""
    return replace(materialized(intent(workspace, WORKSPACE, "enabled"), workspace), **fields)


DENIED = ("EPERM", "EACCES")


def test_proxy_route_reaches_only_its_ports(backend: MacosBackend, workspace: Path) -> None:
    """Proxy mode: the route's loopback port connects; another host listener, its IPv6 and
    IPv4-mapped spellings, a public address and a host Unix socket are refused by Seatbelt."""
    with host_listener() as proxy, host_listener() as other, host_unix_listener() as unix:
        rules = network_rules(workspace, route=NetworkRoute(ports=(proxy,), local_binding=False))
        results = probe(
            backend,
            rules,
            workspace,
            [
                ("tcp", "127.0.0.1", proxy),
                ("tcp", "127.0.0.1", other),
                ("tcp", "::1", other),
                ("tcp", "::ffff:127.0.0.1", other),
                ("tcp", "0.0.0.0", other),
                ("tcp", "192.0.2.1", 80),
                ("unix", unix, 0),
                ("bind", "127.0.0.1", 0),
            ],
        )
    assert results[0] == "ok"
    for result in results[1:]:
        assert result in DENIED, results


def test_proxy_local_binding_is_loopback_only(backend: MacosBackend, workspace: Path) -> None:
    """With local binding the command listens on 127.0.0.1, but not on every interface."""
    rules = network_rules(workspace, route=NetworkRoute(ports=(9,), local_binding=True))
    results = probe(backend, rules, workspace, [("bind", "127.0.0.1", 0), ("bind", "0.0.0.0", 0)])
    assert results[0] == "ok"
    assert results[1] in DENIED


def test_loopback_isolation(backend: MacosBackend, workspace: Path) -> None:
    """Network on with the loopback isolated: a listed port connects; an unlisted host listener
    is refused by every spelling of the loopback; a host Unix socket is refused; names still
    resolve (mDNSResponder's socket stays open)."""
    with host_listener() as listed, host_listener() as other, host_unix_listener() as unix:
        rules = network_rules(workspace, isolate_loopback=True, local_ports=(listed,))
        results = probe(
            backend,
            rules,
            workspace,
            [
                ("tcp", "127.0.0.1", listed),
                ("tcp", "127.0.0.1", other),
                ("tcp", "0.0.0.0", other),
                ("tcp", "::1", other),
                ("tcp", "::ffff:127.0.0.1", other),
                ("tcp", "::ffff:0.0.0.0", other),
                ("unix", unix, 0),
            ],
        )
        resolve = "import socket; socket.getaddrinfo('localhost', 80)"
        process = start(backend, rules, [sys.executable, "-I", "-S", "-c", resolve], workspace)
        _out, err = process.communicate(timeout=60)
    assert results[0] == "ok"
    for result in results[1:]:
        assert result in DENIED, results
    assert process.returncode == 0, err


def test_network_enabled_reaches_host_unix_sockets(backend: MacosBackend, workspace: Path) -> None:
    """The control: plain network-on (no isolation) does reach a host Unix socket, which is
    why loopback isolation exists."""
    with host_unix_listener() as unix:
        rules = materialized(intent(workspace, WORKSPACE, "enabled"), workspace)
        assert probe(backend, rules, workspace, [("unix", unix, 0)]) == ["ok"]
