"""``process/output`` params as ready JSON parts: the chunk's base64 is never copied again.

Output is most of what the daemon sends. Encoded as an ordinary message, each chunk's
base64 text was copied twice more after encoding (quoted into an ``orjson.Fragment``, then
into the serialized message), and each copy of ~87 KB landed in fresh pages: profiled, page
faults in those copies were a fifth of the daemon's CPU per byte of output. Here the params
are three parts — the head (``{"processId":…,"seq":…,"stream":…,"chunk":"``), the base64
text as encoded, and ``"}`` — which the transport writes with the frame header in one
``writev``. The JSON is the same, key for key, as ``ProcessOutput.to_wire()`` serialized.
"""

from __future__ import annotations

from executor.protocol import b64codec, jsonrpc
from executor.protocol.messages import OutputChunk, Stream

__all__ = ["OutputEncoder"]

_STREAM_FIELDS = {
    stream: b',"stream":"' + stream.value.encode() + b'","chunk":"' for stream in Stream
}
_TAIL = b'"}'


class OutputEncoder:
    """Encodes the ``process/output`` params of one process."""

    __slots__ = ("_head",)

    def __init__(self, process_id: str) -> None:
        self._head = b'{"processId":' + jsonrpc.dumps(process_id) + b',"seq":'

    def __call__(self, chunk: OutputChunk) -> jsonrpc.Spliced:
        """The params of ``chunk``'s notification, as parts."""
        head = self._head + str(chunk.seq).encode() + _STREAM_FIELDS[chunk.stream]
        return jsonrpc.Spliced((head, b64codec.encode(chunk.data), _TAIL))
