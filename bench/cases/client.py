"""The shipped client (``executor.client``) against both servers: what its users get.

The other cases measure the servers with a client that parses as little as it can
(``bench/client.py``). These drive the daemon the way a user's script does, through
``executor.client`` — every ``process/output`` decoded, every event put in sequence order —
so their numbers are bounded by the client as much as by the server. They say what the
client costs (its CPU per MiB is reported next to the rate) and that it works against the
reference too; they are not a comparison of the servers.
"""

from __future__ import annotations

import statistics
import time

from bench.harness import Case, Metric, Target
from executor.client import connect

SIZE = 16 * 1024 * 1024
MiB = 1024 * 1024


async def stdout16(target: Target) -> dict[str, float]:
    """MB/s of 16 MiB of stdout read through ``Process.output()``, and the client's CPU/MiB."""
    async with connect(target.url, client_name="bench-client") as env:
        with target.cpu() as cpu:
            started = time.perf_counter()
            process = await env.start(["/usr/bin/head", "-c", str(SIZE), "/dev/zero"])
            received = 0
            async for chunk in process.output():
                received += len(chunk.data)
            result = await process.wait()
            elapsed = time.perf_counter() - started
    if received != SIZE or result.exit_code != 0:
        raise RuntimeError(f"received {received} bytes (exit {result.exit_code}), expected {SIZE}")
    return {
        "client.stdout16": SIZE / elapsed / 1e6,
        "client.stdout16.client_ms_per_mib": cpu.client_ms / (SIZE / MiB),
    }


async def run_true(target: Target) -> dict[str, float]:
    """Median ms of ``env.run(["/bin/true"])``: start, output, exit and close, one at a time."""
    async with connect(target.url, client_name="bench-client") as env:
        await env.run(["/bin/true"])  # warm-up: the first launch starts the launcher
        samples = []
        for _ in range(20):
            started = time.perf_counter()
            result = await env.run(["/bin/true"])
            samples.append((time.perf_counter() - started) * 1e3)
            if result.exit_code != 0:
                raise RuntimeError(f"/bin/true exited {result.exit_code}")
    return {"client.run_true": statistics.median(samples)}


CASES = [
    Case(
        name="client.stdout16",
        description="16 MiB of stdout read through executor.client's Process.output()",
        metrics=(
            Metric(name="client.stdout16", unit="MB/s", better="higher"),
            Metric(name="client.stdout16.client_ms_per_mib", unit="ms", better="lower"),
        ),
        run=stdout16,
    ),
    Case(
        name="client.run_true",
        description="/bin/true through executor.client's Environment.run, one at a time",
        metrics=(Metric(name="client.run_true", unit="ms", better="lower"),),
        run=run_true,
    ),
]
