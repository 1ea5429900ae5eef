"""Windows: every sandboxed launch is refused before spawn, with the reference's prefix."""

from __future__ import annotations

import pytest
from executor_windows.plugin import WindowsBackend

from executor.errors import SandboxUnavailable
from executor.protocol.intent import NetworkMode
from executor.sandbox.api import Command, HostInfo
from executor.sandbox.manager import SandboxManager, get_plugin_manager
from executor.sandbox.rules import RuleSet

WINDOWS = HostInfo(platform="win32", release="10", machine="AMD64", uid=0)
COMMAND = Command(
    executable="C:/Windows/System32/cmd.exe", argv=("cmd",), env={}, cwd="C:/", tty=False
)


def test_unavailable_off_windows() -> None:
    """On other hosts the backend says why it does not apply."""
    status = WindowsBackend().probe(
        HostInfo(platform="linux", release="6", machine="x86_64", uid=0)
    )
    assert not status.available
    assert status.reason == "requires Windows (this host is linux)"


@pytest.mark.parametrize(
    "rules",
    [
        RuleSet(filesystem_restricted=True),
        RuleSet(filesystem_restricted=False, network=NetworkMode.ENABLED),
    ],
    ids=["restricted", "needs-nothing"],
)
def test_every_sandbox_is_refused_on_windows(rules: RuleSet) -> None:
    """Selected on Windows, it refuses whatever the rules need: nothing runs unsandboxed."""
    manager = SandboxManager(get_plugin_manager(blocked=("linux", "macos", "testbackend")), WINDOWS)

    def launch() -> None:
        manager.prepare(manager.select(rules), rules, COMMAND)

    with pytest.raises(SandboxUnavailable) as caught:
        launch()
    assert caught.value.message.startswith("sandbox intent cannot be enforced on this executor: ")
    assert "not supported on Windows" in caught.value.message
