"""A sandbox that cannot be enforced is refused before anything runs (over the wire)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.wire import context, managed, special
from tests.support.client import WsClient
from tests.support.daemon import RunningDaemon

PREFIX = "sandbox intent cannot be enforced on this executor"
WORKSPACE = managed(special("root", "read"), special("project_roots", "write"))


def start(client: WsClient, marker: Path, **params: Any) -> dict[str, Any]:
    """A process/start that would create ``marker`` if it ran."""
    request = {
        "processId": "p",
        "argv": ["/bin/sh", "-c", f"touch {marker}"],
        "cwd": f"file://{marker.parent}",
        "env": {"PATH": "/usr/bin:/bin"},
        "tty": False,
        **params,
    }
    return client.call("process/start", request)


REFUSED = [
    ("managed-network", {"enforceManagedNetwork": True}, True, -32602, PREFIX),
    (
        "managed-network-unsandboxed",
        {"enforceManagedNetwork": True},
        False,
        -32602,
        "enforceManagedNetwork requires a sandbox",
    ),
    (
        "network-proxy-incomplete",
        {"networkProxy": {"proxy": {"enabled": True}}},
        True,
        -32602,
        "missing field `enableSocks5` at `networkProxy.proxy`",
    ),
    ("mxc", {}, "mxc", -32602, "native MXC is unavailable on this executor"),
    ("bad-profile", {}, "bad", -32602, "at `sandbox.permissions.type`"),
]


@pytest.mark.parametrize(
    ("extra", "sandboxed", "code", "message"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_unenforceable_requests_are_refused_and_nothing_runs(
    client: WsClient,
    workspace: Path,
    extra: dict[str, Any],
    sandboxed: object,
    code: int,
    message: str,
) -> None:
    """The refusal is -32602 naming what is missing, and the command never ran."""
    marker = workspace / "ran"
    if sandboxed is True:
        extra = {
            **extra,
            "sandbox": context(WORKSPACE, cwd=str(workspace), roots=(str(workspace),)),
        }
    elif sandboxed == "mxc":
        extra = {
            **extra,
            "sandbox": context(WORKSPACE, cwd=str(workspace), windowsSandboxLevel="mxc"),
        }
    elif sandboxed == "bad":
        extra = {**extra, "sandbox": context({"type": "sometimes"})}
    response = start(client, marker, **extra)
    assert response["error"]["code"] == code
    assert message in response["error"]["message"]
    # A sandbox it cannot provide is the reference's `sandboxUnavailable` (v0.171); a
    # request that does not parse carries no kind.
    unavailable = message == PREFIX or sandboxed == "mxc"
    expected_data = {"kind": "sandboxUnavailable"} if unavailable else None
    assert response["error"].get("data") == expected_data
    assert not marker.exists()
    assert (
        client.call("process/read", {"processId": "p"})["error"]["message"]
        == "unknown process id p"
    )
    # The counterpart: the same command, asking for nothing unenforceable, runs under the
    # same id (the refusal reserved nothing) and leaves the marker its refusal did not.
    _, events = client.run("p", ["/bin/sh", "-c", f"touch {marker}"], cwd=f"file://{workspace}")
    assert events[-1]["method"] == "process/closed"
    assert marker.exists()


def test_disabled_runs_unsandboxed_and_says_so(client: WsClient, workspace: Path) -> None:
    """`disabled` is an explicit request for no sandbox: it runs, reported as `none`."""
    marker = workspace / "ran"
    result = client.request(
        "process/start",
        {
            "processId": "d",
            "argv": ["/bin/sh", "-c", f"touch {marker}"],
            "cwd": f"file://{workspace}",
            "env": {"PATH": "/usr/bin:/bin"},
            "tty": False,
            "sandbox": context({"type": "disabled"}),
        },
    )
    assert result["sandboxType"] == "none"
    events = client.process_events("d")
    assert events[-2]["params"]["exitCode"] == 0 and events[-2]["params"]["sandboxDenied"] is False
    assert marker.exists()


@pytest.fixture(scope="module")
def no_namespaces_daemon() -> Any:
    """A daemon whose Linux backend may not use namespaces (as in a locked-down container)."""
    daemon = RunningDaemon(env={"EXECUTOR_LINUX_NAMESPACES": "off"})
    yield daemon
    daemon.stop()


def test_without_namespaces_carve_outs_are_refused(
    no_namespaces_daemon: RunningDaemon, workspace: Path
) -> None:
    """A workspace (read-only .git inside a writable root) needs mounts: refused, not weakened."""
    marker = workspace / "ran"
    with no_namespaces_daemon.session() as client:
        response = start(
            client, marker, sandbox=context(WORKSPACE, cwd=str(workspace), roots=(str(workspace),))
        )
    assert response["error"]["code"] == -32602
    assert response["error"]["message"].startswith(PREFIX)
    assert response["error"]["data"] == {"kind": "sandboxUnavailable"}
    assert "mount namespace" in response["error"]["message"]
    assert not marker.exists()


def test_legacy_landlock_flag_is_honoured_or_refused(client: WsClient, workspace: Path) -> None:
    """`useLegacyLandlock`: read-only runs on Landlock alone; a workspace is refused."""
    marker = workspace / "ran"
    refused = start(
        client,
        marker,
        sandbox=context(
            WORKSPACE, cwd=str(workspace), roots=(str(workspace),), useLegacyLandlock=True
        ),
    )
    assert "useLegacyLandlock" in refused["error"]["message"] and not marker.exists()
    result = client.request(
        "process/start",
        {
            "processId": "l",
            "argv": ["/bin/sh", "-c", f"touch {marker}"],
            "cwd": f"file://{workspace}",
            "env": {"PATH": "/usr/bin:/bin"},
            "tty": False,
            "sandbox": context(managed(special("root", "read")), useLegacyLandlock=True),
        },
    )
    assert result["sandboxType"] == "linuxSeccomp"
    exited = client.process_events("l")[-2]["params"]
    assert exited["exitCode"] != 0 and exited["sandboxDenied"] is True
    assert not marker.exists()
