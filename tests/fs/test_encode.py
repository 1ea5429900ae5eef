"""Whole-file base64 (``fs/readFile``): the answer matches the file read, whatever size the
file had when it was opened (it may grow or shrink meanwhile), in either kind of buffer."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from executor.fs import files

MiB = 1024 * 1024


@pytest.mark.parametrize("size", [0, 5, 3 * MiB + 1, 9 * MiB + 2], ids=str)
@pytest.mark.parametrize("hint_delta", [0, -4 * MiB, 4 * MiB, -1, 1], ids=str)
def test_encoded_file_is_exact_whatever_the_size_hint(
    tmp_path: Path, size: int, hint_delta: int
) -> None:
    """A hint below the size (the file grew) or above it (it shrank) still gives the file."""
    data = os.urandom(size)
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        encoded = files._encode(fd, str(path), 1 << 40, max(0, size + hint_delta))
    finally:
        os.close(fd)
    assert bytes(encoded) == base64.b64encode(data)


def test_large_answers_use_a_mapping_of_their_own(tmp_path: Path) -> None:
    """A large answer is a view of its own mapping (not a heap buffer), exactly as long."""
    data = os.urandom(6 * MiB)
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        encoded = files._encode(fd, str(path), 1 << 40, len(data))
    finally:
        os.close(fd)
    assert isinstance(encoded, memoryview)
    assert len(encoded) == len(base64.b64encode(data))
