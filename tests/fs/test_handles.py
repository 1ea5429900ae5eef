"""``fs/open``, ``fs/readBlock``, ``fs/writeBlock``, ``fs/close`` (protocol.md §5.21-§5.24)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fs.helpers import b64, error, unb64, uri
from tests.support.client import WsClient
from tests.support.daemon import RunningDaemon

DATA = bytes(i % 256 for i in range(4096))
UNKNOWN = "unknown file handle `nope`"
DUPLICATE = "file handle `h` already exists"


@pytest.fixture
def data_file(workspace: Path) -> Path:
    """The 4096-byte file of the captured transcript (bytes 0, 1, 2, ...)."""
    path = workspace / "data.bin"
    path.write_bytes(DATA)
    return path


def read(client: WsClient, handle: str, offset: int, length: int) -> dict[str, Any]:
    """One fs/readBlock result, chunk decoded."""
    result = client.request("fs/readBlock", {"handleId": handle, "offset": offset, "len": length})
    return {"chunk": unb64(result["chunk"]), "eof": result["eof"]}


def test_open_reads_by_default(client: WsClient, data_file: Path) -> None:
    """``mode`` defaults to read; the id is echoed."""
    assert client.request("fs/open", {"handleId": "h1", "path": uri(data_file)}) == {
        "handleId": "h1"
    }
    assert read(client, "h1", 0, 10) == {"chunk": DATA[:10], "eof": False}


@pytest.mark.parametrize(
    ("offset", "length", "expected", "eof"),
    [
        (0, 10, DATA[:10], False),
        (0, 4096, DATA, False),
        (4090, 100, DATA[4090:], True),
        (4096, 100, b"", True),
        (10_000, 1, b"", True),
        (100, 1_048_576, DATA[100:], True),
    ],
    ids=["start", "exact-end", "short-at-end", "at-eof", "past-eof", "largest-block"],
)
def test_read_block_positions(
    client: WsClient, data_file: Path, offset: int, length: int, expected: bytes, eof: bool
) -> None:
    """Positional reads; ``eof`` only when the read came back short."""
    client.request("fs/open", {"handleId": "h", "path": uri(data_file)})
    assert read(client, "h", offset, length) == {"chunk": expected, "eof": eof}


def test_replace_creates_truncates_and_writes(client: WsClient, workspace: Path) -> None:
    """``replace`` empties the file at open; positional writes leave a zero-filled hole."""
    target = workspace / "out.bin"
    target.write_bytes(b"previous content")
    client.request("fs/open", {"handleId": "w1", "path": uri(target), "mode": "replace"})
    assert target.read_bytes() == b""
    assert (
        client.request("fs/writeBlock", {"handleId": "w1", "offset": 5, "chunk": b64("hello")})
        == {}
    )
    client.request("fs/writeBlock", {"handleId": "w1", "offset": 0, "chunk": b64("ab")})
    assert target.read_bytes() == b"ab\0\0\0hello"
    client.request(
        "fs/open", {"handleId": "w2", "path": uri(workspace / "new.bin"), "mode": "replace"}
    )
    assert (workspace / "new.bin").exists()


def test_close_is_idempotent(client: WsClient, data_file: Path) -> None:
    """close answers ``{}`` for open, closed and unknown handles; a closed id can be reused."""
    client.request("fs/open", {"handleId": "h", "path": uri(data_file)})
    for _ in range(2):
        assert client.request("fs/close", {"handleId": "h"}) == {}
    assert client.request("fs/close", {"handleId": "never"}) == {}
    assert error(client, "fs/readBlock", {"handleId": "h", "offset": 0, "len": 1}) == (
        -32004,
        "unknown file handle `h`",
    )
    assert client.request("fs/open", {"handleId": "h", "path": uri(data_file)}) == {"handleId": "h"}


@pytest.mark.parametrize(
    ("method", "params", "code", "message"),
    [
        (
            "fs/readBlock",
            {"handleId": "h", "offset": 0, "len": 0},
            -32600,
            "file read block length must be between 1 and 1048576",
        ),
        (
            "fs/readBlock",
            {"handleId": "h", "offset": 0, "len": 1_048_577},
            -32600,
            "file read block length must be between 1 and 1048576",
        ),
        (
            "fs/readBlock",
            {"handleId": "nope", "offset": 0, "len": 0},
            -32600,
            "file read block length must be between 1 and 1048576",
        ),
        ("fs/readBlock", {"handleId": "nope", "offset": 0, "len": 1}, -32004, UNKNOWN),
        ("fs/readBlock", {"handleId": "h", "offset": 0, "len": -1}, -32602, None),
        ("fs/readBlock", {"handleId": "h", "offset": -1, "len": 1}, -32602, None),
        ("fs/readBlock", {"handleId": "h", "offset": 2**64, "len": 1}, -32602, None),
        (
            "fs/writeBlock",
            {"handleId": "h", "offset": 0, "chunk": ""},
            -32600,
            "file write block length must be between 1 and 1048576",
        ),
        (
            "fs/writeBlock",
            {"handleId": "nope", "offset": 2**63 - 1, "chunk": b64("xy")},
            -32600,
            "file write range exceeds the signed 64-bit file offset limit",
        ),
        ("fs/writeBlock", {"handleId": "h", "offset": 0, "chunk": "!!"}, -32602, None),
        ("fs/writeBlock", {"handleId": "h", "offset": 0}, -32602, "missing field `chunk`"),
        ("fs/writeBlock", {"handleId": "nope", "offset": 0, "chunk": b64("x")}, -32004, UNKNOWN),
        (
            "fs/writeBlock",
            {"handleId": "h", "offset": 0, "chunk": b64("x")},
            -32603,
            "Bad file descriptor (os error 9)",
        ),
        ("fs/open", {"handleId": "h", "path": "file:///none"}, -32600, DUPLICATE),
        ("fs/open", {"handleId": "h2", "path": "file:///tmp", "mode": "write"}, -32602, None),
    ],
    ids=[
        "len-zero",
        "len-too-big",
        "len-checked-before-handle",
        "read-unknown",
        "len-negative",
        "offset-negative",
        "offset-over-u64",
        "chunk-empty",
        "range-over-i64",
        "chunk-not-base64",
        "chunk-missing",
        "write-unknown",
        "write-on-read-handle",
        "duplicate-id",
        "bad-mode",
    ],
)
def test_handle_errors(
    client: WsClient,
    data_file: Path,
    method: str,
    params: dict[str, Any],
    code: int,
    message: str | None,
) -> None:
    """Each bad handle request fails as the reference does; the handle stays usable."""
    client.request("fs/open", {"handleId": "h", "path": uri(data_file)})
    got = error(client, method, params)
    assert got[0] == code
    if message is not None:
        assert got[1] == message
    assert read(client, "h", 0, 2)["chunk"] == DATA[:2]


def test_failed_read_forgets_the_handle(client: WsClient, workspace: Path, data_file: Path) -> None:
    """As in the reference, a failed read (EBADF on a replace handle, EINVAL) drops the handle."""
    client.request("fs/open", {"handleId": "w", "path": uri(workspace / "o"), "mode": "replace"})
    assert error(client, "fs/readBlock", {"handleId": "w", "offset": 0, "len": 1}) == (
        -32603,
        "Bad file descriptor (os error 9)",
    )
    assert (
        error(client, "fs/writeBlock", {"handleId": "w", "offset": 0, "chunk": b64("x")})[0]
        == -32004
    )
    client.request("fs/open", {"handleId": "r", "path": uri(data_file)})
    assert error(client, "fs/readBlock", {"handleId": "r", "offset": 2**63, "len": 1}) == (
        -32600,
        "Invalid argument (os error 22)",
    )
    assert error(client, "fs/readBlock", {"handleId": "r", "offset": 0, "len": 1})[0] == -32004


@pytest.mark.parametrize(
    ("name", "mode", "code", "message"),
    [
        ("dir", "read", -32600, "path `{root}/dir` is not a file"),
        ("missing", "read", -32004, "No such file or directory (os error 2)"),
        ("dir", "replace", -32603, "Is a directory (os error 21)"),
        ("nodir/x", "replace", -32004, "No such file or directory (os error 2)"),
        ("fifo", "read", -32600, "path `{root}/fifo` is not a file"),
    ],
    ids=["read-directory", "read-missing", "replace-directory", "replace-missing-parent", "fifo"],
)
def test_open_errors(
    client: WsClient, workspace: Path, name: str, mode: str, code: int, message: str
) -> None:
    """open refuses what it cannot open; a failed open does not take the id."""
    (workspace / "dir").mkdir()
    os.mkfifo(workspace / "fifo")
    got = error(client, "fs/open", {"handleId": "x", "path": uri(workspace / name), "mode": mode})
    assert got == (code, message.format(root=workspace))
    (workspace / "ok").write_bytes(b"ok")
    assert client.request("fs/open", {"handleId": "x", "path": uri(workspace / "ok")}) == {
        "handleId": "x"
    }


def test_open_follows_symlinks(client: WsClient, data_file: Path) -> None:
    """A symlink is opened as its target."""
    (data_file.parent / "link").symlink_to(data_file.name)
    client.request("fs/open", {"handleId": "l", "path": uri(data_file.parent / "link")})
    assert read(client, "l", 0, 3)["chunk"] == DATA[:3]


def test_handle_cap_per_connection(shared_daemon: RunningDaemon, data_file: Path) -> None:
    """At most 128 handles per connection; closing one frees a slot; other connections are apart."""
    with shared_daemon.session() as first, shared_daemon.session() as second:
        for index in range(128):
            first.request("fs/open", {"handleId": f"k{index}", "path": uri(data_file)})
        assert error(first, "fs/open", {"handleId": "k128", "path": uri(data_file)}) == (
            -32600,
            "at most 128 file handles may be open per connection",
        )
        assert error(second, "fs/readBlock", {"handleId": "k0", "offset": 0, "len": 1})[0] == -32004
        assert second.request("fs/open", {"handleId": "k0", "path": uri(data_file)}) == {
            "handleId": "k0"
        }
        first.request("fs/close", {"handleId": "k0"})
        assert first.request("fs/open", {"handleId": "k128", "path": uri(data_file)}) == {
            "handleId": "k128"
        }


def test_handles_do_not_survive_resume(shared_daemon: RunningDaemon, data_file: Path) -> None:
    """Handles belong to the connection: a resumed session does not see them."""
    first = shared_daemon.client()
    session = first.initialize("a")["sessionId"]
    first.request("fs/open", {"handleId": "h1", "path": uri(data_file)})
    first.close()
    deadline = time.monotonic() + 10
    while True:
        second = shared_daemon.client()
        response = second.call("initialize", {"clientName": "b", "resumeSessionId": session})
        if "result" in response or time.monotonic() > deadline:
            break
        second.close()
        time.sleep(0.05)
    second.notify("initialized", {})
    with second:
        assert error(second, "fs/readBlock", {"handleId": "h1", "offset": 0, "len": 1}) == (
            -32004,
            "unknown file handle `h1`",
        )


def test_pipelined_open_read_close(client: WsClient, data_file: Path) -> None:
    """Requests sent behind an open without waiting for it see the handle, in order."""
    messages = [
        {"id": "o", "method": "fs/open", "params": {"handleId": "p", "path": uri(data_file)}},
        {"id": "r", "method": "fs/readBlock", "params": {"handleId": "p", "offset": 0, "len": 4}},
        {"id": "c", "method": "fs/close", "params": {"handleId": "p"}},
        {"id": "r2", "method": "fs/readBlock", "params": {"handleId": "p", "offset": 0, "len": 4}},
    ]
    for message in messages:
        client.send(message)
    assert client.response("o")["result"] == {"handleId": "p"}
    assert unb64(client.response("r")["result"]["chunk"]) == DATA[:4]
    assert client.response("c")["result"] == {}
    assert client.response("r2")["error"]["code"] == -32004


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_handles_closed_when_connections_drop(
    daemon_factory: type[RunningDaemon], data_file: Path
) -> None:
    """Many connections full of handles (open, pending and in use) leave no descriptor behind."""
    daemon = daemon_factory()
    with daemon.session() as warm:
        warm.request("fs/open", {"handleId": "w", "path": uri(data_file)})
        read(warm, "w", 0, 1)
    time.sleep(0.2)
    baseline = _open_fds(daemon.pid)
    for round_ in range(10):
        connection = daemon.session()
        for index in range(128):
            mode = "replace" if index % 2 else "read"
            target = data_file if mode == "read" else data_file.parent / f"out-{round_}-{index}"
            connection.send(
                {
                    "id": index,
                    "method": "fs/open",
                    "params": {
                        "handleId": f"h{index}",
                        "path": uri(target),
                        "mode": mode,
                    },
                }
            )
        connection.response(0)
        connection.close()  # most opens and reads still in flight, some answered
    deadline = time.monotonic() + 10
    while _open_fds(daemon.pid) > baseline and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _open_fds(daemon.pid) <= baseline
    with daemon.session() as after:
        assert after.request("fs/open", {"handleId": "z", "path": uri(data_file)}) == {
            "handleId": "z"
        }
