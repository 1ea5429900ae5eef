"""ProcessTable without a network: the states a live test cannot pin down reliably."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from typing import Any

import pytest

from executor import proctree
from executor.process import (
    LiveProcessCounter,
    ManagedProcess,
    ProcessLimits,
    ProcessTable,
    RefuseSandbox,
)
from executor.protocol.decode import decode
from executor.protocol.jsonrpc import Spliced
from executor.protocol.messages import (
    ReadParams,
    StartParams,
    TerminateParams,
    WriteParams,
    WriteStatus,
)
from executor.sandbox import Command
from executor.spawn.spawner import Launch


class HeldSpawner:
    """A spawner whose launches never report until the test says so."""

    def __init__(self) -> None:
        self.launches: list[Launch] = []
        self.requests: list[Command] = []

    def launch(self, request: Command, stdio: tuple[int, int, int]) -> Launch:
        loop = asyncio.get_running_loop()
        launch = Launch(loop.create_future(), loop.create_future(), loop.create_future())
        self.requests.append(request)
        self.launches.append(launch)
        return launch


class Sink:
    """A notifier that records notifications."""

    congested = False
    attachment_id: int | None = 1

    def __init__(self) -> None:
        self.notes: list[tuple[str, dict[str, Any]]] = []

    def notify(self, method: str, params: dict[str, Any] | Spliced) -> None:
        assert isinstance(params, dict), "the table sends output as a dict here"
        self.notes.append((method, params))

    def on_drain(self, callback: Callable[[], None]) -> None:
        callback()


def _table(spawner: HeldSpawner, sink: Sink) -> ProcessTable:
    return ProcessTable(
        spawner=spawner,  # type: ignore[arg-type]
        confinement=RefuseSandbox(),
        notifier=sink,
        counter=LiveProcessCounter(10),
        limits=ProcessLimits(exited_retention=60),
        executor_env={"PATH": "/usr/bin:/bin"},
    )


def _params(process_id: str = "p", **extra: Any) -> StartParams:
    wire = {
        "processId": process_id,
        "argv": ["true"],
        "cwd": "file:///tmp",
        "env": {},
        "tty": False,
    }
    return decode(StartParams, {**wire, **extra})


async def _start_held(
    table: ProcessTable, spawner: HeldSpawner, params: StartParams
) -> tuple[Launch, ManagedProcess]:
    """Start ``params`` on ``table`` and report the launch started (pid 999999)."""
    start = asyncio.ensure_future(table.start(params))
    await asyncio.sleep(0)
    launch = spawner.launches[-1]
    launch.started.set_result((999_999, 999_998))
    _result, process = await start
    return launch, process


def test_write_while_starting_reports_starting() -> None:
    """A write that arrives while the spawn is in flight answers ``starting``."""

    async def scenario() -> None:
        spawner, sink = HeldSpawner(), Sink()
        table = _table(spawner, sink)
        start = asyncio.ensure_future(table.start(_params(pipeStdin=True)))
        await asyncio.sleep(0)
        status = table.write(
            decode(WriteParams, {"processId": "p", "chunk": "eA==", "writeId": "w"})
        )
        assert status is WriteStatus.STARTING
        assert spawner.requests[0].executable == "/usr/bin/true"
        assert table.get("p") is not None  # in the table, starting
        failure = OSError(2, "No such file or directory")
        spawner.launches[0].started.set_exception(failure)
        with pytest.raises(OSError, match="No such file") as raised:
            await start
        assert raised.value is failure  # the start failed with the spawn's own error
        assert table.get("p") is None
        status = table.write(
            decode(WriteParams, {"processId": "p", "chunk": "eA==", "writeId": "w2"})
        )
        assert status is WriteStatus.UNKNOWN_PROCESS  # no longer starting: gone
        assert table.counter.count == 0

    asyncio.run(scenario())


def test_events_are_held_until_announced() -> None:
    """Events produced before the start response are delivered only after ``announce``."""

    async def scenario() -> None:
        spawner, sink = HeldSpawner(), Sink()
        table = _table(spawner, sink)
        launch, process = await _start_held(table, spawner, _params())
        launch.exited.set_result(0)
        await asyncio.sleep(0)
        assert sink.notes == []
        process.announce()
        # The fake launch never used the child's pipe ends, so both streams are at EOF.
        assert [method for method, _ in sink.notes] == ["process/exited", "process/closed"]
        read = await table.read(decode(ReadParams, {"processId": "p"}))
        assert read.exited
        assert read.exit_code == 0

    asyncio.run(scenario())


class KeptStdoutSpawner(HeldSpawner):
    """A held spawner that keeps a copy of the child's stdout: the test writes the output."""

    stdout = -1

    def launch(self, request: Command, stdio: tuple[int, int, int]) -> Launch:
        self.stdout = os.dup(stdio[1])
        return super().launch(request, stdio)


def test_output_written_before_the_exit_line_is_read_comes_before_the_exit() -> None:
    """The exit is handled as its status line is read, possibly before the loop reported the
    output pipe: what the command wrote by then still gets the earlier seq."""

    async def scenario() -> None:
        spawner, sink = KeptStdoutSpawner(), Sink()
        table = _table(spawner, sink)
        launch, _process = await _start_held(table, spawner, _params())
        os.write(spawner.stdout, b"out\n")
        launch.feed(b"X 0\n")  # no loop pass in between: the pipe's event is not handled yet
        os.close(spawner.stdout)
        read = await table.read(decode(ReadParams, {"processId": "p", "waitMs": 5000}))
        assert [(chunk.seq, chunk.data) for chunk in read.chunks] == [(1, b"out\n")]
        assert read.exited

    asyncio.run(scenario())


def test_the_exit_is_handled_once_whoever_resolves_it() -> None:
    """``when_exited``'s callback runs once: from the status line, or from the future."""

    async def scenario() -> tuple[list[int], list[int]]:
        loop = asyncio.get_running_loop()
        by_line, by_future = [], []
        fed = Launch(loop.create_future(), loop.create_future(), loop.create_future())
        fed.started.set_result((999_999, 999_998))
        fed.when_exited(lambda exited: by_line.append(exited.result()))
        fed.feed(b"X 256\n")
        assert by_line == [256]  # at once, not a loop pass later
        resolved = Launch(loop.create_future(), loop.create_future(), loop.create_future())
        resolved.started.set_result((999_999, 999_998))
        resolved.when_exited(lambda exited: by_future.append(exited.result()))
        resolved.exited.set_result(0)
        await asyncio.sleep(0)
        fed.end()
        resolved.end()
        await asyncio.sleep(0)
        return by_line, by_future

    assert asyncio.run(scenario()) == ([256], [0])


def test_no_signal_once_the_tree_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the supervisor reported its end, terminate signals nothing (pids may be reused)."""
    sent: list[tuple[int, int | None, int]] = []

    def signal_tree(pgid: int, sup: int | None, signum: int = 9) -> int:
        sent.append((pgid, sup, signum))
        return 1

    monkeypatch.setattr(proctree, "signal_tree", signal_tree)

    async def scenario() -> None:
        spawner, sink = HeldSpawner(), Sink()
        table = _table(spawner, sink)
        launch, _process = await _start_held(table, spawner, _params(process_id="t"))
        terminate = decode(TerminateParams, {"processId": "t"})
        assert table.terminate(terminate) is True
        assert sent == [(999_999, 999_998, signal.SIGKILL)]
        launch.exited.set_result(9)
        launch.gone.set_result(None)
        await asyncio.sleep(0)
        assert table.terminate(terminate) is False
        await table.close()
        assert len(sent) == 1

    asyncio.run(scenario())
