"""``process/output`` params written as parts are the same JSON as the ordinary encoding."""

from __future__ import annotations

import json

import pytest

from executor.process.output_wire import OutputEncoder
from executor.protocol import jsonrpc
from executor.protocol.messages import OutputChunk, ProcessOutput, Stream


@pytest.mark.parametrize("stream", list(Stream))
@pytest.mark.parametrize("process_id", ["p1", 'quote"and\\slash', "ünïcode ☃", ""])
@pytest.mark.parametrize("data", [b"", b"x", b"xy", b"hello\n", bytes(range(256)) * 300])
def test_parts_are_the_ordinary_notification(stream: Stream, process_id: str, data: bytes) -> None:
    chunk = OutputChunk(seq=12345, stream=stream, data=data)
    parts = jsonrpc.encode_notification_parts("process/output", OutputEncoder(process_id)(chunk))
    ordinary = jsonrpc.encode_notification(
        "process/output", ProcessOutput(process_id, chunk).to_wire()
    )
    spliced = b"".join(parts)
    assert spliced == ordinary  # byte for byte: the same keys, in the same order
    assert json.loads(spliced)["params"]["processId"] == process_id
