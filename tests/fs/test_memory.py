"""Memory: streamed reads keep the daemon flat; a whole-file read holds a small multiple."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.fs.helpers import uri
from tests.support.daemon import RunningDaemon

MiB = 1024 * 1024


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


@pytest.fixture
def big_file(tmp_path: Path) -> Path:
    """64 MiB of random bytes."""
    path = tmp_path / "big.bin"
    with path.open("wb") as handle:
        for _ in range(64):
            handle.write(os.urandom(MiB))
    return path


@pytest.mark.slow
def test_streamed_reads_keep_rss_flat(daemon_factory: type[RunningDaemon], big_file: Path) -> None:
    """64 MiB through fs/readBlock in 1 MiB blocks raises the daemon's peak RSS by < 16 MiB."""
    daemon = daemon_factory()
    with daemon.session() as client:
        client.request("fs/open", {"handleId": "s", "path": uri(big_file)})
        client.request("fs/readBlock", {"handleId": "s", "offset": 0, "len": MiB})
        time.sleep(0.1)
        baseline = _status(daemon.pid, "VmRSS")
        _reset_peak(daemon.pid)
        offset = 0
        while True:
            block = client.request("fs/readBlock", {"handleId": "s", "offset": offset, "len": MiB})
            offset += MiB
            if block["eof"]:
                break
        peak = _status(daemon.pid, "VmHWM")
    assert offset >= 64 * MiB
    assert peak - baseline < 16 * MiB, (peak - baseline) / MiB


@pytest.mark.slow
def test_whole_file_read_holds_a_small_multiple(
    daemon_factory: type[RunningDaemon], big_file: Path
) -> None:
    """fs/readFile of 64 MiB peaks below five times the encoded size (raw file never whole)."""
    daemon = daemon_factory()
    with daemon.session() as client:
        (big_file.parent / "small").write_bytes(b"warm-up")
        client.request("fs/readFile", {"path": uri(big_file.parent / "small")})
        baseline = _status(daemon.pid, "VmRSS")
        _reset_peak(daemon.pid)
        result = client.request("fs/readFile", {"path": uri(big_file)}, timeout=120)
        peak = _status(daemon.pid, "VmHWM")
    encoded = len(result["dataBase64"])
    assert encoded == (64 * MiB + 2) // 3 * 4
    assert peak - baseline < 5 * encoded, (peak - baseline) / encoded


def test_read_file_cap_points_to_streaming(
    daemon_factory: type[RunningDaemon], tmp_path: Path
) -> None:
    """Above the cap fs/readFile refuses with -32600 and names fs/open + fs/readBlock."""
    daemon = daemon_factory()
    path = tmp_path / "sparse"
    with path.open("wb") as handle:
        handle.truncate(257 * MiB)  # sparse: no disk space used
    with daemon.session() as client:
        response = client.call("fs/readFile", {"path": uri(path)})
    assert response["error"]["code"] == -32600
    assert "fs/open and fs/readBlock" in response["error"]["message"]
