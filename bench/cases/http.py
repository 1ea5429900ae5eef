"""http/request: many small buffered requests, and one large streamed body."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.client import DECODED_BYTES, BenchClient, decoded_length
from bench.harness import Case, Metric, Target

SMALL_REQUESTS = 400
IN_FLIGHT = 16
BIG = 64 * 1024 * 1024
_SERVER = Path(__file__).parent.parent / "httpserver.py"
_ids = iter(range(10**9))


class _Server:
    """The benchmark's HTTP server process (started per case run, stopped by closing stdin)."""

    def __enter__(self) -> _Server:
        self.process = subprocess.Popen(
            [sys.executable, str(_SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.process.stdout is not None
        port = int(self.process.stdout.readline())
        self.url = f"http://127.0.0.1:{port}"
        return self

    @property
    def pid(self) -> int:
        """The server's pid (its CPU is reported next to the client's and the daemon's)."""
        return self.process.pid

    def __exit__(self, *exc: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)


async def small(target: Target) -> dict[str, float]:
    """Buffered GETs of a 1 KiB body, 16 in flight; requests per second."""
    with _Server() as server:
        client = await target.session()
        try:
            params = {"method": "GET", "url": f"{server.url}/small", "requestId": "small"}
            await client.request("http/request", params)  # warm-up
            with target.cpu(server.pid) as cpu:
                started = time.perf_counter()
                await _in_flight(client, params)
                elapsed = time.perf_counter() - started
        finally:
            client.close()
    return {"http.small": SMALL_REQUESTS / elapsed, **cpu.metrics("http.small")}


async def _in_flight(client: BenchClient, params: dict[str, Any]) -> None:
    """``SMALL_REQUESTS`` requests, each answer releasing the next (``IN_FLIGHT`` at a time)."""
    finished = asyncio.get_running_loop().create_future()
    sent = answered = 0

    def on_answer(answer: asyncio.Future[dict[str, Any]]) -> None:
        nonlocal answered
        response = answer.result()
        if "result" not in response or response["result"]["status"] != 200:
            if not finished.done():
                finished.set_exception(RuntimeError(f"unexpected answer {response}"))
            return
        answered += 1
        if answered == SMALL_REQUESTS and not finished.done():
            finished.set_result(None)
        send()

    def send() -> None:
        nonlocal sent
        if sent < SMALL_REQUESTS:
            sent += 1
            client.submit("http/request", params).add_done_callback(on_answer)

    for _ in range(IN_FLIGHT):
        send()
    await finished


async def stream64(target: Target) -> dict[str, float]:
    """A 64 MiB body streamed as http/request/bodyDelta notifications; MB/s (10^6 bytes)."""
    with _Server() as server:
        client = await target.session()
        try:
            request_id = f"big{next(_ids)}"
            received = 0
            finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def on_delta(message: dict[str, Any]) -> None:
                nonlocal received
                params = message["params"]
                size = message.get(DECODED_BYTES)
                received += decoded_length(params["deltaBase64"].encode()) if size is None else size
                if params["done"] and not finished.done():
                    finished.set_result(None)

            client.listeners[request_id] = on_delta
            params = {
                "method": "GET",
                "url": f"{server.url}/big/{BIG}",
                "requestId": request_id,
                "streamResponse": True,
            }
            with target.cpu(server.pid) as cpu:
                started = time.perf_counter()
                await client.request("http/request", params)
                await asyncio.wait_for(finished, 120)
                elapsed = time.perf_counter() - started
            if received != BIG:
                raise RuntimeError(f"received {received} bytes, expected {BIG}")
        finally:
            client.close()
    return {"http.stream64": BIG / elapsed / 1e6, **cpu.metrics("http.stream64")}


CASES = [
    Case(
        name="http.small",
        description="400 buffered http/request GETs of 1 KiB, 16 in flight",
        metrics=(Metric(name="http.small", unit="req/s", better="higher", target=1.0, cpu=True),),
        run=small,
    ),
    Case(
        name="http.stream64",
        description="a 64 MiB body streamed through http/request/bodyDelta",
        metrics=(Metric(name="http.stream64", unit="MB/s", better="higher", cpu=True),),
        run=stream64,
    ),
]
