"""A worker of test_placeholders_concurrent: sandboxed launches that churn placeholders.

``placeholder_launches.py WORKSPACE COUNT``: sets up one sandbox manager (one backend, one
client of the shared placeholder registry, as a daemon has), prints ``ready``, waits for a
line on stdin, then launches a check under the ``workspace`` profile COUNT times, one after
the other, removing the placeholders it no longer uses after each (``flush``: what their
1 s linger does later). Prints a JSON list of what went wrong (empty: nothing).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from executor.process import exit_code_from_status
from executor.process.confinement import SandboxConfinement
from executor.sandbox.command import Command
from executor.sandbox.host import LocalHost, ensure_state_directory
from executor.sandbox.manager import SandboxManager, blocked_from_env, get_plugin_manager
from executor.sandbox.profiles import load_profile
from executor.spawn.spawner import LaunchFailed, Spawner

#: Names the workspace profile protects inside the workspace.
PROTECTED = (".git", ".codex")

#: Exits 0 when every protected name is there and read-only; 3 when one is missing (its
#: mount was lifted: it could be created), 4 when one is writable.
CHECK = (
    " ".join(
        f"mkdir {name} 2>/dev/null && exit 3; mkdir {name}/x 2>/dev/null && exit 4;"
        for name in PROTECTED
    )
    + " exit 0"
)


async def launches(workspace: str, count: int) -> list[str]:
    """``count`` sandboxed launches, one after the other; a line per failure."""
    manager = SandboxManager(get_plugin_manager(blocked_from_env()))
    profile = load_profile("workspace")
    confinement = SandboxConfinement(
        manager, LocalHost(hidden_paths=(ensure_state_directory(),)), limits=profile.limits
    )
    linux = next(backend for backend, _ in manager.candidates if backend.name == "linux")
    placeholders = linux.placeholders  # type: ignore[attr-defined]
    intent = profile.intent(workspace_roots=(workspace,), cwd=workspace, network=None)
    command = Command(
        executable="/bin/sh",
        argv=("sh", "-c", CHECK),
        env={"PATH": "/usr/bin:/bin"},
        cwd=workspace,
        tty=False,
    )
    spawner = Spawner()
    null = os.open(os.devnull, os.O_RDWR)
    failures: list[str] = []
    try:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        for k in range(count):
            confined = await confinement.enforce(
                intent, command, label="test", operator=profile.network_policy(None)
            )
            try:
                launch = spawner.launch(confined.request, (null, null, null))
                try:
                    await launch.started
                except LaunchFailed as exc:
                    failures.append(f"pid {os.getpid()} launch {k}: {exc}")
                    continue
                code = exit_code_from_status(await launch.exited)
                if code != 0:
                    failures.append(f"pid {os.getpid()} launch {k}: the check exited {code}")
            finally:
                if confined.release is not None:
                    confined.release()
                placeholders.flush()
    finally:
        spawner.close()
        os.close(null)
    return failures


if __name__ == "__main__":
    print(json.dumps(asyncio.run(launches(sys.argv[1], int(sys.argv[2])))), flush=True)
