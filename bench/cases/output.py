"""Output throughput: 64 MiB of stdout consumed through process/output notifications."""

from __future__ import annotations

import asyncio
import time

from bench.harness import Case, Metric, Target

SIZE = 64 * 1024 * 1024

_ids = iter(range(10**9))


async def stdout64(target: Target) -> dict[str, float]:
    """MB/s (10^6 bytes) from process/start until process/closed of `head -c 64MiB /dev/zero`."""
    client = await target.session()
    try:
        process_id = f"o{next(_ids)}"
        watch = client.watch(process_id)
        argv = ["/usr/bin/head", "-c", str(SIZE), "/dev/zero"]
        with target.cpu() as cpu:
            started = time.perf_counter()
            await client.request("process/start", client.start_params(process_id, argv))
            await asyncio.wait_for(watch.closed, 120)
            elapsed = time.perf_counter() - started
        if watch.output_bytes != SIZE:
            raise RuntimeError(f"received {watch.output_bytes} bytes, expected {SIZE}")
    finally:
        client.close()
    return {
        "output.stdout64": SIZE / elapsed / 1e6,
        "output.stdout64.messages": watch.output_messages,
        **cpu.metrics("output.stdout64"),
    }


CASES = [
    Case(
        name="output.stdout64",
        description="64 MiB of stdout through process/output notifications",
        metrics=(
            Metric(name="output.stdout64", unit="MB/s", better="higher", target=1.5, cpu=True),
            # How many process/output notifications carried it (the reference reads 8 KiB).
            Metric(name="output.stdout64.messages", unit="msgs", better="lower"),
        ),
        run=stdout64,
    ),
]
