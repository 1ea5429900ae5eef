"""Types of the C loops in ``_frames.c`` (see there)."""

from typing import Any

def texts(
    source: bytes | bytearray, offset: int, max_frame: int, events: list[Any], message: type, /
) -> int: ...
def continuations(
    source: bytes | bytearray, offset: int, max_frame: int, budget: int, /
) -> tuple[bytes, int]: ...
