"""process/start (protocol.md §5.5): every field, every documented error, limits, bad input."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.client import WsClient, output_of
from tests.support.daemon import RunningDaemon

BASE: dict[str, Any] = {"cwd": "file:///tmp", "env": {"PATH": "/usr/bin:/bin"}, "tty": False}


def _start(client: WsClient, process_id: str, argv: list[str], **extra: Any) -> dict[str, Any]:
    return client.call("process/start", {**BASE, "processId": process_id, "argv": argv, **extra})


def _assert_unknown(client: WsClient, process_id: str) -> None:
    response = client.call("process/read", {"processId": process_id})
    assert response["error"] == {"code": -32600, "message": f"unknown process id {process_id}"}


def test_result_and_cwd(client: WsClient, workspace: Path) -> None:
    """The result echoes the id with sandboxType none; the child runs in cwd."""
    result, events = client.run("pwd", ["/bin/pwd"], cwd=workspace.as_uri())
    assert result == {"processId": "pwd", "sandboxType": "none"}
    assert output_of(events) == f"{workspace}\n".encode()


@pytest.mark.parametrize(
    "cwd",
    ["FILE:///tmp", "file:/tmp", "file://localhost/tmp", "file:///var/../tmp/./"],
    ids=["scheme-case", "single-slash", "localhost", "dot-segments"],
)
def test_cwd_uri_spellings(client: WsClient, cwd: str) -> None:
    """Lenient file: URI spellings all name /tmp."""
    _result, events = client.run(f"cwd-{cwd}", ["/bin/pwd"], cwd=cwd)
    assert output_of(events) == b"/tmp\n"


def test_empty_process_id_is_allowed(client: WsClient) -> None:
    """Any string is a process id, including the empty one."""
    result, events = client.run("", ["/bin/echo", "empty"])
    assert result["processId"] == ""
    assert output_of(events) == b"empty\n"


def test_arg0_overrides_argv0_but_not_the_program(client: WsClient) -> None:
    """arg0 is what the child sees as argv[0]; argv[0] still locates the executable."""
    _result, events = client.run("arg0", ["/bin/sh", "-c", "echo $0"], arg0="custom-name")
    assert output_of(events) == b"custom-name\n"


def test_metadata_with_uuid_thread_id_is_accepted(client: WsClient) -> None:
    """metadata.threadId must be a UUID; toolCallId is free text."""
    metadata = {"threadId": str(uuid.uuid4()), "toolCallId": "call_1"}
    result, _events = client.run("meta", ["/bin/true"], metadata=metadata)
    assert result["sandboxType"] == "none"
    response = _start(client, "meta2", ["/bin/true"], metadata={"threadId": "not-a-uuid"})
    assert response["error"]["code"] == -32602
    _assert_unknown(client, "meta2")


def test_optional_fields_may_be_null(client: WsClient) -> None:
    """Optional fields given as null take their defaults."""
    result, events = client.run(
        "nulls",
        ["/bin/echo", "ok"],
        pipeStdin=None,
        arg0=None,
        envPolicy=None,
        sandbox=None,
        managedNetwork=None,
        networkProxy=None,
        shellSnapshot=None,
        metadata=None,
    )
    assert result["sandboxType"] == "none"
    assert output_of(events) == b"ok\n"


def test_enforce_managed_network_without_sandbox_is_refused(client: WsClient) -> None:
    """enforceManagedNetwork: true without a sandbox is -32602 and nothing runs."""
    response = _start(client, "mn", ["/bin/true"], enforceManagedNetwork=True)
    assert response["error"]["code"] == -32602
    _assert_unknown(client, "mn")


def test_duplicate_id_is_refused_while_in_table(client: WsClient) -> None:
    """A live or exited-but-retained id cannot be started again."""
    client.request("process/start", {**BASE, "processId": "dup", "argv": ["/bin/sleep", "5"]})
    response = _start(client, "dup", ["/bin/true"])
    assert response["error"] == {"code": -32600, "message": "process dup already exists"}
    client.request("process/terminate", {"processId": "dup"})
    client.process_events("dup")
    response = _start(client, "dup", ["/bin/true"])
    assert response["error"] == {"code": -32600, "message": "process dup already exists"}


_NOT_FOUND = "No such file or directory (os error 2)"
_DENIED = "Permission denied (os error 13)"


@pytest.mark.parametrize(
    ("argv", "cwd", "code", "message", "kind"),
    [
        ([], "file:///tmp", -32602, "argv must not be empty", None),
        (["/no/such/program"], "file:///tmp", -32603, _NOT_FOUND, "spawnNotFound"),
        (["no-such-program-anywhere"], "file:///tmp", -32603, _NOT_FOUND, "spawnNotFound"),
        (["/bin/true"], "file:///no/such/dir", -32603, _NOT_FOUND, "spawnNotFound"),
        (
            ["/bin/true"],
            "file:///etc/passwd",
            -32603,
            "Not a directory (os error 20)",
            "spawnFailed",
        ),
        (["/etc/passwd"], "file:///tmp", -32603, _DENIED, "spawnPermissionDenied"),
        (["/tmp"], "file:///tmp", -32603, _DENIED, "spawnPermissionDenied"),
    ],
    ids=[
        "empty-argv",
        "missing-program",
        "missing-bare-name",
        "missing-cwd",
        "cwd-is-file",
        "not-executable",
        "program-is-directory",
    ],
)
def test_start_errors_leave_nothing_behind(
    client: WsClient, argv: list[str], cwd: str, code: int, message: str, kind: str | None
) -> None:
    """A failed start answers the documented error, with the reference's (v0.171) kind of a
    spawn failure as ``data`` (none for a malformed request); the id is unknown and reusable
    at once."""
    response = _start(client, "fail", argv, cwd=cwd)
    expected: dict[str, object] = {"code": code, "message": message}
    if kind is not None:
        expected["data"] = {"kind": kind}
    assert response["error"] == expected
    _assert_unknown(client, "fail")
    _result, events = client.run("fail", ["/bin/echo", "reused"])
    assert output_of(events) == b"reused\n"


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"cwd": "file://otherhost/tmp"}, "is not valid on this exec-server host"),
        ({"cwd": "http://example.com/tmp"}, "unsupported path URI scheme"),
        ({"cwd": "/tmp"}, "relative URL without a base"),
        ({"cwd": "file:///tmp?x=1"}, "query"),
        ({"cwd": "file:///tmp#f"}, "fragment"),
        ({"cwd": "file:///C:/Windows"}, "is not valid on this exec-server host"),
        ({"cwd": "file:///tmp/%00x"}, "NUL"),
        ({"argv": ["/bin/echo", "a\u0000b"]}, "NUL"),
        ({"argv": "/bin/true"}, "invalid type"),
        ({"argv": ["/bin/true", 3]}, "invalid type"),
        ({"env": {"A": 1}}, "invalid type"),
        ({"env": {"A": None}}, "invalid type"),
        ({"env": ["A=1"]}, "invalid type"),
        ({"env": {"A=B": "1"}}, "invalid environment variable name"),
        ({"env": {"A": "x\u0000"}}, "NUL"),
        ({"tty": "yes"}, "invalid type"),
        ({"tty": None}, "invalid type"),
        ({"pipeStdin": 1}, "invalid type"),
        ({"envPolicy": {"inherit": "all"}}, "missing field"),
        ({"processId": None}, "invalid type"),
    ],
    ids=[
        "remote-host-cwd",
        "http-cwd",
        "native-path-cwd",
        "query-cwd",
        "fragment-cwd",
        "windows-drive-cwd",
        "nul-in-cwd",
        "nul-in-argv",
        "argv-not-list",
        "argv-item-not-string",
        "env-value-int",
        "env-value-null",
        "env-not-map",
        "env-name-with-equals",
        "nul-in-env-value",
        "tty-not-bool",
        "tty-null",
        "pipe-stdin-not-bool",
        "env-policy-incomplete",
        "process-id-null",
    ],
)
def test_bad_params_are_invalid_params_and_spawn_nothing(
    client: WsClient, params: dict[str, Any], fragment: str
) -> None:
    """Undecodable or unusable params are -32602 with a clear message; nothing is started."""
    request = {**BASE, "processId": "bad", "argv": ["/bin/true"], **params}
    response = client.call("process/start", request)
    assert response["error"]["code"] == -32602
    assert fragment in response["error"]["message"]
    _assert_unknown(client, "bad")


def test_missing_required_fields(client: WsClient) -> None:
    """Each required field is named when missing."""
    full = {**BASE, "processId": "m", "argv": ["/bin/true"]}
    for field in ("processId", "argv", "cwd", "env", "tty"):
        params = {k: v for k, v in full.items() if k != field}
        error = client.call("process/start", params)["error"]
        assert error == {"code": -32602, "message": f"missing field `{field}`"}


def test_failures_do_not_touch_other_processes(client: WsClient) -> None:
    """A burst of failing starts leaves a running process untouched."""
    client.request(
        "process/start",
        {
            **BASE,
            "processId": "bystander",
            "argv": ["/bin/sh", "-c", "read x; echo $x"],
            "pipeStdin": True,
        },
    )
    for index in range(20):
        assert "error" in _start(client, f"f{index}", [f"/no/such/{index}"])
    assert client.request(
        "process/write", {"processId": "bystander", "chunk": "b2sK", "writeId": "w"}
    ) == {"status": "accepted"}
    events = client.process_events("bystander")
    assert output_of(events) == b"ok\n"


def test_per_session_limit(daemon_factory: type[RunningDaemon]) -> None:
    """--max-processes-per-session refuses more live processes clearly; closing frees a slot."""
    daemon = daemon_factory(["--max-processes-per-session", "2"])
    with daemon.session() as client:
        for name in ("a", "b"):
            client.request(
                "process/start", {**BASE, "processId": name, "argv": ["/bin/sleep", "30"]}
            )
        error = _start(client, "c", ["/bin/true"])["error"]
        assert error["code"] == -32600
        assert "2 processes" in error["message"]
        _assert_unknown(client, "c")
        with daemon.session() as other:  # the limit is per session
            other.run("x", ["/bin/true"])
        client.request("process/terminate", {"processId": "a"})
        client.process_events("a")
        _result, events = client.run("c", ["/bin/echo", "fits"])
        assert output_of(events) == b"fits\n"
        client.request("process/terminate", {"processId": "b"})


def test_daemon_wide_limit(daemon_factory: type[RunningDaemon]) -> None:
    """--max-processes counts live processes across every session."""
    daemon = daemon_factory(["--max-processes", "2"])
    with daemon.session() as one, daemon.session() as two:
        one.request("process/start", {**BASE, "processId": "a", "argv": ["/bin/sleep", "30"]})
        two.request("process/start", {**BASE, "processId": "b", "argv": ["/bin/sleep", "30"]})
        error = _start(two, "c", ["/bin/true"])["error"]
        assert error["code"] == -32600
        assert "2 processes" in error["message"]
        one.request("process/terminate", {"processId": "a"})
        one.process_events("a")
        two.run("c", ["/bin/true"])
        two.request("process/terminate", {"processId": "b"})


def test_command_size_limit(daemon_factory: type[RunningDaemon]) -> None:
    """--max-command-bytes bounds argv plus environment."""
    daemon = daemon_factory(["--max-command-bytes", "200"])
    with daemon.session() as client:
        error = _start(client, "big", ["/bin/echo", "x" * 300])["error"]
        assert error["code"] == -32602
        assert "limit of 200" in error["message"]
        error = _start(client, "bigenv", ["/bin/true"], env={"X": "y" * 300})["error"]
        assert "limit of 200" in error["message"]
        client.run("small", ["/bin/echo", "x" * 50])


def test_arg0_with_nul_is_refused_before_spawning(client: WsClient) -> None:
    """A NUL byte in arg0 is -32602 up front, not a command that "started" and exited 127."""
    response = _start(client, "nul0", ["/bin/true"], arg0="a\u0000b")
    assert response["error"]["code"] == -32602
    assert "arg0" in response["error"]["message"]
    _assert_unknown(client, "nul0")
