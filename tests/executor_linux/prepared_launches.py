"""Launches a while apart through one launcher server, for ``test_prepared_launch.py``.

Run in a private mount namespace (``unshare --mount --propagation private``): between two
launches it mounts a tmpfs, which only that namespace ever sees. Prints one JSON object:
for each launch, how long before its request the launch's outer child started (clock ticks;
a launch prepared ahead started well before), what the command printed and its exit code.

    prepared_launches.py WORK_DIR            three launches, a tmpfs mounted before the third
    prepared_launches.py WORK_DIR --forge    two launches of FORGE (the second prepared)
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

from executor_linux.backend import LinuxBackend

from executor.protocol.intent import Access
from executor.sandbox import Command, NetworkMode, PathRule, RuleSet
from executor.spawn.spawner import Spawner

TICKS = os.sysconf("SC_CLK_TCK")


def _started_ticks(pid: int) -> int:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat``, field 22)."""
    with open(f"/proc/{pid}/stat") as handle:
        stat = handle.read()
    return int(stat[stat.rfind(")") + 2 :].split()[19])


def _now_ticks() -> int:
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * TICKS)


async def _launch(
    spawner: Spawner, backend: LinuxBackend, rules: RuleSet, work: str, script: str
) -> dict[str, Any]:
    command = Command(executable="/bin/sh", argv=("sh", "-c", script), env={}, cwd=work, tty=False)
    plan = backend.prepare(rules, command)
    request = Command(
        executable=plan.executable, argv=plan.argv, env={}, cwd=work, tty=False, setup=plan.setup
    )
    read_end, write_end = os.pipe()
    # The command waits for a line on stdin, so that its outer child is still there when its
    # start time is read (the exit is reported early: it may be gone a moment after).
    go_read, go_write = os.pipe()
    asked = _now_ticks()
    try:
        launched = spawner.launch(request, (go_read, write_end, write_end))
        os.close(write_end)
        write_end = -1
        outer, _supervisor = await asyncio.wait_for(launched.started, 30)
        ahead = asked - _started_ticks(outer)
        os.write(go_write, b"go\n")
        status = await asyncio.wait_for(launched.exited, 30)
        output = b""
        while chunk := os.read(read_end, 65536):
            output += chunk
        code = os.waitstatus_to_exitcode(status) if status >= 0 else status
        return {"ahead": ahead, "output": output.decode(), "code": code}
    finally:
        if write_end >= 0:
            os.close(write_end)
        os.close(read_end)
        os.close(go_read)
        os.close(go_write)
        if plan.release is not None:
            plan.release()


#: A command that tries to hand its outer child a forged exit pipe: a datagram to the abstract
#: name PID 1 uses (sandbox.c), carrying the write end of a pipe it then writes "exit 0"
#: into, before it exits 7 itself. Its outer child must report 7. (With the network off the
#: seccomp filter refuses the datagram socket itself: "refused 1".)
FORGE = """read go
python3 - <<'PY'
import os, socket, struct
read_end, write_end = os.pipe()
try:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", write_end))],
                 0, "\\0executor-sandbox-outer-child")
    print("sent")
except OSError as error:
    print("refused", error.errno)
os.write(write_end, struct.pack("i", 0))
PY
exit 7"""


def _workspace(work: str) -> tuple[RuleSet, LinuxBackend]:
    """The rules of a workspace at ``work`` with the network off, and a backend keeping its
    state there."""
    rules = RuleSet(
        filesystem_restricted=True,
        rules=(PathRule("/", Access.READ), PathRule(work, Access.WRITE)),
        network=NetworkMode.RESTRICTED,
    )
    return rules, LinuxBackend(state_dir=os.path.join(work, "state"))


async def forge(work: str) -> None:
    rules, backend = _workspace(work)
    spawner = Spawner()
    try:
        results = [await _launch(spawner, backend, rules, work, FORGE)]
        await asyncio.sleep(0.3)
        results.append(await _launch(spawner, backend, rules, work, FORGE))
    finally:
        spawner.close()
    print(json.dumps(results))


async def main(work: str) -> None:
    rules, backend = _workspace(work)
    spawner = Spawner()
    shown = os.path.join(work, "shown")
    os.mkdir(shown)
    check = f"read go; cat {shown}/seen 2>/dev/null || echo unseen"
    try:
        results = [await _launch(spawner, backend, rules, work, check)]
        await asyncio.sleep(0.3)
        results.append(await _launch(spawner, backend, rules, work, check))
        await asyncio.sleep(0.3)
        # The host's mounts change while a launch is prepared: it must not be used.
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", shown], check=True)
        with open(os.path.join(shown, "seen"), "w") as handle:
            handle.write("mounted\n")
        results.append(await _launch(spawner, backend, rules, work, check))
    finally:
        spawner.close()
        subprocess.run(["umount", shown], check=False)
    print(json.dumps(results))


if __name__ == "__main__":
    asyncio.run(forge(sys.argv[1]) if sys.argv[2:] == ["--forge"] else main(sys.argv[1]))
