"""Request throughput: pipelined ``environment/info`` and ``environment/status``, one connection."""

from __future__ import annotations

import time

from bench.harness import Case, Metric, Target

REQUESTS = 10_000
WARMUP = 1_000


async def _throughput(target: Target, method: str, metric: str) -> dict[str, float]:
    client = await target.session()
    try:
        await client.pipeline(method, None, WARMUP)
        with target.cpu() as cpu:
            started = time.perf_counter()
            await client.pipeline(method, None, REQUESTS)
            elapsed = time.perf_counter() - started
    finally:
        client.close()
    return {metric: REQUESTS / elapsed, **cpu.metrics(metric)}


async def info(target: Target) -> dict[str, float]:
    """10,000 pipelined ``environment/info`` requests; answers per second."""
    return await _throughput(target, "environment/info", "rpc.info")


async def status(target: Target) -> dict[str, float]:
    """10,000 pipelined ``environment/status`` requests; answers per second."""
    return await _throughput(target, "environment/status", "rpc.status")


CASES = [
    Case(
        name="rpc.info",
        description=f"{REQUESTS:,} pipelined environment/info on one connection",
        metrics=(Metric(name="rpc.info", unit="req/s", better="higher", target=1.5, cpu=True),),
        run=info,
    ),
    Case(
        name="rpc.status",
        description=f"{REQUESTS:,} pipelined environment/status on one connection",
        metrics=(Metric(name="rpc.status", unit="req/s", better="higher", target=1.5, cpu=True),),
        run=status,
    ),
]
