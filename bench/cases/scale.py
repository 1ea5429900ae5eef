"""Scale: many connections streaming at once, and spawn latency while others stream.

* ``scale.streams.<N>`` (N = 1, 16, 64, 256) — N connections, each its own session running
  ``head -c <256 MiB / N> /dev/zero`` (the same 256 MiB in all, so that only the
  concurrency changes: 1 MiB per stream at 256); all starts are sent together once every
  connection is initialized, and the clock stops when the last ``process/closed`` arrives.
  Metrics:
  ``scale.streams.<N>`` aggregate MB/s (10^6 B of output per second), ``.rss`` the daemon's
  peak resident memory in the window (MiB; the kernel's high-water mark after resetting it,
  or the RSS at the end where that is not permitted), and the window's CPU (client thread
  and daemon, as the throughput cases). Fresh daemon per run, so that the peak is this
  run's.
* ``scale.start.m<M>`` (M = 0, 16, 64) — ``/bin/true`` started 40 times (or for 10 s, at
  least 10 times) one after the other on a connection of its own while M other connections
  each stream
  ``cat /dev/zero`` (time-bounded) as fast as they are read. Metrics: ``.p50`` and ``.p99``
  of ``process/start`` sent → its answer (ms), ``.closed`` the median of start sent →
  ``process/closed`` (ms), ``.streams`` the MB/s the M streams moved meanwhile (a daemon
  that starved them would look faster at spawning), and the CPU of the probe window for
  the daemon and for the client (the probing thread plus the consumer process).

The M streams are read by a separate process (``python -m bench.cases.scale --consume``),
so that the probe's answers never wait behind the client's own work on the streams. Every
stream is terminated (``process/terminate``) when the probe ends; ``timeout`` bounds each
one anyway if the consumer dies.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from pathlib import Path

import psutil

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.client import BenchClient, ProcessWatch
from bench.harness import Case, Metric, Target, raise_fd_limit

MiB = 1024 * 1024
#: Streamed by N connections together, whatever N.
TOTAL_BYTES = 256 * MiB
CONNECTIONS = (1, 16, 64, 256)
LOADS = (0, 16, 64)
PROBES = 40
#: A probe run stops after this long once it has ``_MIN_PROBES`` (the reference under 64
#: streams takes ~0.7 s per probe on 2 cores): the whole set stays within minutes.
_PROBE_SECONDS = 10.0
_MIN_PROBES = 10
#: Connections opened at once (a burst of 256 connects is not what is measured).
_CONNECTING = 32
#: Bounds a load stream whose consumer vanished; the probe never takes this long.
_STREAM_SECONDS = 120
_LOAD_ARGV = ["/usr/bin/timeout", str(_STREAM_SECONDS), "/bin/cat", "/dev/zero"]

_ids = iter(range(10**9))


async def _sessions(url: str, count: int) -> list[BenchClient]:
    """``count`` initialized connections, at most ``_CONNECTING`` connecting at a time."""
    gate = asyncio.Semaphore(_CONNECTING)

    async def one() -> BenchClient:
        async with gate:
            return await BenchClient.connect(url)

    return list(await asyncio.gather(*(one() for _ in range(count))))


def _close(clients: list[BenchClient]) -> None:
    for client in clients:
        client.close()


async def _start_all(
    clients: list[BenchClient], argv: list[str], prefix: str
) -> tuple[list[ProcessWatch], list[str]]:
    """One process per connection, every start sent before any answer is awaited."""
    ids = [f"{prefix}{next(_ids)}" for _ in clients]
    watches = [client.watch(process_id) for client, process_id in zip(clients, ids, strict=True)]
    answers = [
        client.submit("process/start", client.start_params(process_id, argv))
        for client, process_id in zip(clients, ids, strict=True)
    ]
    for answer in await asyncio.gather(*answers):
        if "result" not in answer:
            raise RuntimeError(f"process/start failed: {answer}")
    return watches, ids


# --- N connections streaming ----------------------------------------------------------------


async def streams(target: Target, count: int, total: int = TOTAL_BYTES) -> dict[str, float]:
    """``count`` sessions streaming ``total`` bytes together: aggregate MB/s, CPU, RSS."""
    name = f"scale.streams.{count}"
    size = total // count
    clients = await _sessions(target.url, count)
    try:
        argv = ["/usr/bin/head", "-c", str(size), "/dev/zero"]
        with _PeakRss(_serving_process(target)) as memory, target.cpu() as cpu:
            started = time.perf_counter()
            watches, _ids_started = await _start_all(clients, argv, "n")
            await asyncio.wait_for(asyncio.gather(*(w.closed for w in watches)), 300)
            elapsed = time.perf_counter() - started
    finally:
        _close(clients)
    short = [w.output_bytes for w in watches if w.output_bytes != size]
    if short:
        raise RuntimeError(f"{len(short)} streams ended short of {size} bytes: {short[:4]}")
    result = {name: count * size / elapsed / 1e6, **cpu.metrics(name)}
    if memory.peak_mib is not None:
        result[f"{name}.rss"] = memory.peak_mib
    return result


def _serving_process(target: Target) -> psutil.Process | None:
    """The process that serves the connections (not the node wrapper, not a launcher)."""
    for process in target.daemon_processes():
        with contextlib.suppress(psutil.Error):
            if process.name() not in ("node", "nodejs") and not _is_launcher(process):
                return process
    return None


def _is_launcher(process: psutil.Process) -> bool:
    return any(name in " ".join(process.cmdline()) for name in ("zygote.py", "executor-launcher"))


class _PeakRss:
    """A process's peak resident memory over a ``with`` block, in MiB (None: unknown)."""

    def __init__(self, process: psutil.Process | None) -> None:
        self.process = process
        self.peak_mib: float | None = None
        self._reset = False

    def __enter__(self) -> _PeakRss:
        if self.process is not None:
            try:  # clear_refs 5 resets VmHWM (Linux; needs the right to write there)
                Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")
                self._reset = True
            except OSError:
                self._reset = False
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is None:
            return
        with contextlib.suppress(psutil.Error):
            peak = self.process.memory_info().rss
            if self._reset:
                peak = max(peak, _hwm(self.process.pid) or 0)
            self.peak_mib = peak / MiB


def _hwm(pid: int) -> int | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


# --- spawn latency under streaming load -----------------------------------------------------


async def start_latency(target: Target, load: int, probes: int = PROBES) -> dict[str, float]:
    """``/bin/true`` started ``probes`` times while ``load`` other sessions stream output."""
    name = f"scale.start.m{load}"
    consumer = await _Consumer.start(target.url, load) if load else None
    client = await target.session()
    try:
        await _true_once(client)  # warm-up (ours starts its launcher server on first use)
        if consumer is not None:
            await consumer.mark()
        consumer_cpu = consumer.cpu_seconds() if consumer is not None else 0.0
        with target.cpu() as cpu:
            samples: list[tuple[float, float]] = []
            deadline = time.perf_counter() + _PROBE_SECONDS
            while len(samples) < probes and (
                len(samples) < _MIN_PROBES or time.perf_counter() < deadline
            ):
                samples.append(await _true_once(client))
        if consumer is not None:
            consumer_cpu = consumer.cpu_seconds() - consumer_cpu
            moved, seconds = await consumer.mark()
    finally:
        client.close()
        if consumer is not None:
            await consumer.stop()
    answered = sorted(answer for answer, _closed in samples)
    result = {
        f"{name}.p50": statistics.median(answered) * 1e3,
        f"{name}.p99": answered[min(len(answered) - 1, len(answered) * 99 // 100)] * 1e3,
        f"{name}.closed": statistics.median(closed for _answer, closed in samples) * 1e3,
        f"{name}.probes": len(samples),
        # The p50's CPU: the probing thread and the consumer together are the client.
        f"{name}.p50.cpu.client": cpu.client_ms + consumer_cpu * 1e3,
    }
    if cpu.daemon_ms is not None:
        result[f"{name}.p50.cpu.daemon"] = cpu.daemon_ms
    if consumer is not None:
        result[f"{name}.streams"] = moved / seconds / 1e6
    return result


async def _true_once(client: BenchClient) -> tuple[float, float]:
    """Seconds from sending ``process/start`` to its answer, and to ``process/closed``."""
    process_id = f"t{next(_ids)}"
    watch = client.watch(process_id)
    started = time.perf_counter()
    await client.request("process/start", client.start_params(process_id, ["/bin/true"]))
    answered = time.perf_counter() - started
    await asyncio.wait_for(watch.closed, 30)
    closed = time.perf_counter() - started
    client.unwatch(process_id)
    return answered, closed


class _Consumer:
    """The process reading the load streams (``--consume``), driven line by line.

    It prints ``ready`` once every stream is flowing; each ``mark`` line it is sent is
    answered with the bytes received and the seconds elapsed since the previous one;
    ``stop`` (or the end of its stdin) terminates the streams and ends it.
    """

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self._meter = psutil.Process(process.pid)

    @classmethod
    async def start(cls, url: str, load: int) -> _Consumer:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.cases.scale",
            "--consume",
            url,
            str(load),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=Path(__file__).resolve().parents[2],
        )
        consumer = cls(process)
        try:
            line = await consumer._line(60)
            if line != "ready":
                raise RuntimeError(f"the stream consumer said {line!r}")
        except BaseException:
            await consumer.stop()
            raise
        return consumer

    async def _line(self, timeout: float) -> str:
        assert self.process.stdout is not None
        return (await asyncio.wait_for(self.process.stdout.readline(), timeout)).decode().strip()

    async def mark(self) -> tuple[int, float]:
        """Bytes the streams moved, and seconds elapsed, since the previous mark."""
        assert self.process.stdin is not None
        self.process.stdin.write(b"mark\n")
        moved, seconds = (await self._line(30)).split()
        return int(moved), float(seconds)

    def cpu_seconds(self) -> float:
        """The consumer's CPU so far."""
        times = self._meter.cpu_times()
        return float(times.user + times.system)

    async def stop(self) -> None:
        """Terminate the streams and wait for the consumer to exit (kill it if it hangs)."""
        if self.process.returncode is not None:
            return
        with contextlib.suppress(ConnectionError):
            assert self.process.stdin is not None
            self.process.stdin.write(b"stop\n")
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 60)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


async def consume(url: str, load: int) -> None:
    """``--consume``: stream ``load`` processes, one per session, and count their output."""
    clients = await _sessions(url, load)
    watches: list[ProcessWatch] = []
    try:
        watches, ids = await _start_all(clients, _LOAD_ARGV, "m")
        while not all(w.output_messages for w in watches):
            await asyncio.sleep(0.01)
        print("ready", flush=True)
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        moved, since = sum(w.output_bytes for w in watches), time.perf_counter()
        while (await reader.readline()).strip() == b"mark":
            now, total = time.perf_counter(), sum(w.output_bytes for w in watches)
            print(f"{total - moved} {now - since}", flush=True)
            moved, since = total, now
        for client, process_id in zip(clients, ids, strict=True):
            client.submit("process/terminate", {"processId": process_id})
        await asyncio.wait_for(asyncio.gather(*(w.closed for w in watches)), 30)
    finally:
        _close(clients)


def _streams_case(count: int) -> Case:
    async def run(target: Target) -> dict[str, float]:
        return await streams(target, count)

    name = f"scale.streams.{count}"
    return Case(
        name=name,
        description=f"{count} connections streaming 256 MiB together: MB/s, daemon CPU, RSS",
        metrics=(
            Metric(name=name, unit="MB/s", better="higher", cpu=True),
            Metric(name=f"{name}.rss", unit="MiB", better="lower"),
        ),
        run=run,
        fresh_daemon=True,
    )


def _start_case(load: int) -> Case:
    async def run(target: Target) -> dict[str, float]:
        return await start_latency(target, load)

    name = f"scale.start.m{load}"
    metrics = [
        Metric(name=f"{name}.p50", unit="ms", better="lower", cpu=True),
        Metric(name=f"{name}.p99", unit="ms", better="lower"),
        Metric(name=f"{name}.closed", unit="ms", better="lower"),
        Metric(name=f"{name}.probes", unit="runs"),
    ]
    if load:
        metrics.append(Metric(name=f"{name}.streams", unit="MB/s", better="higher"))
    return Case(
        name=name,
        description=f"/bin/true x{PROBES} (<= 10 s), one at a time, while {load} sessions stream",
        metrics=tuple(metrics),
        run=run,
    )


CASES = [*(_streams_case(n) for n in CONNECTIONS), *(_start_case(m) for m in LOADS)]


def _main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the load-stream consumer of scale.start")
    parser.add_argument("--consume", nargs=2, metavar=("URL", "COUNT"), required=True)
    args = parser.parse_args(argv)
    raise_fd_limit()
    url, count = args.consume
    asyncio.run(consume(url, int(count)))


if __name__ == "__main__":
    _main()
