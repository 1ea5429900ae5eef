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
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import rawcount
from bench.cases.fs import Expected
from bench.client import BASE64, DECODED_BYTES, BenchClient, decoded_length
from bench.harness import Case, DaemonProcess, Metric, our_command
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
    samples, table = run_bench(tmp_path=tmp_path)
    for case in discover([]):
        for metric in case.metrics:
            if metric.name.endswith(".wrapper"):
                continue  # the reference's node wrapper: only the reference has one
            values = samples.get(metric.name, {}).get("ours")
            assert values, f"{case.name} produced no {metric.name}"
            assert all(value > 0 for value in values), (metric.name, values)
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
