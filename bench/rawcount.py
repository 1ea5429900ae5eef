"""The stdout case with a client that does nothing but count: a cross-check of bench/client.py.

    .venv/bin/python -m bench.rawcount --runs 5 "OUR COMMAND" \
        "CODEX_HOME=… $REF/node_modules/.bin/codex exec-server --listen ws://127.0.0.1:{port}"

Each command starts a daemon (as ``bench/run.py`` does); the runs are interleaved. A run
starts ``head -c 64MiB /dev/zero`` and receives with blocking ``recv_into`` into one
buffer, parsing nothing: it only watches the last bytes received for ``"process/closed"``
(so it also counts the frames' envelopes, ~1% more bytes than the output). Whatever a
daemon reaches here, the benchmark's client did not hold it back; the client's own CPU per
run is printed too.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import resource
import socket
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.client import frame
from bench.harness import DaemonProcess

SIZE = 64 * 1024 * 1024
_CLOSED = b'"process/closed"'


def _message(value: object) -> bytes:
    return frame(json.dumps(value).encode())


def _connect(url: str) -> socket.socket:
    """A connected, upgraded and initialized socket."""
    host, port = url.removeprefix("ws://").rstrip("/").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(4096)
    sock.sendall(_message({"id": 1, "method": "initialize", "params": {"clientName": "raw"}}))
    while b'"id":1' not in received:
        received += sock.recv(65536)
    sock.sendall(_message({"method": "initialized", "params": {}}))
    return sock


def measure(url: str) -> tuple[float, float]:
    """(MB/s, client CPU in ms) of one run."""
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    params = {
        "processId": "raw",
        "argv": ["/usr/bin/head", "-c", str(SIZE), "/dev/zero"],
        "cwd": "file:///tmp",
        "env": {"PATH": "/usr/bin:/bin"},
        "tty": False,
    }
    with _connect(url) as sock:
        started = time.perf_counter()
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        sock.sendall(_message({"id": 2, "method": "process/start", "params": params}))
        tail = b""
        while True:
            count = sock.recv_into(buffer)
            if not count:
                raise ConnectionError("the daemon closed the connection")
            tail = (
                (tail + bytes(view[:count]))[-64:]
                if count < 64
                else bytes(view[count - 64 : count])
            )
            if _CLOSED in tail:
                break
        elapsed = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
    used = after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime
    return SIZE / elapsed / 1e6, used * 1e3


def main() -> None:
    """The command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("commands", nargs="+", metavar="COMMAND", help="a daemon's command")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    daemons = [DaemonProcess(command) for command in args.commands]
    try:
        for daemon in daemons:
            daemon.start()
        results: list[list[tuple[float, float]]] = [[] for _ in daemons]
        for _ in range(args.runs):
            for daemon, samples in zip(daemons, results, strict=True):
                samples.append(measure(daemon.url))
        for command, samples in zip(args.commands, results, strict=True):
            rates = sorted(round(rate) for rate, _cpu in samples)
            cpu = statistics.median(cpu for _rate, cpu in samples)
            print(f"{statistics.median(rates):7.0f} MB/s {rates}  client {cpu:.0f} ms  {command}")
    finally:
        for daemon in daemons:
            daemon.stop()


if __name__ == "__main__":
    main()
