"""Dropped connections, against a real daemon behind a relay the test breaks on purpose.

Every test checks what the caller sees: output exactly once and in order, the exit and the
close, a clear error where the client cannot know or cannot recover.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator

import pytest

from executor.client import (
    Environment,
    OutcomeUnknown,
    ProcessLost,
    ServerError,
    SessionFailed,
    connect,
)
from tests.client.conftest import arun
from tests.support.daemon import RunningDaemon
from tests.support.faultrelay import DropMode, FaultRelay

SH = ["/bin/sh", "-c"]


async def until_connected(env: Environment, recoveries: int, timeout: float = 10.0) -> None:
    """Wait until the client has recovered ``recoveries`` times in all."""
    async with asyncio.timeout(timeout):
        while env.recoveries < recoveries or env.state != "connected":
            await asyncio.sleep(0.01)


async def until(condition: object, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():  # type: ignore[operator]
            await asyncio.sleep(0.01)


def test_thousands_of_lines_arrive_once_and_in_order_across_repeated_drops(
    daemon: RunningDaemon,
) -> None:
    lines = 4000
    script = (
        f"i=1; while [ $i -le {lines} ]; do echo line $i; "
        "if [ $((i % 250)) = 0 ]; then sleep 0.05; fi; i=$((i+1)); done"
    )

    async def main() -> None:
        async with FaultRelay(daemon.url) as relay, connect(relay.url) as env:
            proc = await env.start([*SH, script], cwd="/tmp")
            modes: Iterator[DropMode] = itertools.cycle(["fin", "rst", "midframe"])
            received = bytearray()
            seqs: list[int] = []
            drops = 0
            next_drop = 300
            async for chunk in proc.output():
                received += chunk.data
                seqs.append(chunk.seq)
                if received.count(b"\n") >= next_drop and env.state == "connected":
                    next_drop += 350
                    drops += await relay.drop(next(modes))
            result = await proc.wait()
            assert result.exit_code == 0
            expected = "".join(f"line {i}\n" for i in range(1, lines + 1)).encode()
            assert bytes(received) == expected
            assert seqs == sorted(set(seqs))
            assert drops >= 4
            await until_connected(env, drops)
            assert env.recoveries == drops

    arun(main(), timeout=60)


def test_exit_and_close_during_a_drop_are_reconstructed(daemon: RunningDaemon) -> None:
    """The process prints, exits and closes while everything it sends is held and then
    lost: the catch-up rebuilds the output, the exit and the close at their seqs."""

    async def main() -> None:
        async with FaultRelay(daemon.url) as relay, connect(relay.url) as env:
            proc = await env.start([*SH, "sleep 0.3; echo done; echo err >&2; exit 7"])
            relay.pause("down")
            await asyncio.sleep(0.8)
            await relay.drop("rst")
            relay.resume()
            chunks = [chunk async for chunk in proc.output()]
            result = await proc.wait()
            assert result.exit_code == 7
            assert b"".join(c.data for c in chunks if c.stream == "stdout") == b"done\n"
            assert b"".join(c.data for c in chunks if c.stream == "stderr") == b"err\n"
            assert proc.closed
            await until_connected(env, 1)

    arun(main())


def test_a_drop_during_the_catch_up_itself_is_recovered(daemon: RunningDaemon) -> None:
    async def main() -> None:
        async with FaultRelay(daemon.url) as relay, connect(relay.url) as env:
            proc = await env.start([*SH, "sleep 0.2; seq 1 20000; exit 3"])
            relay.refusing = True
            await relay.drop("fin")
            await asyncio.sleep(1.0)  # the process writes everything while we are away
            # The first resume is cut inside the answer to its catch-up process/read (about
            # 145 kB; a notification carries at most 8 KiB of output).
            relay.arm_cut(frame=2, min_payload=64_000)
            before = relay.connections
            relay.refusing = False
            data = b"".join([chunk.data async for chunk in proc.output()])
            assert data == "".join(f"{i}\n" for i in range(1, 20001)).encode()
            assert (await proc.wait()).exit_code == 3
            assert relay.connections >= before + 2  # the cut attempt, then the good one

    arun(main())


def test_a_start_whose_answer_was_lost_is_terminated_not_adopted(daemon: RunningDaemon) -> None:
    async def main() -> None:
        async with FaultRelay(daemon.url) as relay, connect(relay.url) as env:
            relay.pause("down")  # the start's answer will never arrive
            sent = relay.up_bytes
            start = asyncio.ensure_future(env.start(["sleep", "30"], process_id="ambiguous"))
            await until(lambda: relay.up_bytes > sent)
            await asyncio.sleep(0.3)  # the daemon starts the process and answers
            await relay.drop("rst")
            relay.resume()
            with pytest.raises(OutcomeUnknown, match="process/start"):
                await start
            await until_connected(env, 1)
            # Reconnected, the client killed the process it could not know it had.
            read = await env.request(
                "process/read", {"processId": "ambiguous", "afterSeq": 0, "waitMs": 3000}
            )
            assert read["exited"] and read["exitCode"] == 137
            # The session goes on.
            result = await env.run(["echo", "after"], cwd="/tmp")
            assert result.stdout == b"after\n"

    arun(main())


def test_a_write_in_flight_is_not_replayed_but_can_be_resent_by_its_id(
    daemon: RunningDaemon,
) -> None:
    async def main() -> None:
        async with FaultRelay(daemon.url) as relay, connect(relay.url) as env:
            proc = await env.start(
                [*SH, "read a; echo got:$a; read b; echo got:$b"], stdin=True, cwd="/tmp"
            )
            relay.pause("down")
            sent = relay.up_bytes
            write = asyncio.ensure_future(proc.write(b"one\n", write_id="w-1"))
            await until(lambda: relay.up_bytes > sent)
            await asyncio.sleep(0.2)
            await relay.drop("midframe", timeout=1.0)
            relay.resume()
            with pytest.raises(OutcomeUnknown, match="process/write") as caught:
                await write
            assert caught.value.write_id == "w-1"
            # The daemon accepts a writeId once: resending it cannot double the input.
            await proc.write(b"one\n", write_id="w-1")
            await proc.write(b"two\n")
            result = await proc.collect()
            assert result.stdout == b"got:one\ngot:two\n"
            assert result.exit_code == 0

    arun(main())


def test_a_gap_beyond_retention_fails_only_that_process() -> None:
    small = RunningDaemon(["--retained-output-bytes", "65536"])
    try:

        async def main() -> None:
            async with FaultRelay(small.url) as relay, connect(relay.url) as env:
                flood = await env.start([*SH, "sleep 0.2; head -c 1000000 /dev/zero; sleep 5"])
                quiet = await env.start([*SH, "sleep 0.2; echo a; sleep 1.2; echo b"])
                relay.refusing = True
                await relay.drop("rst")
                await asyncio.sleep(1.0)
                relay.refusing = False
                with pytest.raises(ProcessLost, match="no longer retained"):
                    async for _ in flood.output():
                        pass
                with pytest.raises(ProcessLost):
                    await flood.wait()
                result = await quiet.collect()
                assert (result.stdout, result.exit_code) == (b"a\nb\n", 0)
                await until_connected(env, 1)
                # The lost process was killed: its output could not be delivered anyway.
                read = await env.request(
                    "process/read", {"processId": flood.id, "afterSeq": 0, "maxBytes": 0}
                )
                assert read["exited"] and read["exitCode"] == 137

        arun(main())
    finally:
        small.stop()


def test_a_resume_retries_while_the_old_connection_is_still_attached(
    daemon: RunningDaemon,
) -> None:
    """The client lost its connection, the daemon has not noticed yet: resuming gets
    -32010 (already attached) until the daemon lets the old connection go."""

    async def main() -> None:
        async with FaultRelay(daemon.url) as relay, connect(relay.url) as env:
            proc = await env.start(["/bin/sh", "-c", "sleep 0.5; echo late"], cwd="/tmp")
            await relay.drop("rst", keep_upstream=True)
            await relay.wait_connections(3)  # refused twice or more, and still trying
            assert env.state == "recovering"
            relay.release_upstreams()
            result = await proc.collect()
            assert (result.stdout, result.exit_code) == (b"late\n", 0)
            await until_connected(env, 1)

    arun(main())


def test_past_the_deadline_every_call_and_handle_fails_with_one_error(
    daemon: RunningDaemon,
) -> None:
    async def main() -> None:
        async with FaultRelay(daemon.url) as relay:
            env = await connect(relay.url, recovery_deadline=1.0)
            proc = await env.start(["sleep", "30"], cwd="/tmp")
            relay.refusing = True
            await relay.drop("fin")
            started = asyncio.get_running_loop().time()
            pending = asyncio.ensure_future(env.request("environment/status"))
            with pytest.raises(SessionFailed, match="could not be resumed within 1 s") as first:
                await proc.wait()
            elapsed = asyncio.get_running_loop().time() - started
            assert 0.9 < elapsed < 5
            with pytest.raises(SessionFailed) as second:
                await pending
            with pytest.raises(SessionFailed) as third:
                async for _ in proc.output():
                    pass
            with pytest.raises(SessionFailed) as later:
                await env.start(["true"])
            messages = {str(e.value) for e in (first, second, third, later)}
            assert len(messages) == 1
            assert env.state == "failed" and env.failure in messages
            assert relay.connections >= 3  # it kept trying until the deadline
            await env.close()

    arun(main())


def test_an_expired_session_fails_at_once_without_waiting_for_the_deadline() -> None:
    short = RunningDaemon(["--session-ttl", "0.3"])
    try:

        async def main() -> None:
            async with FaultRelay(short.url) as relay:
                env = await connect(relay.url, recovery_deadline=20)
                relay.refusing = True
                await relay.drop("rst")
                await asyncio.sleep(1.0)  # the detached session expires
                relay.refusing = False
                with pytest.raises(SessionFailed, match="unknown session"):
                    async with asyncio.timeout(5):
                        await env.request("environment/status")
                await env.close()

        arun(main())
    finally:
        short.stop()


def test_reads_cut_off_by_a_drop_are_sent_again(daemon: RunningDaemon, tmp_path: object) -> None:
    async def main() -> None:
        async with FaultRelay(daemon.url) as relay, connect(relay.url) as env:
            relay.pause("down")
            sent = relay.up_bytes
            call = asyncio.ensure_future(env.request("environment/info"))
            await until(lambda: relay.up_bytes > sent)
            await relay.drop("rst")
            relay.resume()
            info = await call
            assert info["platformOs"] == "linux"
            assert env.recoveries == 1

    arun(main())


def test_close_leaks_no_task_and_no_descriptor(daemon: RunningDaemon) -> None:
    def descriptors() -> int:
        import os

        return len(os.listdir("/proc/self/fd"))

    async def main() -> None:
        await asyncio.sleep(0)
        fds = descriptors()
        tasks = len(asyncio.all_tasks())
        relay = await FaultRelay(daemon.url).start()
        try:
            env = await connect(relay.url)
            await env.start(["sleep", "30"], cwd="/tmp")
            await relay.drop("rst")
            await until_connected(env, 1)
            await relay.drop("fin")
            await until_connected(env, 2)
            await env.run(["true"], cwd="/tmp")
            await env.close()
            with pytest.raises(SessionFailed, match="closed"):
                await env.request("environment/status")
        finally:
            await relay.close()
        # Once closed, nothing of the client is left running or open.
        assert len(asyncio.all_tasks()) == tasks
        assert descriptors() == fds

    arun(main())


def test_a_resumed_sessions_process_can_be_attached(daemon: RunningDaemon) -> None:
    """A second client resumes the session a first one left: ``attach`` follows a process
    it did not start, its retained output first, then what comes live."""

    async def main() -> None:
        first = await connect(daemon.url)
        proc = await first.start([*SH, "echo early; sleep 1; echo late; exit 5"], cwd="/tmp")
        assert (await anext(proc.output())).data == b"early\n"
        session = first.session_id
        await first.close(terminate_processes=False)
        async with connect(daemon.url, resume_session_id=session) as env:
            attached = await env.attach(proc.id)
            result = await attached.collect()
            assert (result.stdout, result.exit_code) == (b"early\nlate\n", 5)
            with pytest.raises(ServerError, match="unknown process"):
                await env.attach("no-such-process")

    arun(main())
