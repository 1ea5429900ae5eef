"""``fs/watchMissing`` and ``fs/missingChanged`` against a real daemon, real files, real inotify.

Every rule asserted here was measured on the reference (codex exec-server 0.171.0) first;
docs/watch-missing.md lists them. Waits are bounded: a notification that should come is
awaited for at most ``ARRIVES`` seconds, one that should not is looked for during ``QUIET``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fs.helpers import error, uri
from tests.support.client import WsClient
from tests.support.daemon import RunningDaemon

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify (Linux)")

ARRIVES = 5.0
QUIET = 0.3


def watch(
    client: WsClient, watch_id: int, missing: list[Path | str], present: Path | str | None = None
) -> bool:
    """Call ``fs/watchMissing``; paths are turned into URIs, strings are sent as they are."""
    params = {
        "watchId": watch_id,
        "missing": [p if isinstance(p, str) else uri(p) for p in missing],
        "present": present if isinstance(present, str | None) else uri(present),
    }
    result = client.request("fs/watchMissing", params)
    assert set(result) == {"watching"}
    watching: bool = result["watching"]
    return watching


def changed(client: WsClient, watch_id: int) -> None:
    """The next ``fs/missingChanged`` arrives, exactly as the reference sends it."""
    note = client.notification("fs/missingChanged", timeout=ARRIVES)
    assert note == {"method": "fs/missingChanged", "params": {"watchId": watch_id}}


def quiet(client: WsClient, seconds: float = QUIET) -> None:
    """No ``fs/missingChanged`` arrives for ``seconds``."""
    with pytest.raises(TimeoutError):
        client.notification("fs/missingChanged", timeout=seconds)


@pytest.fixture
def ws(workspace: Path) -> Path:
    return workspace


# --- when it fires --------------------------------------------------------------------------


def test_missing_path_appears(client: WsClient, ws: Path) -> None:
    """Creating the path fires once; the watch is then over (a later change says nothing)."""
    assert watch(client, 1, [ws / "a"])
    quiet(client)
    (ws / "a").mkdir()
    changed(client, 1)
    (ws / "a").rmdir()
    (ws / "a").mkdir()
    quiet(client)


def test_first_missing_ancestor_appears(client: WsClient, ws: Path) -> None:
    """A path three levels down: its first missing ancestor appearing is the change."""
    assert watch(client, 1, [ws / "a" / "b" / "c"])
    (ws / "a").mkdir()
    changed(client, 1)


def test_several_changes_at_once_are_one_notification(client: WsClient, ws: Path) -> None:
    """Created and removed at once, or several paths at once: one notification."""
    assert watch(client, 1, [ws / "a", ws / "b", ws / "c"])
    for name in "abc":
        (ws / name).mkdir()
    (ws / "a").rmdir()
    changed(client, 1)
    quiet(client)


def _renamed_into_place(ws: Path) -> None:
    (ws / "tmp").mkdir()
    os.rename(ws / "tmp", ws / "m")


def _hard_linked(ws: Path) -> None:
    (ws / "f").touch()
    os.link(ws / "f", ws / "m")


@pytest.mark.parametrize(
    "appear",
    [
        lambda ws: (ws / "m").write_text("x"),
        lambda ws: os.symlink(ws / "nowhere", ws / "m"),
        _renamed_into_place,
        _hard_linked,
    ],
    ids=["file", "dangling-symlink", "renamed-into-place", "hard-link"],
)
def test_any_kind_of_appearance(client: WsClient, ws: Path, appear: Callable[[Path], None]) -> None:
    assert watch(client, 1, [ws / "m"])
    appear(ws)
    changed(client, 1)


@pytest.mark.parametrize(
    "change",
    [
        lambda ws: os.chmod(ws, 0o750),
        lambda ws: os.chmod(ws.parent, 0o750),
        lambda ws: os.rename(ws, ws.with_name("moved")),
        lambda ws: os.rmdir(ws),
    ],
    ids=["chmod-parent", "chmod-grandparent", "parent-renamed", "parent-removed"],
)
def test_ancestor_changes_fire(client: WsClient, ws: Path, change: Callable[[Path], None]) -> None:
    """Every existing ancestor is watched: a rename, removal or ``chmod`` of one fires."""
    assert watch(client, 1, [ws / "m"])
    change(ws)
    changed(client, 1)


def test_unrelated_changes_do_not_fire(client: WsClient, ws: Path) -> None:
    """Siblings, name prefixes, changes below an ancestor's other children: nothing."""
    (ws / "sibling").write_text("x")
    (ws / "other").mkdir()
    assert watch(client, 1, [ws / "a" / "m"])
    (ws / "new-file").touch()
    (ws / "sibling").write_text("y")
    (ws / "sibling").read_text()
    (ws / "ab").mkdir()
    (ws / "a.tmp").touch()
    (ws / "other" / "x").mkdir()
    os.chmod(ws / "other", 0o700)
    quiet(client)
    (ws / "a").mkdir()
    changed(client, 1)


def test_present_changes_fire(client: WsClient, ws: Path) -> None:
    """``present`` is watched too: removed, modified or ``chmod``-ed, it fires."""
    (ws / "p").write_text("x")
    assert watch(client, 1, [ws / "m"], ws / "p")
    (ws / "p").read_text()
    fd = os.open(ws / "p", os.O_WRONLY)  # opened and closed for writing, nothing written
    os.close(fd)
    quiet(client)
    with (ws / "p").open("a") as file:
        file.write("y")
    changed(client, 1)

    (ws / "d").mkdir()
    assert watch(client, 2, [ws / "m"], ws / "d")
    (ws / "d" / "inside").touch()
    quiet(client)
    os.rename(ws / "d", ws / "e")
    changed(client, 2)


# --- what is watched ------------------------------------------------------------------------


def test_watching_false(client: WsClient, ws: Path) -> None:
    """Every case the reference answers ``watching: false`` (each on a fresh, higher id)."""
    (ws / "dir").mkdir()
    (ws / "file").touch()
    os.mkfifo(ws / "fifo")
    os.symlink(ws / "dir", ws / "link")
    os.symlink(ws / "nowhere", ws / "dangling")
    cases: list[tuple[list[Path | str], Path | str | None]] = [
        ([ws / "dir"], None),  # a missing path exists
        ([ws / "dir", ws / "m"], None),  # one of several exists
        ([ws / "dangling"], None),  # a dangling symlink exists
        ([ws / "file" / "m"], None),  # under a file
        ([ws / "fifo" / "m"], None),  # under a FIFO
        ([ws / "link" / "m"], None),  # through a symlinked directory
        ([], None),  # nothing to watch
        ([], ws / "dir"),
        ([ws / f"m{i}" for i in range(65)], None),  # more than 64 paths
        ([ws / "m" for _ in range(65)], None),  # duplicates count
        ([ws / "m"], ws / "gone"),  # present does not exist
        ([ws / "m"], ws / "link"),  # present is a symlink
        ([ws / "m"], ws / "link" / "x"),  # present under a symlink
        (["file://otherhost/tmp/m"], None),  # another host: not an error, nothing watched
        ([ws / "m", "file:///C:/m"], None),  # a Windows drive on Linux
        ([ws / "m"], "file://otherhost/tmp/p"),
        ([Path("/")], None),  # "/" always exists
    ]
    for watch_id, (missing, present) in enumerate(cases, start=1):
        assert not watch(client, watch_id, missing, present), (missing, present)


def test_watching_true(client: WsClient, ws: Path) -> None:
    """64 paths, a ``present`` file, directory or FIFO, ``/`` as ``present``, odd spellings."""
    (ws / "file").touch()
    (ws / "dir").mkdir()
    os.mkfifo(ws / "fifo")
    assert watch(client, 1, [ws / f"m{i}" for i in range(64)])
    assert watch(client, 2, [ws / f"m{i}" for i in range(64)], ws / "file")
    assert watch(client, 3, [ws / "m"], ws / "dir")
    assert watch(client, 4, [ws / "m"], ws / "fifo")
    assert watch(client, 5, [ws / "m"], Path("/"))
    assert watch(client, 6, [ws / "m", ws / "m"])
    assert watch(client, 7, [uri(ws) + "/dir/../m/"])
    assert watch(client, 8, ["file://localhost" + uri(ws)[7:] + "/m"])
    (ws / "m").mkdir()
    changed(client, 8)


# --- ids and ownership ----------------------------------------------------------------------


def test_ids_must_increase(client: WsClient, ws: Path) -> None:
    """An id not above every earlier one is refused and changes nothing; 0 is never valid."""
    assert not watch(client, 0, [ws / "z"])
    assert watch(client, 5, [ws / "a"])
    assert not watch(client, 5, [ws / "b"])
    assert not watch(client, 3, [ws / "b"])
    (ws / "b").mkdir()
    quiet(client)
    (ws / "a").mkdir()
    changed(client, 5)
    assert not watch(client, 5, [ws / "c"])  # an id that has fired is still used
    assert watch(client, 6, [ws / "c"])
    (ws / "c").mkdir()
    changed(client, 6)
    assert watch(client, 2**64 - 1, [ws / "d"])
    (ws / "d").mkdir()
    changed(client, 2**64 - 1)


def test_a_later_call_replaces_the_watch(client: WsClient, ws: Path) -> None:
    """One watch per connection: any call with a higher id ends the current one, even a call
    that answers false; only the new one fires."""
    assert watch(client, 1, [ws / "a"])
    assert watch(client, 2, [ws / "b"])
    (ws / "a").mkdir()
    quiet(client)
    (ws / "b").mkdir()
    changed(client, 2)

    assert watch(client, 3, [ws / "c"])
    assert not watch(client, 4, [ws / "a"])  # exists: false, and watch 3 is gone
    assert not watch(client, 4, [ws / "d"])  # and id 4 was used
    (ws / "c").mkdir()
    quiet(client)


def test_pipelined_calls_are_taken_in_arrival_order(client: WsClient, ws: Path) -> None:
    """Calls sent without waiting answer as one after the other would: the later id wins."""
    for request_id, watch_id, name in (("w1", 1, "a"), ("w2", 2, "b"), ("w0", 1, "c")):
        params = {"watchId": watch_id, "missing": [uri(ws / name)]}
        client.send({"id": request_id, "method": "fs/watchMissing", "params": params})
    assert client.response("w1")["result"] == {"watching": True}
    assert client.response("w2")["result"] == {"watching": True}
    assert client.response("w0")["result"] == {"watching": False}
    (ws / "a").mkdir()
    (ws / "c").mkdir()
    quiet(client)
    (ws / "b").mkdir()
    changed(client, 2)


def test_connections_are_independent(shared_daemon: RunningDaemon, ws: Path) -> None:
    """Two connections use the same ids; each is told about its own watch."""
    with shared_daemon.session() as first, shared_daemon.session() as second:
        assert watch(first, 7, [ws / "a"])
        assert watch(second, 7, [ws / "a"])
        assert watch(second, 8, [ws / "b"])
        (ws / "a").mkdir()
        changed(first, 7)
        quiet(second)
        (ws / "b").mkdir()
        changed(second, 8)
        quiet(first, 0.1)


def _resume(daemon: RunningDaemon, session_id: str) -> WsClient:
    """A new connection that resumes ``session_id`` (once the daemon has seen the old one go)."""
    deadline = time.monotonic() + 10
    while True:
        client = daemon.client()
        response = client.call("initialize", {"clientName": "b", "resumeSessionId": session_id})
        if "result" in response:
            client.notify("initialized", {})
            return client
        client.close()
        assert time.monotonic() < deadline, response
        time.sleep(0.05)


def test_watch_ends_with_its_connection(shared_daemon: RunningDaemon, ws: Path) -> None:
    """The session survives a disconnect, its watch does not: nothing arrives after a resume,
    and the resumed connection counts ids from 0 again."""
    first = shared_daemon.client()
    session = first.initialize("a")["sessionId"]
    assert watch(first, 5, [ws / "a"])
    first.close()
    with _resume(shared_daemon, session) as second:
        (ws / "a").mkdir()
        quiet(second)
        assert watch(second, 1, [ws / "b"])
        (ws / "b").mkdir()
        changed(second, 1)


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("missing", "present", "message"),
    [
        (["relative/path"], None, "invalid URI: relative URL without a base"),
        (["/no/scheme"], None, "invalid URI: relative URL without a base"),
        (["http://host/x"], None, "unsupported path URI scheme `http`"),
        (["file:///tmp/x?y"], None, "query parameters are not allowed in path URIs"),
        (["file:///tmp/x#y"], None, "fragments are not allowed in path URIs"),
        (["file:///tmp/ok", "relative"], None, "invalid URI: relative URL without a base"),
        (["file:///tmp/ok"], "relative", "invalid URI: relative URL without a base"),
        (["file://otherhost/x", "relative"], None, "invalid URI: relative URL without a base"),
    ],
)
def test_bad_uris_are_errors_that_change_nothing(
    client: WsClient, ws: Path, missing: list[str], present: str | None, message: str
) -> None:
    """``-32602`` for a URI that is not an absolute ``file:`` URI, whatever the id; the
    current watch and the id counter are untouched."""
    assert watch(client, 5, [ws / "a"])
    params = {"watchId": 6, "missing": missing, "present": present}
    assert error(client, "fs/watchMissing", params) == (-32602, message)
    assert error(client, "fs/watchMissing", {**params, "watchId": 1}) == (-32602, message)
    assert client.request("environment/info") is not None  # the connection is fine
    (ws / "a").mkdir()
    changed(client, 5)
    assert watch(client, 6, [ws / "b"])


def test_bad_params(client: WsClient) -> None:
    """Shapes serde refuses are ``-32602``."""
    params: object
    for params in (
        None,
        {"missing": []},
        {"watchId": 1},
        {"watchId": -1, "missing": []},
        {"watchId": "1", "missing": []},
        {"watchId": 1, "missing": None},
        {"watchId": 1, "missing": "file:///x"},
        {"watchId": 1, "missing": [1]},
    ):
        code, _ = error(client, "fs/watchMissing", params)  # type: ignore[arg-type]
        assert code == -32602, params


def test_needs_the_handshake(shared_daemon: RunningDaemon) -> None:
    with shared_daemon.client() as client:
        params = {"watchId": 1, "missing": ["file:///tmp/x"]}
        assert error(client, "fs/watchMissing", params) == (
            -32600,
            "client must call initialize before using filesystem methods",
        )


def test_capability_is_advertised(shared_daemon: RunningDaemon) -> None:
    with shared_daemon.client() as client:
        info = client.initialize()["environmentInfo"]
        assert info["capabilities"]["fsWatchMissing"] is True


# --- resources ------------------------------------------------------------------------------


def _inotify_fds(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            pass
    return count


def _eventually(predicate: Callable[[], bool], what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.fixture
def own_daemon(daemon_factory: type[RunningDaemon]) -> RunningDaemon:
    """A daemon of this test's own (its descriptors are counted)."""
    return daemon_factory()


def test_no_inotify_descriptor_outlives_the_watches(own_daemon: RunningDaemon, ws: Path) -> None:
    """One shared descriptor while any watch lives; none once they fired, were replaced, or
    their connections ended (sessions left detached, resumable, still hold nothing)."""
    pid = own_daemon.pid
    assert _inotify_fds(pid) == 0
    clients = [own_daemon.session() for _ in range(5)]
    for index, client in enumerate(clients):
        assert watch(client, 1, [ws / f"m{index}" / "deep", ws / "shared"])
    assert _inotify_fds(pid) == 1
    (ws / "m0").mkdir()
    changed(clients[0], 1)
    (ws / "dir").mkdir()
    assert not watch(clients[1], 2, [ws / "dir"])  # exists: false, and watch 1 is over
    for client in clients[2:]:
        client.close()
    _eventually(lambda: _inotify_fds(pid) == 0, "the inotify descriptor was not closed")
    for client in clients[:2]:
        quiet(client, 0.05)
        client.close()
    # A new watch opens a new descriptor, and it goes as the first did.
    with own_daemon.session() as client:
        assert watch(client, 1, [ws / "again"])
        assert _inotify_fds(pid) == 1
    _eventually(lambda: _inotify_fds(pid) == 0, "the inotify descriptor was not closed")
