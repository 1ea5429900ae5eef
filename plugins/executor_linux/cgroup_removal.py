"""Removing command cgroups: killing what is left in one, and sweeping those that daemons
which are gone left behind (daemon side).

Used by the command cgroups (``cgroups.py``) and the loopback guard's (``cgroup2.py``).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import signal
import time
from typing import Final

__all__ = ["remove", "sweep"]

log = logging.getLogger("executor.sandbox.linux")

_COMMAND_NAME: Final = re.compile(r"^(\d+)-[0-9a-f]+$")
#: A command cgroup older than this whose daemon is gone is swept (then it cannot be one that
#: another daemon, in another PID namespace, is still setting up).
_STALE_AFTER: Final = 60.0
_KILL_WAIT: Final = 1.0


def read_text(path: str) -> str:
    """A cgroup or /proc file's text, empty when it cannot be read (gone, or not ours)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def write_text(path: str, text: str) -> None:
    """Write a cgroup control file (``OSError`` as the kernel refuses it)."""
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def sweep(base: str) -> None:
    """Remove empty cgroups (named ``<pid>-<random>``) that daemons which are gone left
    behind; one with processes left fails to go, and they stay in it."""
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        match = _COMMAND_NAME.match(entry.name)
        if match is None or int(match.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(match.group(1)), 0)
            continue  # its daemon (or a process reusing the pid) is alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        try:
            if now - entry.stat().st_mtime > _STALE_AFTER:
                os.rmdir(entry.path)
        except OSError:
            continue


def remove(directory: str, wait: float = _KILL_WAIT) -> bool:
    """Kill what is left in ``directory`` and remove it; False if it is still there."""
    deadline = time.monotonic() + wait
    while True:
        try:
            os.rmdir(directory)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                log.warning("cannot remove cgroup %s: %s", directory, exc.strerror)
                return False
        _kill_all(directory)
        if time.monotonic() >= deadline:
            log.info("cgroup %s still has processes; removed later", directory)
            return False
        time.sleep(0.01)


def _kill_all(directory: str) -> None:
    """SIGKILL every process in the cgroup: ``cgroup.kill`` (v2, exact), else one by one."""
    kill = os.path.join(directory, "cgroup.kill")
    if os.path.exists(kill):
        try:
            write_text(kill, "1")
            return
        except OSError:
            pass
    for text in read_text(os.path.join(directory, "cgroup.procs")).split():
        try:
            os.kill(int(text), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
