"""environment/info and environment/status (protocol.md §5.1, §5.2) describe the host truly."""

from __future__ import annotations

from pathlib import Path

import pytest

import executor
from executor.environment import describe_host
from executor.protocol.messages import Capabilities
from executor.protocol.paths import to_uri
from tests.support.client import WsClient
from tests.support.daemon import RunningDaemon

FIELD_ORDER = [
    "shell",
    "executorVersion",
    "cwd",
    "userHomeDir",
    "platformOs",
    "temporaryDirectories",
    "tempDir",
    "capabilities",
]
NOT_IMPLEMENTED = [
    "networkProxyReviewDomains",
    "credentialMasking",
    "credentialMaskingCustomProviders",
    "shellSnapshotV2",
    "windowsMxc",
]


def _proxy_mode_here() -> bool:
    from executor.sandbox.manager import SandboxManager, get_plugin_manager
    from executor.sandbox.rules import Feature

    return SandboxManager(get_plugin_manager()).enforces(Feature.NETWORK_PROXY)


def test_status_is_ready(client: WsClient) -> None:
    """environment/status has one answer."""
    assert client.request("environment/status") == {"status": "ready"}


def test_info_describes_the_daemon_process(
    daemon_factory: type[RunningDaemon], tmp_path: Path
) -> None:
    """cwd, home, temp dirs and shell are those of the daemon process, as file: URIs."""
    home = tmp_path / "home dir"
    home.mkdir()
    temp = tmp_path / "tmp-ü"
    temp.mkdir()
    daemon = daemon_factory(
        env={"HOME": str(home), "TMPDIR": str(temp), "SHELL": "/bin/bash"}, cwd=str(tmp_path)
    )
    with daemon.session() as client:
        info = client.request("environment/info")
    assert list(info) == FIELD_ORDER
    assert info["shell"] == {"name": "bash", "path": "/bin/bash"}
    assert info["executorVersion"] == executor.__version__
    assert info["cwd"] == to_uri(str(tmp_path))
    assert info["userHomeDir"] == to_uri(str(home))
    assert "%20" in info["userHomeDir"]
    assert info["platformOs"] == "linux"
    assert info["temporaryDirectories"] == [to_uri(str(temp))]
    assert info["tempDir"] == to_uri(str(temp))
    assert "%C3%BC" in info["tempDir"]


def test_info_without_tmpdir(daemon_factory: type[RunningDaemon]) -> None:
    """Without TMPDIR there are no temporary directories and tempDir is /tmp."""
    daemon = daemon_factory(unset=["TMPDIR"])
    with daemon.session() as client:
        info = client.request("environment/info")
    assert info["temporaryDirectories"] == []
    assert info["tempDir"] == "file:///tmp"


@pytest.mark.parametrize(
    ("shell", "name"),
    [("/bin/sh", "sh"), ("/usr/bin/zsh", "zsh"), ("/opt/custom/weird-shell", "sh")],
    ids=["sh", "zsh", "unknown-name"],
)
def test_shell_name_is_a_stable_short_name(shell: str, name: str) -> None:
    """The shell's name is one of the known short names; its path is kept as given."""
    info = describe_host(Capabilities(), {"SHELL": shell, "HOME": "/root"})
    assert info.shell.name == name
    assert info.shell.path == shell


def test_capabilities_are_explicit_booleans_and_honest(client: WsClient) -> None:
    """Every capability flag is a boolean; features we do not implement are advertised false."""
    capabilities = client.request("environment/info")["capabilities"]
    assert capabilities
    assert all(isinstance(value, bool) for value in capabilities.values())
    for flag in NOT_IMPLEMENTED:
        assert capabilities[flag] is False, flag
    # Advertised exactly where a backend can run commands behind the executor's proxy.
    assert capabilities["networkProxyLaunch"] is _proxy_mode_here()
