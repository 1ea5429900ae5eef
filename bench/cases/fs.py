"""Filesystem throughput and memory: one 64 MiB file, whole and streamed.

Cases (each ``run(target)`` returns ``{metric: value}``; see ``bench/harness.py``):

* ``fs.readFile`` — ``fs/readFile`` of a 64 MiB file of random bytes, one request; metric
  ``fs.readFile.64MiB`` in MB/s (10^6 file bytes per second of wall time between sending
  the request and holding the response, whose base64 the client cuts out without parsing
  and compares in place with the file's, see ``Expected``). One untimed read first warms
  the page cache, the daemon and the client's receive buffer.
* ``fs.readBlock`` — the same file through ``fs/open`` + ``fs/readBlock`` in 1 MiB blocks,
  one request at a time (as a client streaming a file does), then ``fs/close``; metrics
  ``fs.readBlock.64MiB`` in MB/s (each block checked in place, see ``Expected``) and
  ``fs.readBlock.rss_growth``: the daemon's peak resident memory during the stream minus
  its resident memory just before, in MiB (target < 16 MiB).
  The peak is the kernel's high-water mark (``VmHWM`` after resetting it through
  ``/proc/<pid>/clear_refs``) where permitted, else the maximum of samples taken every 2 ms.
  It needs the daemon's pid, so it is skipped for a reference given only by URL, and it
  runs on a fresh daemon so that no earlier case has raised the heap already.

The file is written into the run's ``target.workdir`` and read by the daemon under
test from there (the daemon runs on this host). Only ``bench.harness`` and the case's own
code are used: no test helpers.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import psutil

from bench.client import BASE64, BenchClient, RpcFailure, decoded_length
from bench.harness import Case, Metric, Target

MiB: Final = 1024 * 1024
FILE_BYTES: Final = 64 * MiB
BLOCK_BYTES: Final = MiB
_MB: Final = 1_000_000
_FILE_NAME: Final = "fs-bench-64MiB.bin"
_SAMPLE_SECONDS: Final = 0.002
_NOT_THE_DAEMON: Final = frozenset({"sh", "dash", "bash", "node", "nodejs"})


def _uri(path: Path) -> str:
    return "file://" + quote(str(path))


def bench_file(workdir: Path) -> Path:
    """The 64 MiB random file in ``workdir`` (written on first use)."""
    path = workdir / _FILE_NAME
    if not path.exists():
        with path.open("wb") as handle:
            for _ in range(FILE_BYTES // MiB):
                handle.write(os.urandom(MiB))
    return path


class Expected:
    """The base64 the daemon must answer with, compared in place in the client's buffer.

    A ``BenchClient.base64_hook``: the answer's base64 is neither copied nor decoded, it is
    compared byte for byte with the encoding of what the file holds (standard padded base64
    has one encoding per input, so equal text is equal content). ``text`` is what the next
    answer must carry.
    """

    def __init__(self) -> None:
        self.text = b""

    def __call__(self, buffer: bytearray, start: int, end: int) -> bool:
        return end - start == len(self.text) and buffer.startswith(self.text, start)

    def check(self, response: dict[str, Any], field: str) -> int:
        """The bytes an answer carried; an error if they are not the expected ones."""
        if "error" in response:
            raise RpcFailure(response["error"])
        matched = response.get(BASE64)
        if matched is None:  # small enough to have been parsed as a whole
            matched = str(response["result"][field]).encode() == self.text
        if not matched:
            raise AssertionError(f"{field} does not hold the file's bytes")
        return decoded_length(self.text)


async def read_file(target: Target) -> dict[str, float]:
    """``fs/readFile`` of 64 MiB: MB/s, answer verified."""
    path = bench_file(target.workdir)
    expected = Expected()
    expected.text = base64.b64encode(path.read_bytes())
    client = await target.session()
    client.base64_hook = expected
    try:
        await client.request("fs/readFile", {"path": _uri(path)})  # warm-up, untimed
        with target.cpu() as cpu:
            started = time.perf_counter()
            response = await client.submit("fs/readFile", {"path": _uri(path)})
            elapsed = time.perf_counter() - started
    finally:
        client.close()
    size = expected.check(response, "dataBase64")
    return {"fs.readFile.64MiB": size / _MB / elapsed, **cpu.metrics("fs.readFile.64MiB")}


async def read_blocks(target: Target) -> dict[str, float]:
    """64 MiB through ``fs/readBlock`` in 1 MiB blocks: MB/s and daemon peak RSS growth."""
    path = bench_file(target.workdir)
    data = path.read_bytes()
    blocks = [
        base64.b64encode(data[at : at + BLOCK_BYTES]) for at in range(0, len(data), BLOCK_BYTES)
    ]
    del data
    process = daemon_process(target)
    client = await target.session()
    expected = Expected()
    client.base64_hook = expected
    try:
        await client.request("fs/open", {"handleId": "bench", "path": _uri(path)})
        await client.request("fs/readBlock", {"handleId": "bench", "offset": 0, "len": BLOCK_BYTES})
        async with PeakRss(process) as memory:
            with target.cpu() as cpu:
                started = time.perf_counter()
                total = await _stream(client, "bench", blocks, expected)
                elapsed = time.perf_counter() - started
        await client.request("fs/close", {"handleId": "bench"})
    finally:
        client.close()
    if total != FILE_BYTES:
        raise AssertionError(f"fs/readBlock returned {total} bytes, not {FILE_BYTES}")
    result = {"fs.readBlock.64MiB": total / _MB / elapsed, **cpu.metrics("fs.readBlock.64MiB")}
    if memory.growth_mib is not None:
        result["fs.readBlock.rss_growth"] = memory.growth_mib
    return result


async def _stream(
    client: BenchClient, handle_id: str, blocks: list[bytes], expected: Expected
) -> int:
    """Read block after block until EOF, each checked in place; the bytes read."""
    offset = index = 0
    while True:
        expected.text = blocks[index] if index < len(blocks) else b""
        index += 1
        params = {"handleId": handle_id, "offset": offset, "len": BLOCK_BYTES}
        response = await client.submit("fs/readBlock", params)
        offset += expected.check(response, "chunk")
        if response["result"]["eof"]:
            return offset


# --- daemon memory ----------------------------------------------------------------------------


def daemon_process(target: Target) -> psutil.Process | None:
    """The process that serves requests: not the shell, node wrapper or launcher in front."""
    if target.daemon is None:
        return None
    root = psutil.Process(target.daemon.pid)
    for process in (root, *root.children(recursive=True)):
        with contextlib.suppress(psutil.Error):
            cmdline = " ".join(process.cmdline())
            if process.name() in _NOT_THE_DAEMON or "zygote.py" in cmdline:
                continue
            if "serve --listen" in cmdline or "exec-server" in cmdline:
                return process
    return None


class PeakRss:
    """Peak resident memory of a process over an ``async with`` block, as growth in MiB."""

    def __init__(self, process: psutil.Process | None) -> None:
        self.process = process
        self.growth_mib: float | None = None
        self._baseline = 0
        self._peak = 0
        self._hwm_reset = False
        self._sampler: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PeakRss:
        if self.process is not None:
            self._baseline = self._peak = self.process.memory_info().rss
            self._hwm_reset = _reset_hwm(self.process.pid)
            self._sampler = asyncio.get_running_loop().create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.process is None or self._sampler is None:
            return
        self._sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._sampler
        peak = max(self._peak, self.process.memory_info().rss)
        if self._hwm_reset:
            peak = max(peak, _read_hwm(self.process.pid) or 0)
        self.growth_mib = max(peak - self._baseline, 0) / MiB

    async def _sample(self) -> None:
        assert self.process is not None
        while True:
            with contextlib.suppress(psutil.Error):
                self._peak = max(self._peak, self.process.memory_info().rss)
            await asyncio.sleep(_SAMPLE_SECONDS)


def _reset_hwm(pid: int) -> bool:
    """Reset the kernel's peak-RSS mark of ``pid`` (``clear_refs`` value 5)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _read_hwm(pid: int) -> int | None:
    for line in _status_lines(pid):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def _status_lines(pid: int) -> Iterator[str]:
    try:
        yield from Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return


CASES = [
    Case(
        name="fs.readFile",
        description="fs/readFile of a 64 MiB file (one response, decoded and verified)",
        # The target: at least the reference's throughput.
        metrics=(
            Metric(name="fs.readFile.64MiB", unit="MB/s", better="higher", target=2.0, cpu=True),
        ),
        run=read_file,
    ),
    Case(
        name="fs.readBlock",
        description="64 MiB through fs/readBlock in 1 MiB blocks, one at a time",
        metrics=(
            Metric(name="fs.readBlock.64MiB", unit="MB/s", better="higher", cpu=True),
            Metric(name="fs.readBlock.rss_growth", unit="MiB", better="lower", absolute=16.0),
        ),
        run=read_blocks,
        fresh_daemon=True,
        needs_local=True,
    ),
]
