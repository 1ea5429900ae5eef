"""The parts of ``fs/watchMissing``: the plan, the shared inotify hub, a watch's states.

In-process, with the real kernel (inotify, and a user namespace for its watch limit).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from executor.fs import inotify
from executor.fs.watch import MissingWatch
from executor.fs.watch_hub import WatchHub
from executor.fs.watch_plan import BASE_MASK, PRESENT_PARENT_MASK, make_plan, prefixes

linux_only = pytest.mark.skipif(not inotify.AVAILABLE, reason="inotify (Linux)")


def test_prefixes() -> None:
    assert prefixes("/") == ["/"]
    assert prefixes("/a") == ["/", "/a"]
    assert prefixes("/a/b/c") == ["/", "/a", "/a/b", "/a/b/c"]


def test_plan_watches_every_existing_ancestor(workspace: Path) -> None:
    (workspace / "a").mkdir()
    (workspace / "p").touch()
    deep = workspace / "a" / "b" / "c"
    plan = make_plan([str(deep)], str(workspace / "p"), 100)
    assert plan is not None
    chain = prefixes(str(workspace))
    assert plan.directories == {
        **dict.fromkeys(chain, BASE_MASK),
        str(workspace): PRESENT_PARENT_MASK,  # present is a file: its writes count
        str(workspace / "a"): BASE_MASK,
    }
    assert plan.triggers == {*prefixes(str(deep)), str(workspace / "p")}


def test_plan_refuses_past_its_directory_cap(workspace: Path) -> None:
    paths = [str(workspace / f"d{i}" / "m") for i in range(3)]
    for path in paths:
        os.mkdir(os.path.dirname(path))
    needed = len(prefixes(str(workspace))) + 3
    assert make_plan(paths, None, needed) is not None
    assert make_plan(paths, None, needed - 1) is None


def test_a_pending_watch_fires_after_its_response() -> None:
    fired: list[int] = []
    watch = MissingWatch(7, frozenset(), lambda w: fired.append(w.watch_id))
    watch.trigger()
    assert fired == []
    watch.activate()
    assert fired == [7]
    watch.trigger()
    watch.activate()
    assert fired == [7]

    cancelled = MissingWatch(8, frozenset(), lambda w: fired.append(w.watch_id))
    cancelled.trigger()
    cancelled.cancel()
    cancelled.activate()
    assert fired == [7]


class _Recorder:
    """A hub watch that records when it is triggered."""

    def __init__(self, triggers: set[str]) -> None:
        self.triggers = frozenset(triggers)
        self.hits = 0
        self.event = asyncio.Event()

    def trigger(self) -> None:
        self.hits += 1
        self.event.set()


def _inotify_fds() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            pass
    return count


@linux_only
def test_hub_shares_directories_and_closes_when_idle(workspace: Path) -> None:
    async def run() -> None:
        hub = WatchHub(max_directories=100)
        target = str(workspace / "m")
        plan = make_plan([target], None, 100)
        assert plan is not None
        first, second = _Recorder(set(plan.triggers)), _Recorder(set(plan.triggers))
        before = _inotify_fds()
        assert hub.acquire(first, plan.directories)
        assert hub.acquire(second, plan.directories)
        assert len(hub) == len(plan.directories)  # one kernel watch per directory
        assert _inotify_fds() == before + 1
        hub.release(first)
        assert len(hub) == len(plan.directories)
        (workspace / "unrelated").touch()
        (workspace / "m").mkdir()
        await asyncio.wait_for(second.event.wait(), 5)
        assert first.hits == 0
        hub.release(second)
        assert len(hub) == 0
        assert hub.descriptor is None
        assert _inotify_fds() == before

    asyncio.run(run())


@linux_only
def test_hub_refuses_past_its_cap_and_releases_what_it_took(workspace: Path) -> None:
    async def run() -> None:
        for name in "abc":
            (workspace / name).mkdir()
        directories = {str(workspace / name): BASE_MASK for name in "abc"}
        hub = WatchHub(max_directories=2)
        watch = _Recorder(set())
        assert not hub.acquire(watch, directories)
        assert len(hub) == 0
        assert hub.descriptor is None
        # A directory that vanished since it was examined: refused too.
        assert not hub.acquire(watch, {str(workspace / "gone"): BASE_MASK})
        assert hub.descriptor is None

    asyncio.run(run())


@linux_only
def test_the_kernel_watch_limit_is_watching_false(tmp_path: Path) -> None:
    """In a user namespace whose inotify watch budget is 3, a plan of 5 directories is
    refused by the kernel (``ENOSPC``) and nothing is left behind; 3 fit."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare(1)")
    for name in "abcde":
        (tmp_path / name).mkdir()
    script = textwrap.dedent(
        f"""
        import asyncio, pathlib
        from executor.fs.watch_hub import WatchHub
        from executor.fs.watch_plan import BASE_MASK
        pathlib.Path("/proc/sys/user/max_inotify_watches").write_text("3")
        class W:
            triggers = frozenset()
            def trigger(self): pass
        async def run():
            hub = WatchHub(100)
            dirs = {{str(pathlib.Path({str(tmp_path)!r}) / n): BASE_MASK for n in "abcde"}}
            assert not hub.acquire(W(), dirs)
            assert hub.descriptor is None and len(hub) == 0
            three = dict(list(dirs.items())[:3])
            assert hub.acquire(W(), three)
            print("ok")
        asyncio.run(run())
        """
    )
    result = subprocess.run(
        [unshare, "-U", "-r", sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    if result.returncode != 0 and "unshare failed" in result.stderr:
        pytest.skip(f"no user namespaces here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
