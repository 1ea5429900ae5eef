"""A flooded output pipe is grown and read in larger pieces, within a daemon-wide budget."""

from __future__ import annotations

import base64
import fcntl
import os
import pty
import sys

import pytest

from executor.process.streams import FLOOD_PIPE_BYTES, PipeGrowth
from tests.support.client import WsClient, output_of

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="F_SETPIPE_SZ is Linux's")


@linux_only
def test_a_pipe_is_grown_within_the_budget() -> None:
    growth = PipeGrowth(limit=1)
    first, second = os.pipe(), os.pipe()
    try:
        assert growth.grow(first[0])
        assert fcntl.fcntl(first[0], fcntl.F_GETPIPE_SZ) == FLOOD_PIPE_BYTES
        assert not growth.grow(second[0])  # the budget is spent: the pipe stays as it was
        assert fcntl.fcntl(second[0], fcntl.F_GETPIPE_SZ) < FLOOD_PIPE_BYTES
        growth.release()
        assert growth.grow(second[0])
        assert growth.grown == 1
    finally:
        for fd in (*first, *second):
            os.close(fd)


def test_a_terminal_is_not_grown_and_costs_nothing() -> None:
    growth = PipeGrowth(limit=1)
    master, slave = pty.openpty()
    try:
        assert not growth.grow(master)
        assert growth.grown == 0
    finally:
        os.close(master)
        os.close(slave)


@linux_only
def test_a_flood_arrives_whole_in_larger_chunks(client: WsClient) -> None:
    """1 MiB writes fill the pipe: it grows, and later chunks carry more than 64 KiB."""
    size = 8 * 1024 * 1024
    argv = ["/bin/dd", "if=/dev/zero", "bs=1M", f"count={size >> 20}", "status=none"]
    _result, events = client.run("flood", argv, timeout=60)
    assert output_of(events) == bytes(size)
    outputs = [e for e in events if e["method"] == "process/output"]
    seqs = [e["params"]["seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1))  # one counter, no gaps
    largest = max(len(base64.b64decode(e["params"]["chunk"])) for e in outputs)
    assert 64 * 1024 < largest <= FLOOD_PIPE_BYTES
