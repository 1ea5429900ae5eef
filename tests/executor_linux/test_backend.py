"""The Linux backend in use: real sandboxed processes over the wire, and its launch errors."""

from __future__ import annotations

import asyncio
import base64
import errno
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from executor_linux.backend import LinuxBackend

from executor.protocol.intent import Access
from executor.protocol.messages import SandboxType
from executor.sandbox.api import Command, HostInfo
from executor.sandbox.rules import PathKind, PathRule, RuleSet
from executor.spawn.spawner import LaunchFailed, Spawner
from tests.executor_linux.conftest import launcher_of, linux_sandbox_available
from tests.sandbox.wire import context, managed, special
from tests.support.client import WsClient, output_of
from tests.support.daemon import RunningDaemon
from tests.support.enforcement import skip_unless
from tests.support.processes import eventually

pytestmark = pytest.mark.enforcement


@pytest.fixture(scope="module")
def daemon(sandbox_launch: str) -> Iterator[RunningDaemon]:
    """One daemon for this module per launcher, with a test-private state directory."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    state = tempfile.mkdtemp(prefix="executor-state-")
    running = RunningDaemon(env={"EXECUTOR_STATE_DIR": state})
    yield running
    running.stop()
    shutil.rmtree(state, ignore_errors=True)


@pytest.fixture
def ws(daemon: RunningDaemon) -> Iterator[Path]:
    """A workspace outside /tmp (which the workspace profile may write), with an outside dir."""
    root = Path(tempfile.mkdtemp(prefix="executor-ws-", dir="/var/tmp")).resolve()
    (root / "workspace").mkdir()
    (root / "outside").mkdir()
    yield root / "workspace"
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def session(daemon: RunningDaemon) -> Iterator[WsClient]:
    """A connected, initialized client."""
    client = daemon.session()
    yield client
    client.close()


def workspace_sandbox(ws: Path) -> dict[str, Any]:
    """The captured real-client shape (protocol.md §7.12) for ``ws``."""
    return context(
        managed(
            special("root", "read"),
            special("project_roots", "write"),
            special("slash_tmp", "write"),
            special("tmpdir", "write"),
            special("project_roots", "read", ".git", skip=True),
        ),
        cwd=str(ws),
        roots=(str(ws),),
    )


def start(client: WsClient, ws: Path, argv: list[str], **extra: Any) -> dict[str, Any]:
    """Start a sandboxed process in ``ws``."""
    params = {
        "processId": extra.pop("process_id", "p"),
        "argv": argv,
        "cwd": f"file://{ws}",
        "env": {"PATH": "/usr/bin:/bin"},
        "tty": False,
        "sandbox": workspace_sandbox(ws),
        **extra,
    }
    result: dict[str, Any] = client.request("process/start", params)
    return result


def test_real_client_payload_is_enforced_like_the_reference(session: WsClient, ws: Path) -> None:
    """Inside the workspace works, outside fails read-only, and the exit is sandboxDenied."""
    outside = ws.parent / "outside" / "x.txt"
    result = start(session, ws, ["/bin/bash", "-lc", f"echo in > inside.txt; echo out > {outside}"])
    assert result == {"processId": "p", "sandboxType": SandboxType.LINUX_SECCOMP.value}
    events = session.process_events("p")
    exited = next(e["params"] for e in events if e["method"] == "process/exited")
    assert (ws / "inside.txt").read_text() == "in\n"
    assert not outside.exists()
    assert b"Read-only file system" in output_of(events, "stderr")
    assert exited["exitCode"] != 0 and exited["sandboxDenied"] is True
    read = session.request("process/read", {"processId": "p"})
    assert read["sandboxDenied"] is True


def test_the_modules_daemon_follows_the_launcher_parameter(
    daemon: RunningDaemon, session: WsClient, ws: Path, sandbox_launch: str
) -> None:
    """The module's daemon was started for this test's launcher, not kept from the other
    one's tests: PID 1 of its sandbox is that launcher, and it said so at start-up."""
    start(session, ws, ["/bin/sh", "-c", "readlink /proc/1/exe"])
    events = session.process_events("p")
    assert launcher_of(output_of(events, "stdout").decode()) == sandbox_launch
    said_python = "sandboxed commands start through the Python launcher" in daemon.log()
    assert said_python is (sandbox_launch == "python")


def test_successful_sandboxed_command_is_not_denied(session: WsClient, ws: Path) -> None:
    """A sandboxed command that does only allowed things exits 0, sandboxDenied false."""
    start(session, ws, ["/bin/sh", "-c", "echo ok > f && cat f"])
    events = session.process_events("p")
    assert output_of(events, "stdout") == b"ok\n"
    assert events[-2]["params"] == {
        "processId": "p",
        "seq": events[-2]["params"]["seq"],
        "exitCode": 0,
        "sandboxDenied": False,
    }


def test_pty_works_under_the_sandbox(session: WsClient, ws: Path) -> None:
    """A terminal inside the sandbox: controlling tty, 24x80, echo, input. The private /dev
    has no host terminal names; the command's own terminal is its /dev/console."""
    start(session, ws, ["/bin/sh", "-c", "tty; stty size; read x; echo got:$x"], tty=True)
    session.request(
        "process/write",
        {"processId": "p", "chunk": base64.b64encode(b"hello\n").decode(), "writeId": "w"},
    )
    events = session.process_events("p")
    text = output_of(events, "pty").decode()
    assert "/dev/console" in text and "24 80" in text and "got:hello" in text


def test_interrupt_reaches_the_sandboxed_command(session: WsClient, ws: Path) -> None:
    """process/signal interrupt goes through PID 1 of the sandbox to the command: exit 130."""
    start(session, ws, ["/bin/sh", "-c", "echo ready; while :; do sleep 0.05; done"])
    session.notification("process/output")
    session.request("process/signal", {"processId": "p", "signal": "interrupt"})
    assert session.process_events("p")[-2]["params"]["exitCode"] == 130


def test_terminate_kills_the_sandboxed_tree(session: WsClient, ws: Path) -> None:
    """process/terminate ends the command and everything it started inside the sandbox."""
    start(session, ws, ["/bin/sh", "-c", "sleep 300 & sleep 300 & echo started; wait"])
    session.notification("process/output")
    assert session.request("process/terminate", {"processId": "p"}) == {"running": True}
    events = session.process_events("p")
    assert events[-2]["params"]["exitCode"] == 137
    assert events[-1]["method"] == "process/closed"


def test_exit_codes_and_signal_deaths_are_relayed(session: WsClient, ws: Path) -> None:
    """The sandbox's init relays the command's exit code, and 128+N for a signal death."""
    start(session, ws, ["/bin/sh", "-c", "exit 7"], process_id="a")
    start(session, ws, ["/bin/sh", "-c", "kill -TERM $$"], process_id="b")
    assert session.process_events("a")[-2]["params"]["exitCode"] == 7
    assert session.process_events("b")[-2]["params"]["exitCode"] == 143


def test_missing_program_is_an_exec_failure_not_a_denial(session: WsClient, ws: Path) -> None:
    """A sandboxed command that does not exist fails to start (the reference called it denied)."""
    response = session.call(
        "process/start",
        {
            "processId": "m",
            "argv": ["/no/such/tool"],
            "cwd": f"file://{ws}",
            "env": {},
            "tty": False,
            "sandbox": workspace_sandbox(ws),
        },
    )
    assert response["error"] == {
        "code": -32603,
        "message": "No such file or directory (os error 2)",
        "data": {"kind": "spawnNotFound"},
    }


def test_program_hidden_by_the_sandbox_fails_with_the_os_error(session: WsClient, ws: Path) -> None:
    """A program outside the readable tree cannot be executed: -32603, nothing ran."""
    tool = ws.parent / "outside" / "tool.sh"
    tool.write_text("#!/bin/sh\ntouch ran\n")
    tool.chmod(0o755)
    sandbox = context(
        managed(special("minimal", "read"), special("project_roots", "write")),
        cwd=str(ws),
        roots=(str(ws),),
    )
    response = session.call(
        "process/start",
        {
            "processId": "h",
            "argv": [str(tool)],
            "cwd": f"file://{ws}",
            "env": {},
            "tty": False,
            "sandbox": sandbox,
        },
    )
    assert response["error"]["code"] == -32603
    assert "Permission denied (os error 13)" in response["error"]["message"]
    assert response["error"]["data"] == {"kind": "spawnPermissionDenied"}
    assert not (ws / "ran").exists()


def test_missing_protected_names_are_placeholders_only_while_needed(
    session: WsClient, ws: Path
) -> None:
    """`.codex` cannot be created inside; on the host it is an empty directory while a
    command needs it, lingers a moment for the next one, and is then removed."""
    start(session, ws, ["/bin/sh", "-c", "mkdir .codex/x || echo refused; sleep 0.3"])
    events = session.process_events("p")
    assert b"refused" in output_of(events)
    assert not any((ws / ".codex").iterdir()), "nothing was created inside it"
    assert eventually(lambda: not (ws / ".codex").exists() and not (ws / ".agents").exists())


def test_launch_layers_fail_precisely(tmp_path: Path) -> None:
    """A mount target swapped for a symlink fails the start in the `mounts` layer, naming errno."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    real = tmp_path / "real"
    real.mkdir()
    swapped = tmp_path / "swapped"
    swapped.symlink_to(real)
    rules = RuleSet(
        filesystem_restricted=True,
        rules=(
            PathRule("/", Access.READ),
            PathRule(str(swapped), Access.WRITE, kind=PathKind.DIRECTORY),
        ),
    )
    backend = LinuxBackend(state_dir=str(tmp_path / "state"))
    assert backend.probe(HostInfo.current()).available
    plan = backend.prepare(
        rules, Command(executable="/bin/true", argv=("true",), env={}, cwd="/", tty=False)
    )

    async def launch() -> LaunchFailed:
        spawner = Spawner()
        try:
            request = Command(
                executable=plan.executable,
                argv=plan.argv,
                env={},
                cwd="/",
                tty=False,
                setup=plan.setup,
            )
            started = spawner.launch(request, (0, 1, 2)).started
            with pytest.raises(LaunchFailed) as caught:
                await started
            return caught.value
        finally:
            spawner.close()

    failure = asyncio.run(launch())
    assert failure.stage == "mounts"
    assert failure.error == errno.ELOOP
    assert failure.message.startswith("failed to start the command: mounts: ")
    assert failure.start_kind == "sandboxPreparation"  # a layer failed, not the program


def test_fresh_proc_hides_host_processes(session: WsClient, ws: Path) -> None:
    """Inside the sandbox the command is PID 2 and sees only its own tree."""
    start(session, ws, ["/bin/sh", "-c", "echo $$; ls /proc | grep -c '^[0-9]'"])
    out = output_of(session.process_events("p"), "stdout").split()
    assert out[0] == b"2"
    assert int(out[1]) <= 4
    assert os.getpid() > 2


def test_another_sessions_terminal_is_out_of_reach(daemon: RunningDaemon, ws: Path) -> None:
    """Session A runs a `tty:true` shell (its pty lives in the host's /dev/pts); a sandboxed
    command of session B cannot open it, while A's terminal keeps working."""
    other = daemon.session()
    try:
        other.request(
            "process/start",
            {
                "processId": "victim",
                "argv": ["/bin/sh", "-c", "tty; read line; echo got:$line"],
                "cwd": f"file://{ws}",
                "env": {"PATH": "/usr/bin:/bin"},
                "tty": True,
            },
        )
        name = ""
        deadline = time.monotonic() + 10
        while "/dev/pts/" not in name and time.monotonic() < deadline:
            chunk = other.request("process/read", {"processId": "victim", "waitMs": 500})
            name += "".join(base64.b64decode(c["chunk"]).decode() for c in chunk["chunks"])
        tty_name = name.strip().splitlines()[0]
        assert tty_name.startswith("/dev/pts/")
        session = daemon.session()
        try:
            probe = (
                "import os, sys\n"
                "try:\n"
                "    os.close(os.open(sys.argv[1], os.O_RDWR | os.O_NOCTTY)); print('opened')\n"
                "except OSError as exc:\n"
                "    print('refused', exc.errno)\n"
            )
            start(session, ws, ["python3", "-I", "-c", probe, tty_name])
            text = output_of(session.process_events("p")).decode()
            assert text.strip() == f"refused {errno.ENOENT}", text
        finally:
            session.close()
        other.request(
            "process/write",
            {"processId": "victim", "chunk": base64.b64encode(b"hi\n").decode(), "writeId": "w"},
        )
        assert "got:hi" in output_of(other.process_events("victim"), "pty").decode()
    finally:
        other.close()


def test_daemon_log_shows_what_the_command_observed(
    daemon: RunningDaemon, session: WsClient, ws: Path
) -> None:
    """The daemon logs the observed layers of each sandboxed command, not only the plan."""
    start(session, ws, ["/bin/true"], process_id="observed")
    session.process_events("observed")
    assert eventually(lambda: "process observed: observed in the command:" in daemon.log())
    line = next(text for text in daemon.log().splitlines() if "process observed: observed" in text)
    assert "namespaces(mnt:" in line and "seccomp(filter mode" in line
