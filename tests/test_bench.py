"""`bench/` stays runnable and honest.

The numbers are not judged here (speed is for the benchmark, not for tests). What is checked:
the client counts output from the raw frames exactly, whatever the chunk size and however the
frames are split across reads (fast); the report flags a client-bound case (fast); and no
case has rotted: each declared metric comes back, positive, from a real run (slow).
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import rawcount
from bench.blocking import BlockingClient, masked_frames
from bench.cases import rpc, scale
from bench.cases.fs import Expected
from bench.client import BASE64, DECODED_BYTES, BenchClient, decoded_length
from bench.harness import Case, DaemonProcess, Metric, Target, our_command
from bench.run import discover, report

ROOT = Path(__file__).resolve().parent.parent


def server_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """An unmasked server frame."""
    size = len(payload)
    if size < 126:
        head = bytes([0x80 | opcode, size])
    elif size < 1 << 16:
        head = bytes([0x80 | opcode, 126]) + size.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 127]) + size.to_bytes(8, "big")
    return head + payload


def output_message(process_id: str, seq: int, data: bytes, *, chunk_last: bool = True) -> bytes:
    chunk = base64.b64encode(data).decode()
    params: dict[str, Any] = {"processId": process_id, "seq": seq, "stream": "stdout"}
    params = {**params, "chunk": chunk} if chunk_last else {"chunk": chunk, **params}
    return json.dumps(
        {"method": "process/output", "params": params}, separators=(",", ":")
    ).encode()


class _Sink:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)


def feed(client: BenchClient, data: bytes, read_size: int) -> None:
    for at in range(0, len(data), read_size):
        client.data_received(data[at : at + read_size])


def offline_client() -> BenchClient:
    """A client past its upgrade, writing into a list (no socket)."""
    client = BenchClient()
    client._upgraded = True
    client._transport = _Sink()  # type: ignore[assignment]
    return client


@pytest.mark.parametrize("read_size", [7, 4096, 1 << 20])
def test_output_is_counted_exactly_from_raw_frames(read_size: int) -> None:
    async def scenario() -> None:
        client = offline_client()
        watch = client.watch("p")
        other = client.watch("q")
        sizes = [8192, 65536, 1, 2, 3, 1000, 1024, 70000, 0]  # every padding, both chunk sizes
        frames = b"".join(
            server_frame(output_message("p", seq, b"\x00" * size))
            for seq, size in enumerate(sizes, 1)
        )
        frames += server_frame(output_message("q", 1, b"x" * 5000, chunk_last=False))
        frames += server_frame(b'{"method":"process/closed","params":{"processId":"p","seq":99}}')
        feed(client, frames, read_size)
        assert watch.output_bytes == sum(sizes)
        assert other.output_bytes == 5000  # another field order: parsed without its chunk
        assert watch.closed.done()

    asyncio.run(scenario())


def test_large_base64_fields_are_cut_out_not_parsed() -> None:
    async def scenario() -> None:
        client = offline_client()
        client.base64_hook = lambda buffer, start, end: bytes(buffer[start:end])
        future = client.submit("fs/readFile", {"path": "file:///x"})
        data = bytes(range(256)) * 100
        text = base64.b64encode(data)
        answer = b'{"id":1,"result":{"dataBase64":"' + text + b'"}}'
        feed(client, server_frame(answer), 1000)
        response = future.result()
        assert response["result"] == {"dataBase64": ""}
        assert response[DECODED_BYTES] == len(data)
        assert response[BASE64] == text  # what the hook saw, in place


def test_an_answer_is_checked_in_place_against_the_expected_base64() -> None:
    async def scenario() -> None:
        client = offline_client()
        expected = Expected()
        client.base64_hook = expected
        expected.text = base64.b64encode(b"y" * 4000)
        good, bad = client.submit("fs/readBlock", {}), client.submit("fs/readBlock", {})
        for future_id, body in ((1, b"y" * 4000), (2, b"y" * 3999 + b"z")):
            text = base64.b64encode(body)
            answer = b'{"id":%d,"result":{"chunk":"%s","eof":false}}' % (future_id, text)
            feed(client, server_frame(answer), 4096)
        assert expected.check(good.result(), "chunk") == 4000
        with pytest.raises(AssertionError):
            expected.check(bad.result(), "chunk")

    asyncio.run(scenario())

    asyncio.run(scenario())


@pytest.mark.parametrize("size", range(8))
def test_decoded_length(size: int) -> None:
    assert decoded_length(base64.b64encode(b"a" * size)) == size


def _case(name: str) -> Case:
    async def run(_target: object) -> dict[str, float]:
        return {}

    return Case(
        name=name,
        description="",
        metrics=(Metric(name=name, unit="MB/s", cpu=True),),
        run=run,
    )


def test_a_client_bound_side_is_flagged() -> None:
    results = {
        "fast": {"ours": [200.0, 300.0], "reference": [100.0, 100.0]},
        "fast.cpu.daemon": {"ours": [300.0, 300.0], "reference": [100.0, 120.0]},
        "fast.cpu.client": {"ours": [50.0, 60.0], "reference": [150.0, 160.0]},
        "fair": {"ours": [100.0, 100.0], "reference": [100.0, 100.0]},
        "fair.cpu.daemon": {"ours": [300.0, 300.0], "reference": [300.0, 300.0]},
        "fair.cpu.client": {"ours": [50.0, 60.0], "reference": [50.0, 60.0]},
    }
    table = report([_case("fast"), _case("fair")], results, with_reference=True)
    ratios = next(line for line in table.splitlines() if line.startswith("fast"))
    assert "2.00-3.00" in ratios  # the ratio of each trial
    flagged = [line for line in table.splitlines() if "not trustworthy" in line]
    assert len(flagged) == 1
    assert flagged[0].startswith("fast") and "client-bound on reference" in flagged[0]


def client_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(first byte, unmasked payload) of each client frame in ``data``."""
    frames = []
    while data:
        first, length = data[0], data[1] & 0x7F
        assert data[1] & 0x80, "a client frame must be masked"
        head = 2
        if length == 126:
            length, head = int.from_bytes(data[2:4], "big"), 4
        elif length == 127:
            length, head = int.from_bytes(data[2:10], "big"), 10
        key = data[head : head + 4]
        body = data[head + 4 : head + 4 + length]
        frames.append((first, bytes(b ^ key[i % 4] for i, b in enumerate(body))))
        data = data[head + 4 + length :]
    return frames


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 130, 70_000])
def test_masked_frames_fragment_a_message(size: int) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    frames = client_frames(masked_frames(payload, fragment=64))
    assert b"".join(body for _first, body in frames) == payload
    assert all(len(body) == 64 for _first, body in frames[:-1])
    firsts = [first for first, _body in frames]
    if len(frames) == 1:
        assert firsts == [0x81]
    else:  # text, continuations, FIN on the last only
        assert firsts == [0x01] + [0x00] * (len(frames) - 2) + [0x80]
    ((first, body),) = client_frames(masked_frames(payload))
    assert first == 0x81 and body == payload
    if size >= 8:  # really masked: a random key, not the zero key
        assert masked_frames(payload)[-size:] != payload


def run_bench(*args: str, tmp_path: Path) -> tuple[dict[str, dict[str, list[float]]], str]:
    out = tmp_path / "samples.json"
    result = subprocess.run(
        [sys.executable, "bench/run.py", "--trials", "1", "--json", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert " failed:" not in result.stderr, result.stderr
    samples: dict[str, dict[str, list[float]]] = json.loads(out.read_text())
    return samples, result.stdout


@pytest.mark.slow
def test_every_case_yields_every_metric(tmp_path: Path) -> None:
    # The scale cases at their real size take minutes: they run tiny below.
    samples, table = run_bench("--skip", "scale", tmp_path=tmp_path)
    for case in discover([], ["scale"]):
        for metric in case.metrics:
            if metric.name.endswith(".wrapper"):
                continue  # the reference's node wrapper: only the reference has one
            values = samples.get(metric.name, {}).get("ours")
            assert values, f"{case.name} produced no {metric.name}"
            # A time, a rate or a size is positive; a growth may be none at all; a difference
            # from a floor measured in the same run may come out below it (noise).
            if metric.name.endswith("over_floor"):
                assert all(math.isfinite(value) for value in values), (metric.name, values)
            else:
                least = 0.0 if metric.name.endswith("_growth") else sys.float_info.min
                assert all(value >= least for value in values), (metric.name, values)
            assert metric.name in table
            if metric.cpu:  # the CPU of its timed window, client and daemon
                for role in ("client", "daemon"):
                    assert samples[f"{metric.name}.cpu.{role}"]["ours"], (metric.name, role)
                assert metric.name in table.split("CPU in the timed window", 1)[1]


@pytest.mark.slow
def test_the_raw_counting_client_measures_our_daemon() -> None:
    daemon = DaemonProcess(our_command())
    daemon.start()
    try:
        rate, cpu = rawcount.measure(daemon.url)
    finally:
        daemon.stop()
    assert rate > 0 and cpu >= 0


@pytest.mark.slow
def test_a_reference_is_measured_side_by_side(tmp_path: Path) -> None:
    """Our own daemon stands in for the reference, to exercise the comparison path."""
    samples, table = run_bench(
        "--only", "rpc.status", "--reference", our_command(), tmp_path=tmp_path
    )
    assert samples["rpc.status"]["ours"] and samples["rpc.status"]["reference"]
    row = next(line for line in table.splitlines() if line.startswith("rpc.status"))
    ratio = float(row.split()[4])  # ours/ref of two equal daemons
    assert 0.2 < ratio < 5
    cpu_row = table.split("CPU in the timed window", 1)[1]
    assert "rpc.status" in cpu_row


@pytest.fixture
def our_target(tmp_path: Path) -> Iterator[Target]:
    daemon = DaemonProcess(our_command())
    daemon.start()
    try:
        yield Target(name="ours", url=daemon.url, daemon=daemon, workdir=tmp_path)
    finally:
        daemon.stop()


@pytest.mark.slow
def test_the_blocking_client_times_requests_and_fragmented_messages(our_target: Target) -> None:
    client = BlockingClient(our_target.url)
    try:
        samples = client.roundtrips([client.request_frame("environment/status") for _ in range(50)])
        assert len(samples) == 50 and all(sample > 0 for sample in samples)
        assert client.request("environment/status") is not None  # still in step
        path = our_target.workdir / "fragmented.bin"
        message, written = rpc.write_file_message(path, 8192)
        client.sock.sendall(masked_frames(message, fragment=64))
        rpc.check(client.answer())
        assert path.stat().st_size == written
    finally:
        client.close()


@pytest.mark.slow
def test_the_floor_answers_the_blocking_client() -> None:
    """``bench/floor.py`` (a round trip's floor) speaks enough WebSocket for ``rpc.roundtrip``."""
    floor = DaemonProcess(
        f"{sys.executable} {ROOT / 'bench' / 'floor.py'} serve --listen ws://127.0.0.1:{{port}}"
    )
    floor.start()
    try:
        client = BlockingClient(floor.url)
        try:
            frames = [client.request_frame("environment/status") for _ in range(20)]
            samples = client.roundtrips(frames)
        finally:
            client.close()
    finally:
        floor.stop()
    assert len(samples) == 20 and all(sample > 0 for sample in samples)


@pytest.mark.slow
def test_scale_cases_at_a_tiny_size(our_target: Target) -> None:
    async def scenario() -> tuple[dict[str, float], dict[str, float]]:
        streamed = await scale.streams(our_target, 3, total=3 * 65536)
        started = await scale.start_latency(our_target, 2, probes=3)
        return streamed, started

    streamed, started = asyncio.run(scenario())
    assert streamed["scale.streams.3"] > 0 and streamed["scale.streams.3.rss"] > 1
    assert streamed["scale.streams.3.cpu.daemon"] >= 0
    assert started["scale.start.m2.probes"] == 3
    assert 0 < started["scale.start.m2.p50"] <= started["scale.start.m2.p99"]
    assert started["scale.start.m2.closed"] >= started["scale.start.m2.p50"]
    assert started["scale.start.m2.streams"] > 0  # the load streamed during the probes
    assert started["scale.start.m2.p50.cpu.client"] > 0
