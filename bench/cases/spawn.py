"""Spawning: /bin/true start-to-closed latency, and 100 sleepers started at once."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time

from bench.client import BenchClient
from bench.harness import Case, Metric, Target, settle

ISOLATED_RUNS = 20
BACK_TO_BACK_RUNS = 40
BURST = 100

_ids = iter(range(10**9))

#: The burst's floor: the same commands started by a bare Python process, no daemon in between
#: (``subprocess.Popen`` in a loop, then each one's output read to the end). Timed inside that
#: process, so its own start-up is not counted.
_BURST_FLOOR_SCRIPT = f"""
import subprocess, time
started = time.perf_counter()
children = [
    subprocess.Popen(["/bin/sh", "-c", "sleep 1; echo x"], stdout=subprocess.PIPE)
    for _ in range({BURST})
]
assert all(child.communicate()[0] == b"x\\n" for child in children)
print(time.perf_counter() - started)
"""


#: The isolated launch's floor: ``/bin/true`` started by a bare Python process the same way
#: (50 ms idle before each), ``posix_spawn`` then ``waitpid``: what any daemon pays for the
#: command itself on this machine at this moment, with no protocol, no loop and no pipes.
_ISOLATED_FLOOR_SCRIPT = f"""
import os, statistics, time
samples = []
for _ in range({ISOLATED_RUNS}):
    time.sleep(0.05)
    started = time.perf_counter()
    os.waitpid(os.posix_spawn("/bin/true", ["/bin/true"], {{}}), 0)
    samples.append(time.perf_counter() - started)
print(statistics.median(samples))
"""


async def _true_once(client: BenchClient) -> float:
    """Seconds from sending process/start to receiving process/closed."""
    process_id = f"t{next(_ids)}"
    watch = client.watch(process_id)
    started = time.perf_counter()
    await client.request("process/start", client.start_params(process_id, ["/bin/true"]))
    await asyncio.wait_for(watch.closed, 30)
    elapsed = time.perf_counter() - started
    client.unwatch(process_id)
    return elapsed


async def isolated(target: Target) -> dict[str, float]:
    """Median latency of /bin/true runs with 50 ms of idle time between them."""
    client = await target.session()
    try:
        await _true_once(client)  # warm-up (starts ours' launcher server)
        samples = []
        for _ in range(ISOLATED_RUNS):
            await asyncio.sleep(0.05)
            samples.append(await _true_once(client))
    finally:
        client.close()
    median = statistics.median(samples) * 1000
    floor = await _floor(_ISOLATED_FLOOR_SCRIPT) * 1000
    return {
        "spawn.isolated": median,
        "spawn.isolated.floor": floor,
        "spawn.isolated.over_floor": median - floor,
    }


async def back_to_back(target: Target) -> dict[str, float]:
    """Median latency of /bin/true runs started one right after the other closed."""
    client = await target.session()
    try:
        await _true_once(client)
        samples = [await _true_once(client) for _ in range(BACK_TO_BACK_RUNS)]
    finally:
        client.close()
    return {"spawn.back_to_back": statistics.median(samples) * 1000}


async def burst(target: Target) -> dict[str, float]:
    """100 ``sleep 1; echo x`` started in one write; seconds until all closed; RSS after."""
    client = await target.session()
    try:
        await _true_once(client)
        watches = []
        futures = []
        with target.cpu() as cpu:
            started = time.perf_counter()
            for _ in range(BURST):
                process_id = f"s{next(_ids)}"
                watches.append(client.watch(process_id))
                params = client.start_params(process_id, ["/bin/sh", "-c", "sleep 1; echo x"])
                futures.append(client.submit("process/start", params))
            for response in await asyncio.gather(*futures):
                assert "result" in response, response
            await asyncio.wait_for(asyncio.gather(*(w.closed for w in watches)), 60)
            elapsed = time.perf_counter() - started
        assert all(w.output_bytes == 2 for w in watches)
    finally:
        client.close()
    floor = await _floor(_BURST_FLOOR_SCRIPT)
    result = {
        "spawn.burst100": elapsed,
        "spawn.burst100.floor": floor,
        "spawn.burst100.over_floor": (elapsed - floor) * 1000,
        **cpu.metrics("spawn.burst100"),
    }
    if target.daemon is not None:
        await settle(0.3)
        result["spawn.burst100.rss"] = target.rss_mib().get("daemon", 0.0)
    return result


async def _floor(script: str) -> float:
    """Seconds a floor script reports, measured now (after each side's run, so that the
    machine's state of the moment is in both)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=subprocess.PIPE
    )
    out, _ = await process.communicate()
    assert process.returncode == 0, process.returncode
    return float(out)


CASES = [
    Case(
        name="spawn.isolated",
        description=(
            "/bin/true, process/start to process/closed, 50 ms apart (median); the same "
            "started by a bare Python process (the floor)"
        ),
        metrics=(
            Metric(name="spawn.isolated", unit="ms", better="lower", target=0.3),
            Metric(name="spawn.isolated.floor", unit="ms", better="lower"),
            Metric(name="spawn.isolated.over_floor", unit="ms", better="lower"),
        ),
        run=isolated,
    ),
    Case(
        name="spawn.back_to_back",
        description="/bin/true, process/start to process/closed, one after another (median)",
        metrics=(Metric(name="spawn.back_to_back", unit="ms", better="lower", target=1.0),),
        run=back_to_back,
    ),
    Case(
        name="spawn.burst100",
        description=(
            "100 x `sleep 1; echo x` started at once, until all closed; the same without a "
            "daemon (the floor); daemon RSS after"
        ),
        metrics=(
            Metric(name="spawn.burst100", unit="s", better="lower", target=1.0, cpu=True),
            Metric(name="spawn.burst100.floor", unit="s", better="lower"),
            Metric(name="spawn.burst100.over_floor", unit="ms", better="lower", absolute=30),
            Metric(name="spawn.burst100.rss", unit="MiB", better="lower", target=1.0),
        ),
        run=burst,
        fresh_daemon=True,
    ),
]
