"""The audit trail (docs/operating.md, "Audit trail"): one structured line per process start and
exit, file change, HTTP request and refusal, with who asked — and never a secret.

A real daemon logs as JSON (``--log-format json``); the tests read its stderr back. Secrets are
markers put where a careless log would pick them up (the child's environment, the daemon's,
header values, bodies, the query, file contents) and looked for in the whole log.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from executor import audit
from executor.client import ServerError, SyncEnvironment
from executor.errors import InvalidParams
from executor.logs import configure_logging
from tests.http.servers import HttpServer, serve
from tests.sandbox.wire import context, managed, special
from tests.support.client import RpcError
from tests.support.daemon import RunningDaemon
from tests.support.enforcement import skip_unless
from tests.support.processes import eventually

#: Secrets: none of them may ever appear in the log.
CHILD_ENV_SECRET = "child-env-marker-5b1f0c"
DAEMON_ENV_SECRET = "daemon-env-marker-8e2d47"
HEADER_SECRET = "header-marker-1c9a33"
ENV_HEADER_SECRET = "env-header-marker-77aa10"
QUERY_SECRET = "query-marker-0d4e6b"
BODY_SECRET = "body-marker-93f2c8"
CONTENT_SECRET = "content-marker-4a7e55"
SECRETS = (
    CHILD_ENV_SECRET,
    DAEMON_ENV_SECRET,
    HEADER_SECRET,
    ENV_HEADER_SECRET,
    QUERY_SECRET,
    BODY_SECRET,
    CONTENT_SECRET,
)
PEER = re.compile(r"127\.0\.0\.1:\d+")


@pytest.fixture(scope="module")
def daemon() -> Iterator[RunningDaemon]:
    """A JSON-logging daemon that may reach loopback, with a secret in its environment."""
    running = RunningDaemon(
        ["--log-format", "json", "--http-allow-private", "--http-header-env-var", "AUDIT_TOKEN"],
        env={"AUDIT_DAEMON_MARKER": DAEMON_ENV_SECRET, "AUDIT_TOKEN": ENV_HEADER_SECRET},
    )
    yield running
    running.stop()
    log = running.log()
    assert not [secret for secret in SECRETS if secret in log], log


@pytest.fixture
def client(daemon: RunningDaemon) -> Iterator[tuple[SyncEnvironment, str]]:
    """A session of the shipped client, with its id."""
    with daemon.connect("audit") as connection:
        yield connection, connection.session_id


def audit_records(daemon: RunningDaemon) -> list[dict[str, Any]]:
    """Every ``executor.audit`` record so far."""
    records = []
    for line in daemon.log().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if entry["logger"] == "executor.audit":
                records.append(entry)
    return records


def wait_for(daemon: RunningDaemon, match: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The first audit record ``match`` accepts (it may still be on its way to the log)."""

    def first() -> dict[str, Any] | None:
        return next((r for r in audit_records(daemon) if match(r)), None)

    eventually(lambda: first() is not None)
    found = first()
    assert found is not None, audit_records(daemon)[-5:]
    return found


def assert_no_secret(daemon: RunningDaemon) -> None:
    log = daemon.log()
    assert not [secret for secret in SECRETS if secret in log]


def test_a_process_start_and_exit(
    daemon: RunningDaemon, client: tuple[SyncEnvironment, str]
) -> None:
    """Start: who, what, where, under what; exit: code, verdict, duration. No environment."""
    connection, session = client
    connection.run(
        ["/bin/sh", "-c", 'test -n "$AUDIT_DAEMON_MARKER" && exit 3'],
        process_id="audited",
        cwd="/tmp",
        env={"CHILD_SECRET": CHILD_ENV_SECRET, "PATH": "/usr/bin:/bin"},
        env_policy={
            "inherit": "all",
            "ignoreDefaultExcludes": True,
            "exclude": [],
            "set": {},
            "includeOnly": [],
        },
    )
    start = wait_for(daemon, lambda r: r["event"] == "process.start" and r["session"] == session)
    assert start["message"] == "process.start"
    assert start["processId"] == "audited"
    assert start["argv"] == ["/bin/sh", "-c", 'test -n "$AUDIT_DAEMON_MARKER" && exit 3']
    assert start["cwd"] == "/tmp"
    assert PEER.fullmatch(start["peer"])
    assert start["sandboxType"] == "none"
    assert start["pid"] > 0 and start["durationMs"] >= 0
    exited = wait_for(daemon, lambda r: r["event"] == "process.exit" and r["session"] == session)
    # Exit 3 proves the child did inherit the daemon's secret that the log must not show.
    assert (exited["processId"], exited["exitCode"], exited["sandboxDenied"]) == (
        "audited",
        3,
        False,
    )
    assert exited["peer"] == start["peer"] and exited["pid"] == start["pid"]
    assert "signal" not in exited and exited["durationMs"] >= 0
    assert_no_secret(daemon)


def test_a_signal_death_is_named(
    daemon: RunningDaemon, client: tuple[SyncEnvironment, str]
) -> None:
    connection, session = client
    connection.run(["/bin/sh", "-c", "kill -TERM $$"], process_id="killed")
    exited = wait_for(daemon, lambda r: r["event"] == "process.exit" and r["session"] == session)
    assert (exited["exitCode"], exited["signal"]) == (143, "SIGTERM")


def test_argv_is_bounded(daemon: RunningDaemon, client: tuple[SyncEnvironment, str]) -> None:
    """A 3 KiB argv logs its first KiB, marked as cut, with its real length."""
    connection, session = client
    long = "x" * 3000
    connection.run(["/bin/echo", "a", long, "b"], process_id="long")
    start = wait_for(daemon, lambda r: r["event"] == "process.start" and r["session"] == session)
    assert start["argv"][:2] == ["/bin/echo", "a"]
    assert len(start["argv"]) == 3 and start["argv"][2].endswith("…")
    assert len("".join(start["argv"]).encode()) <= 1024 + len("…".encode())
    assert start["argvTruncated"] == len("/bin/echo") + 1 + 3000 + 1


def test_file_changes(
    daemon: RunningDaemon, client: tuple[SyncEnvironment, str], tmp_path: Path
) -> None:
    """writeFile, createDirectory, copy, open for writing and remove: one line each, no
    contents; reads and block writes leave none."""
    connection, session = client
    target, copied, opened = tmp_path / "f", tmp_path / "g", tmp_path / "h"
    data = base64.b64encode(CONTENT_SECRET.encode()).decode()
    connection.request("fs/writeFile", {"path": f"file://{target}", "dataBase64": data})
    connection.request("fs/readFile", {"path": f"file://{target}"})
    connection.request("fs/createDirectory", {"path": f"file://{tmp_path}/d"})
    connection.request(
        "fs/copy",
        {
            "sourcePath": f"file://{target}",
            "destinationPath": f"file://{copied}",
            "recursive": False,
        },
    )
    connection.request("fs/open", {"handleId": "w", "path": f"file://{opened}", "mode": "replace"})
    for offset in (0, 5):
        connection.request("fs/writeBlock", {"handleId": "w", "offset": offset, "chunk": data})
    connection.request("fs/close", {"handleId": "w"})
    connection.request("fs/remove", {"path": f"file://{target}"})

    def mine(event: str) -> Callable[[dict[str, Any]], bool]:
        return lambda r: r["event"] == event and r.get("session") == session

    written = wait_for(daemon, mine("fs.writeFile"))
    assert (written["path"], written["bytes"], written["sandbox"]) == (
        str(target),
        len(CONTENT_SECRET),
        False,
    )
    assert PEER.fullmatch(written["peer"]) and written["durationMs"] >= 0
    assert wait_for(daemon, mine("fs.createDirectory"))["path"] == f"{tmp_path}/d"
    copy = wait_for(daemon, mine("fs.copy"))
    assert (copy["source"], copy["destination"]) == (str(target), str(copied))
    open_line = wait_for(daemon, mine("fs.open"))
    assert (open_line["path"], open_line["mode"], open_line["handleId"]) == (
        str(opened),
        "replace",
        "w",
    )
    removed = wait_for(daemon, mine("fs.remove"))
    assert (removed["path"], removed["recursive"], removed["force"]) == (str(target), True, True)
    events = [r["event"] for r in audit_records(daemon) if r.get("session") == session]
    assert events.count("fs.open") == 1
    assert not [e for e in events if e in ("fs.readFile", "fs.writeBlock", "fs.close")]
    assert_no_secret(daemon)


@pytest.fixture
def server() -> Iterator[HttpServer]:
    with serve() as running:
        yield running


def test_http_requests(
    daemon: RunningDaemon, client: tuple[SyncEnvironment, str], server: HttpServer
) -> None:
    """Method, host, port, path, status, sizes, duration; no query, header value or body."""
    connection, session = client
    headers = [
        {"name": "X-Secret", "value": HEADER_SECRET},
        {"name": "X-Token", "value": "Bearer ", "valueEnvVar": "AUDIT_TOKEN"},
    ]
    body = base64.b64encode(BODY_SECRET.encode()).decode()
    url = server.url(f"/echo/x?token={QUERY_SECRET}")
    answer = connection.request(
        "http/request",
        {"method": "POST", "url": url, "requestId": "r", "headers": headers, "bodyBase64": body},
    )
    assert answer["status"] == 200
    assert ["x-secret", HEADER_SECRET] in json.loads(base64.b64decode(answer["bodyBase64"]))[
        "headers"
    ]
    line = wait_for(daemon, lambda r: r["event"] == "http.request" and r["session"] == session)
    assert line["method"] == "POST" and line["scheme"] == "http"
    assert (line["host"], line["port"], line["path"]) == ("127.0.0.1", server.port, "/echo/x")
    assert line["status"] == 200 and line["requestBytes"] == len(BODY_SECRET)
    assert line["responseBytes"] == len(base64.b64decode(answer["bodyBase64"]))
    assert PEER.fullmatch(line["peer"]) and line["durationMs"] >= 0
    assert_no_secret(daemon)


def test_a_streamed_request_is_logged_when_its_body_ends(
    daemon: RunningDaemon, client: tuple[SyncEnvironment, str], server: HttpServer
) -> None:
    connection, session = client
    params = {"method": "GET", "url": server.url("/bytes/100000"), "requestId": "s"}
    connection.request("http/request", {**params, "streamResponse": True})
    line = wait_for(daemon, lambda r: r["event"] == "http.request" and r["session"] == session)
    assert (line["stream"], line["status"], line["responseBytes"]) == (True, 200, 100000)
    assert "error" not in line


def test_refusals(daemon: RunningDaemon, client: tuple[SyncEnvironment, str]) -> None:
    """A refused request: who, which method, the error; a refused start also says what."""
    connection, session = client
    with pytest.raises(ServerError):
        connection.request("process/read", {"processId": "nope"})
    refused = wait_for(
        daemon, lambda r: r["event"] == "refused" and r.get("method") == "process/read"
    )
    assert (refused["session"], refused["code"]) == (session, -32600)
    assert refused["error"] == "unknown process id nope" and PEER.fullmatch(refused["peer"])
    assert refused["message"] == "refused"
    with pytest.raises(ServerError):
        connection.start(
            ["/no/such/program", "--flag"],
            process_id="missing",
            cwd="/tmp",
            env={"CHILD_SECRET": CHILD_ENV_SECRET},
        )
    start = wait_for(daemon, lambda r: r["event"] == "refused" and r.get("processId") == "missing")
    assert start["operation"] == "process.start" and start["method"] == "process/start"
    assert start["argv"] == ["/no/such/program", "--flag"] and start["session"] == session
    assert_no_secret(daemon)


def test_refusals_before_the_handshake_name_the_peer(daemon: RunningDaemon) -> None:
    with daemon.client() as connection, pytest.raises(RpcError):
        connection.request("environment/info", None)
    refused = wait_for(
        daemon, lambda r: r["event"] == "refused" and r.get("method") == "environment/info"
    )
    assert "session" not in refused and PEER.fullmatch(refused["peer"])


def linux_sandbox_available() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    from executor_linux.probe import host_support

    support = host_support()
    return bool(support.landlock_abi and support.namespaces and support.seccomp)


@pytest.mark.enforcement
def test_a_sandbox_denial_names_the_enforcement(
    daemon: RunningDaemon, client: tuple[SyncEnvironment, str], tmp_path: Path
) -> None:
    """A read-only sandbox: the start says what enforces it; the denied write's exit says
    ``sandboxDenied`` and why. The same write without a sandbox works."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    connection, session = client
    marker = tmp_path / "written"
    read_only = context(managed(special("root", "read")))
    connection.run(
        ["/bin/sh", "-c", f"echo x > {marker}"],
        process_id="denied",
        cwd=str(tmp_path),
        sandbox=read_only,
    )
    assert not marker.exists()
    start = wait_for(daemon, lambda r: r["event"] == "process.start" and r["session"] == session)
    assert start["sandboxType"] != "none" and start["enforcement"]
    exited = wait_for(daemon, lambda r: r["event"] == "process.exit" and r["session"] == session)
    assert exited["sandboxDenied"] is True and exited["exitCode"] != 0
    assert exited["denial"] and exited["enforcement"]
    connection.run(["/bin/sh", "-c", f"echo x > {marker}"], cwd=str(tmp_path))
    assert marker.exists()


def test_text_format_has_key_value_pairs(tmp_path: Path) -> None:
    """Without ``--log-format json``, the fields follow the message as ``key=value``."""
    daemon = RunningDaemon()
    try:
        with daemon.connect() as connection:
            connection.run(["/bin/echo", "two words"], process_id="plain", cwd=str(tmp_path))
    finally:
        daemon.stop()
    line = next(
        text for text in daemon.log().splitlines() if "executor.audit: process.start " in text
    )
    assert " event=process.start " in line and " processId=plain " in line
    assert ' argv=["/bin/echo","two words"] ' in line and f" cwd={tmp_path} " in line
    assert re.search(r" peer=127\.0\.0\.1:\d+ ", line) and " sandboxType=none" in line
    exited = next(text for text in daemon.log().splitlines() if "process.exit " in text)
    assert " exitCode=0 " in exited and " sandboxDenied=false " in exited


# --- the helpers and the rendering, without a daemon -------------------------------------------


def test_bounded_texts() -> None:
    assert audit.bounded("short") == "short"
    cut = audit.bounded("é" * 600)  # 1200 bytes
    assert cut.startswith("é" * 512) and cut.endswith("…[+176 bytes]")
    assert audit.bounded_argv(["a", "b"]) == {"argv": ["a", "b"]}
    assert audit.bounded_argv(["ab", "cdef"], limit=4) == {
        "argv": ["ab", "cd…"],
        "argvTruncated": 6,
    }
    assert audit.bounded_argv(["\ud800x"], limit=2)["argv"] == ["…"]  # a lone surrogate counts


def test_exit_fields() -> None:
    assert audit.exit_fields(3 << 8) == {"exitCode": 3}
    assert audit.exit_fields(9) == {"exitCode": 137, "signal": "SIGKILL"}


def _render(fmt: str, fields: dict[str, Any]) -> str:
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    configure_logging("info", fmt)
    try:
        handler = root.handlers[0]
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(stream)
        logging.getLogger("executor.audit").info("refused", extra={"audit": fields})
    finally:
        root.handlers[:], root.level = handlers, level
    return stream.getvalue()


def test_rendering_keeps_one_line_and_the_record_keys() -> None:
    """A peer's text cannot start a line of its own nor replace the record's own keys."""
    fields = {"event": "refused", "error": "a\nINFO forged", "message": "x", "ok": True, "n": 2}
    text = _render("text", fields)
    assert text.count("\n") == 1
    assert text.rstrip("\n").endswith(
        ': refused event=refused error="a\\nINFO forged" message=x ok=true n=2'
    )
    (entry,) = [json.loads(line) for line in _render("json", fields).splitlines()]
    assert entry["message"] == "refused" and entry["error"] == "a\nINFO forged"
    assert entry["ok"] is True and entry["n"] == 2


def test_an_operation_describes_itself_only_for_a_line_or_a_refusal() -> None:
    """``describe`` is not called while the audit log is off, unless the work is refused."""
    calls: list[str] = []

    def describe() -> dict[str, Any]:
        calls.append("described")
        return {"path": "/x", "mode": "r"}

    level = audit.log.level
    audit.log.setLevel(logging.WARNING)
    try:
        with audit.operation("fs.open", None, describe) as fields:
            fields["handle"] = 1
    finally:
        audit.log.setLevel(level)
    assert calls == []
    with pytest.raises(InvalidParams) as raised, audit.operation("fs.open", None, describe):
        raise InvalidParams("refused")
    assert calls == ["described"]
    assert raised.value.audit is not None
    assert {k: raised.value.audit[k] for k in ("operation", "path", "mode")} == {
        "operation": "fs.open",
        "path": "/x",
        "mode": "r",
    }
