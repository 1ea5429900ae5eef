"""Host-side checks on the processes a test started through the daemon."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable

import psutil

from tests.support.client import WsClient


def eventually(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Whether ``condition`` holds within ``timeout`` seconds (polled)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether ``pid`` ends (or is only a zombie) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


def pid_from_first_output(client: WsClient, process_id: str) -> int:
    """The pid a process printed as the first word of its first output chunk."""
    note = client.notification(
        "process/output", where=lambda n: n["params"]["processId"] == process_id
    )
    return int(base64.b64decode(note["params"]["chunk"]).split()[0])
