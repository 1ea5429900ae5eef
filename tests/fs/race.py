"""An attacker that keeps swapping names inside a workspace for symlinks that lead out of it."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from types import TracebackType

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_LIBC = ctypes.CDLL(None, use_errno=True)


def exchange(first: Path, second: Path) -> None:
    """Atomically swap two names (``renameat2(RENAME_EXCHANGE)``)."""
    result = _LIBC.renameat2(
        _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
    )
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


class Swapper:
    """While running, ``workspace/sw`` flips between a real directory and a symlink to
    ``outside``, and ``workspace/fsw`` between a regular file and a symlink to
    ``outside/victim`` — each flip atomic, so every lookup sees one or the other."""

    def __init__(self, workspace: Path, outside: Path) -> None:
        self.workspace = workspace
        (workspace / "sw").mkdir()
        (workspace / "sw-link").symlink_to(outside)
        (workspace / "fsw").write_bytes(b"inside")
        (workspace / "fsw-link").symlink_to(outside / "victim")
        self.flips = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            exchange(self.workspace / "sw", self.workspace / "sw-link")
            exchange(self.workspace / "fsw", self.workspace / "fsw-link")
            self.flips += 1

    def __enter__(self) -> Swapper:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
