"""Idle memory: a fresh daemon after one handshake (and, for ours, its launcher server)."""

from __future__ import annotations

import asyncio

from bench.harness import Case, Metric, Target, settle


async def idle(target: Target) -> dict[str, float]:
    """RSS of a fresh daemon that served one handshake and one ``/bin/true``."""
    client = await target.session()
    try:
        watch = client.watch("warm")
        await client.request("process/start", client.start_params("warm", ["/bin/true"]))
        await asyncio.wait_for(watch.closed, 30)
    finally:
        client.close()
    await settle(0.5)
    roles = target.rss_mib()
    result = {"idle.rss.daemon": roles.get("daemon", 0.0)}
    if "launcher" in roles:
        result["idle.rss.launcher"] = roles["launcher"]
    if "wrapper" in roles:
        result["idle.rss.wrapper"] = roles["wrapper"]
    return result


CASES = [
    Case(
        name="idle.rss",
        description="resident memory of a fresh daemon after one session and one /bin/true",
        metrics=(
            Metric(name="idle.rss.daemon", unit="MiB", better="lower", target=1.0),
            Metric(name="idle.rss.launcher", unit="MiB", better="lower"),
            Metric(name="idle.rss.wrapper", unit="MiB", better="lower"),
        ),
        run=idle,
        fresh_daemon=True,
        needs_local=True,
    ),
]
