"""http/request: many small buffered requests, and one large streamed body."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import Case, Metric, Target

SMALL_REQUESTS = 400
IN_FLIGHT = 16
BIG = 64 * 1024 * 1024
_SERVER = Path(__file__).parent.parent / "httpserver.py"
_ids = iter(range(10**9))


class _Server:
    """The benchmark's HTTP server process (started per case run, stopped by closing stdin)."""

    def __enter__(self) -> str:
        self.process = subprocess.Popen(
            [sys.executable, str(_SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.process.stdout is not None
        port = int(self.process.stdout.readline())
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)


async def small(target: Target) -> dict[str, float]:
    """Buffered GETs of a 1 KiB body, 16 in flight; requests per second."""
    with _Server() as base:
        client = await target.session()
        try:
            params = {"method": "GET", "url": f"{base}/small", "requestId": "small"}
            await client.request("http/request", params)  # warm-up
            started = time.perf_counter()
            pending: set[asyncio.Future[dict[str, Any]]] = set()
            sent = 0
            while sent < SMALL_REQUESTS or pending:
                while sent < SMALL_REQUESTS and len(pending) < IN_FLIGHT:
                    pending.add(client.submit("http/request", params))
                    sent += 1
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for answer in done:
                    if answer.result()["result"]["status"] != 200:
                        raise RuntimeError(f"unexpected answer {answer.result()}")
            elapsed = time.perf_counter() - started
        finally:
            client.close()
    return {"http.small": SMALL_REQUESTS / elapsed}


async def stream64(target: Target) -> dict[str, float]:
    """A 64 MiB body streamed as http/request/bodyDelta notifications; MB/s (10^6 bytes)."""
    with _Server() as base:
        client = await target.session()
        try:
            request_id = f"big{next(_ids)}"
            received = 0
            finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def on_delta(message: dict[str, Any]) -> None:
                nonlocal received
                params = message["params"]
                received += len(base64.b64decode(params["deltaBase64"]))
                if params["done"] and not finished.done():
                    finished.set_result(None)

            client.listeners[request_id] = on_delta
            params = {
                "method": "GET",
                "url": f"{base}/big/{BIG}",
                "requestId": request_id,
                "streamResponse": True,
            }
            started = time.perf_counter()
            await client.request("http/request", params)
            await asyncio.wait_for(finished, 120)
            elapsed = time.perf_counter() - started
            if received != BIG:
                raise RuntimeError(f"received {received} bytes, expected {BIG}")
        finally:
            client.close()
    return {"http.stream64": BIG / elapsed / 1e6}


CASES = [
    Case(
        name="http.small",
        description="400 buffered http/request GETs of 1 KiB, 16 in flight",
        metrics=(Metric(name="http.small", unit="req/s", better="higher"),),
        run=small,
    ),
    Case(
        name="http.stream64",
        description="a 64 MiB body streamed through http/request/bodyDelta",
        metrics=(Metric(name="http.stream64", unit="MB/s", better="higher"),),
        run=stream64,
    ),
]
