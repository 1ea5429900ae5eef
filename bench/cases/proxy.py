"""The sandbox proxy (executor.netproxy): download throughput through a CONNECT tunnel and
tunnel setup latency, each against a direct connection to the same local server.

No daemon is involved (the reference has no such proxy: its side is skipped). Three
processes: a data server (``sendfile`` from a 64 MiB file: next to no CPU), the proxy (one
``ProxyServer`` on its own event loop, as in the daemon; ``--splice off`` relays through
asyncio transports instead), and this one, the client: blocking sockets in a thread,
``recv_into`` a 1 MiB buffer. The client is not the bottleneck: its CPU per MiB (reported)
is a fraction of the proxy's, and the same client reads a direct connection faster.

    .venv/bin/python bench/run.py --only proxy
    .venv/bin/python -m bench.cases.proxy --trials 5 [--splice off]   # standalone
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import psutil

from bench.harness import Case, Metric, Target

DOWNLOAD: Final = 256 * 1024 * 1024
DOWNLOADS: Final = 3  # per run, each through the proxy and direct, interleaved
SETUPS: Final = 200
_FILE_SIZE: Final = 64 * 1024 * 1024
_REPO: Final = Path(__file__).resolve().parent.parent.parent
MiB: Final = 1024 * 1024
#: Linux discards TCP data read with MSG_TRUNC instead of copying it out: the client costs
#: next to nothing, so what is measured is the server side of the path.
_DISCARD: Final = getattr(socket, "MSG_TRUNC", 0) if sys.platform == "linux" else 0


# The helper processes


def _data_server() -> None:
    """``D`` + 8-byte size: that many bytes, then close; ``E``: echo until EOF."""
    with tempfile.TemporaryFile() as data:
        data.write(b"x" * _FILE_SIZE)
        data.flush()
        listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        print(listener.getsockname()[1], flush=True)

        def serve(conn: socket.socket) -> None:
            with conn, contextlib.suppress(OSError):  # a client that left
                command = conn.recv(1)
                if command == b"D":
                    size = int.from_bytes(conn.recv(8), "big")
                    while size > 0:
                        size -= conn.sendfile(data, 0, min(size, _FILE_SIZE))
                elif command == b"E":
                    while chunk := conn.recv(65536):
                        conn.sendall(chunk)

        threading.Thread(target=_until_stdin_closes, daemon=True).start()
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()


def _until_stdin_closes() -> None:
    sys.stdin.read()
    os._exit(0)


def _proxy(use_splice: bool) -> None:
    sys.path.insert(0, str(_REPO))
    from executor.netproxy import ProxyLimits, ProxyServer
    from executor.sandbox.network import NetworkAccess, NetworkPolicy

    async def main() -> None:
        listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        policy = NetworkPolicy(mode=NetworkAccess.PROXY, allow=("localhost",))
        proxy = ProxyServer(
            policy, on_decision=lambda _d: None, limits=ProxyLimits(splice=use_splice)
        )
        await proxy.start(listener)
        print(listener.getsockname()[1], flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await proxy.close()

    asyncio.run(main())


@contextlib.contextmanager
def _helper(*args: str) -> Iterator[tuple[int, psutil.Process]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.cases.proxy", *args],
        cwd=_REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        yield int(process.stdout.readline()), psutil.Process(process.pid)
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# The client (blocking, in a thread of this process)


def _tunnel(proxy_port: int, data_port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy_port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(f"CONNECT localhost:{data_port} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError("the proxy closed the connection")
        head += chunk
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"the proxy answered {head[:60]!r}")
    return sock


def _open(data_port: int, proxy_port: int | None) -> socket.socket:
    if proxy_port is None:
        sock = socket.create_connection(("127.0.0.1", data_port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    return _tunnel(proxy_port, data_port)


def _download(data_port: int, proxy_port: int | None) -> tuple[float, float]:
    """(MB/s, client CPU ms per MiB) of one download."""
    buffer = bytearray(MiB)
    with _open(data_port, proxy_port) as sock:
        started = time.perf_counter()
        cpu = resource.getrusage(resource.RUSAGE_THREAD)
        sock.sendall(b"D" + DOWNLOAD.to_bytes(8, "big"))
        received = 0
        while count := sock.recv_into(buffer, 0, _DISCARD):
            received += count
        elapsed = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_THREAD)
    if received != DOWNLOAD:
        raise RuntimeError(f"received {received} bytes, expected {DOWNLOAD}")
    used = after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime
    return DOWNLOAD / elapsed / 1e6, used * 1e3 / (DOWNLOAD / MiB)


def _setup(data_port: int, proxy_port: int | None) -> float:
    """Seconds from connect to the first byte echoed through the new connection."""
    started = time.perf_counter()
    with _open(data_port, proxy_port) as sock:
        sock.sendall(b"Ex")
        if sock.recv(1) != b"x":
            raise RuntimeError("no echo")
        elapsed = time.perf_counter() - started
    return elapsed


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def measure(use_splice: bool = True) -> dict[str, float]:
    """One run: interleaved downloads and setups, through the proxy and direct."""
    with (
        _helper("data") as (data_port, _data),
        _helper("proxy", str(use_splice)) as (
            proxy_port,
            proxy,
        ),
    ):
        _setup(data_port, proxy_port)  # warm-up: the resolver thread, code paths
        proxied: list[float] = []
        direct: list[float] = []
        ratios: list[float] = []
        proxy_cpu: list[float] = []
        client_cpu: list[float] = []
        for _ in range(DOWNLOADS):
            before = _cpu(proxy)
            through, client = _download(data_port, proxy_port)
            proxy_cpu.append((_cpu(proxy) - before) * 1e3 / (DOWNLOAD / MiB))
            client_cpu.append(client)
            straight, _client = _download(data_port, None)
            proxied.append(through)
            direct.append(straight)
            ratios.append(through / straight)
        setup: list[float] = []
        setup_direct: list[float] = []
        for _ in range(SETUPS):
            setup.append(_setup(data_port, proxy_port))
            setup_direct.append(_setup(data_port, None))
    tunnel_ms = statistics.median(setup) * 1e3
    direct_ms = statistics.median(setup_direct) * 1e3
    return {
        "proxy.download": statistics.median(proxied),
        "proxy.download.direct": statistics.median(direct),
        "proxy.download.ratio": statistics.median(ratios),
        "proxy.cpu": statistics.median(proxy_cpu),
        "proxy.client_cpu": statistics.median(client_cpu),
        "proxy.setup": tunnel_ms,
        "proxy.setup.direct": direct_ms,
        "proxy.setup.ratio": tunnel_ms / direct_ms,
    }


async def proxy_case(target: Target) -> dict[str, float]:
    """The proxy's numbers (ours only: the reference has no such proxy)."""
    if target.name != "ours":
        return {}
    return await asyncio.get_running_loop().run_in_executor(None, measure)


CASES = [
    Case(
        name="proxy",
        description="sandbox proxy: CONNECT download MB/s and tunnel setup vs direct",
        metrics=(
            Metric(name="proxy.download", unit="MB/s", better="higher"),
            Metric(name="proxy.download.direct", unit="MB/s", better="higher"),
            Metric(name="proxy.download.ratio", unit="x", better="higher", absolute=0.5),
            Metric(name="proxy.cpu", unit="ms/MiB", better="lower"),
            Metric(name="proxy.client_cpu", unit="ms/MiB", better="lower"),
            Metric(name="proxy.setup", unit="ms", better="lower"),
            Metric(name="proxy.setup.direct", unit="ms", better="lower"),
            Metric(name="proxy.setup.ratio", unit="x", better="lower"),
        ),
        run=proxy_case,
    ),
]


def main() -> None:
    """Helper processes (``data``, ``proxy SPLICE``), or standalone runs."""
    if len(sys.argv) > 1 and sys.argv[1] == "data":
        _data_server()
        return
    if len(sys.argv) > 1 and sys.argv[1] == "proxy":
        _proxy(sys.argv[2] == "True")
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--splice", choices=("on", "off"), default="on")
    args = parser.parse_args()
    runs = [measure(args.splice == "on") for _ in range(args.trials)]
    for name in runs[0]:
        values = [run[name] for run in runs]
        print(f"{name:24} {statistics.median(values):10.3f}   {[round(v, 3) for v in values]}")


if __name__ == "__main__":
    main()
