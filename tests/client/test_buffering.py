"""A process's unread output is kept up to a bound, and fetched again from the daemon's
retention once the reader catches up; against a real daemon."""

from __future__ import annotations

import asyncio

import pytest

from executor.client import ProcessLost, connect
from tests.client.conftest import arun
from tests.support.daemon import RunningDaemon
from tests.support.faultrelay import FaultRelay

SH = ["/bin/sh", "-c"]
#: Not less than the largest chunk the daemon sends (256 KiB from a flooded pipe): a chunk
#: is never split, so one larger than the bound would be kept alone.
BOUND = 512 * 1024


def test_a_slow_reader_gets_every_byte_once_in_order_within_the_bound() -> None:
    """About 6.9 MB of output, thirteen times the bound, half of it produced while nothing
    reads it (then read slowly while the rest comes): every byte arrives once and in order,
    and the client never holds more than the bound of it."""
    lines = 1_000_000
    roomy = RunningDaemon(["--retained-output-bytes", str(16 << 20)])
    try:

        async def main() -> None:
            async with connect(roomy.url, output_buffer_bytes=BOUND) as env:
                script = f"seq 1 {lines // 2}; sleep 0.5; seq {lines // 2 + 1} {lines}"
                proc = await env.start([*SH, script], cwd="/tmp")
                await asyncio.sleep(0.3)  # the first half is out, and not read
                received = bytearray()
                seqs: list[int] = []
                peak = 0
                async for chunk in proc.output():
                    peak = max(peak, proc.buffered_bytes)
                    received += chunk.data
                    seqs.append(chunk.seq)
                    if len(seqs) % 50 == 0:
                        await asyncio.sleep(0.001)  # slower than the command
                assert bytes(received) == "".join(f"{i}\n" for i in range(1, lines + 1)).encode()
                assert seqs == sorted(set(seqs))
                assert (await proc.wait()).exit_code == 0
                assert peak <= BOUND
                assert proc._events.peak_buffered <= BOUND

        arun(main(), timeout=60)
    finally:
        roomy.stop()


def test_a_gap_beyond_the_daemons_retention_fails_only_that_process() -> None:
    small = RunningDaemon(["--retained-output-bytes", "65536"])
    try:

        async def main() -> None:
            async with connect(small.url, output_buffer_bytes=16384) as env:
                flood = await env.start([*SH, "head -c 1000000 /dev/zero; sleep 30"], cwd="/")
                quiet = await env.start([*SH, "echo a; sleep 1; echo b"], cwd="/")
                await asyncio.sleep(0.8)  # the flood is out, and not read
                delivered = bytearray()

                async def read_all() -> None:
                    async for chunk in flood.output():
                        delivered.extend(chunk.data)

                with pytest.raises(ProcessLost, match=r"from seq [0-9]+ to seq") as caught:
                    await read_all()
                assert "no longer retains" in str(caught.value)
                assert 0 < len(delivered) < 1_000_000 and not delivered.strip(b"\0")
                with pytest.raises(ProcessLost):
                    await flood.wait()
                result = await quiet.collect()
                assert (result.stdout, result.exit_code) == (b"a\nb\n", 0)
                # Its output could not be delivered: it was killed, as a lost catch-up is.
                read = await env.request(
                    "process/read",
                    {"processId": flood.id, "afterSeq": 1 << 40, "waitMs": 5000},
                )
                assert read["exited"] and read["exitCode"] == 137

        arun(main())
    finally:
        small.stop()


def test_drops_while_output_is_let_go_and_fetched_again() -> None:
    """The connection drops, twice, while the reader is behind the bound: the catch-ups and
    the fetches of what was let go fit together, every byte once and in order."""
    lines = 300_000
    roomy = RunningDaemon(["--retained-output-bytes", str(16 << 20)])
    try:

        async def main() -> None:
            async with FaultRelay(roomy.url) as relay:
                env = await connect(relay.url, output_buffer_bytes=BOUND)
                script = f"seq 1 {lines // 3}; sleep 0.6; seq {lines // 3 + 1} {lines}"
                proc = await env.start([*SH, script], cwd="/tmp")
                await asyncio.sleep(0.3)  # the first third is out, not read
                received = bytearray()
                drops = 0
                async for chunk in proc.output():
                    received += chunk.data
                    if drops < 2 and len(received) > (drops + 1) * 300_000:
                        drops += await relay.drop("rst" if drops else "midframe", timeout=1.0)
                expected = "".join(f"{i}\n" for i in range(1, lines + 1)).encode()
                assert bytes(received) == expected
                assert (await proc.wait()).exit_code == 0
                assert drops == 2 and proc._events.peak_buffered <= BOUND
                await env.close()

        arun(main(), timeout=60)
    finally:
        roomy.stop()
