"""Host-side placeholders for protected paths that do not exist yet.

A mount needs an existing mount point, so a read-only ``.codex`` (or a denied path) that does
not exist inside a writable root is created on the host as an empty directory for as long as
some sandboxed command needs it, then removed if it is still empty. The reference does the
same; while a command runs, such empty directories are visible on the host.

Several executor processes (daemons, ``executor run``) may need the same placeholder at once
(``/tmp/.git`` for every command that may write ``/tmp``). Removing it while another process
still mounts over it would fail that launch, or worse: since Linux 3.18 removing a directory
that is a mount point in *another* mount namespace succeeds and detaches that mount, lifting
another command's protection. So use is coordinated across processes with ``flock`` on two
files per path (``lock_directory()``): a *use* lock every user holds shared for
as long as it needs the placeholder, and a *mutex* under which placeholders are created and
removed; the mutex file records which directories an executor created, so that whichever
process is the last user removes them — and never a directory the user made.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

__all__ = ["Placeholders", "lock_directory"]

log = logging.getLogger("executor.sandbox.linux")


def lock_directory(state_dir: str) -> str:
    """Where the placeholder locks live: one place per user on this machine, whatever state
    directory a daemon was given, so that every executor process of the user takes part."""
    if os.getuid() == 0 and os.access("/run", os.W_OK):
        return "/run/executor-placeholders"
    return os.path.join(state_dir, "placeholders")


class Placeholders:
    """Placeholder directories, reference-counted in this process and across processes."""

    def __init__(self, lock_dir: Callable[[], str]) -> None:
        self._lock_dir = lock_dir
        self._counts: dict[str, int] = {}
        self._use_fds: dict[str, int] = {}
        self._lock = threading.Lock()

    def acquire(self, paths: Iterable[str]) -> Callable[[], None]:
        """Make sure each path exists; returns the release callback."""
        held: list[str] = []
        try:
            for path in paths:
                self._acquire_one(path)
                held.append(path)
        except BaseException:
            self._release(held)
            raise
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._release(held)

        return release

    def _files(self, path: str) -> tuple[str, str]:
        directory = self._lock_dir()
        os.makedirs(directory, mode=0o700, exist_ok=True)
        key = hashlib.sha256(os.fsencode(path)).hexdigest()[:40]
        return os.path.join(directory, f"{key}.mutex"), os.path.join(directory, f"{key}.use")

    def _acquire_one(self, path: str) -> None:
        with self._lock:
            count = self._counts.get(path, 0)
            if count == 0:
                mutex_file, use_file = self._files(path)
                with _exclusive(mutex_file) as record:
                    use = os.open(use_file, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
                    fcntl.flock(use, fcntl.LOCK_SH)
                    try:
                        created = _make_dirs(path)
                    except BaseException:
                        os.close(use)
                        raise
                    if created:
                        os.write(record, "".join(f"{c}\n" for c in created).encode())
                self._use_fds[path] = use
            self._counts[path] = count + 1

    def _release(self, paths: list[str]) -> None:
        with self._lock:
            for path in paths:
                self._counts[path] -= 1
                if self._counts[path]:
                    continue
                del self._counts[path]
                try:
                    self._release_last(path)
                except OSError as exc:
                    log.warning("placeholder %s: could not release: %s", path, exc)

    def _release_last(self, path: str) -> None:
        mutex_file, use_file = self._files(path)
        with _exclusive(mutex_file) as record:
            os.close(self._use_fds.pop(path))
            probe = os.open(use_file, os.O_RDWR | os.O_CLOEXEC)
            try:
                try:
                    fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return  # another process still uses it; the last one removes it
                os.lseek(record, 0, os.SEEK_SET)
                recorded = os.read(record, 1 << 20).decode(errors="replace").splitlines()
                # Only this path and its ancestors can be ours: a record that names anything
                # else was not written by an executor and is not acted on.
                _remove_created([c for c in recorded if c == path or path.startswith(c + "/")])
                os.ftruncate(record, 0)
            finally:
                os.close(probe)


@contextmanager
def _exclusive(mutex_file: str) -> Iterator[int]:
    """The mutex held exclusively; yields its descriptor, positioned at the end."""
    fd = os.open(mutex_file, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.lseek(fd, 0, os.SEEK_END)
        yield fd
    finally:
        os.close(fd)


def _remove_created(created: list[str]) -> None:
    """Remove what executors created, innermost first, stopping at what is not empty."""
    for directory in sorted(dict.fromkeys(created), key=lambda d: d.count("/"), reverse=True):
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.info("placeholder %s left as it is: %s", directory, exc.strerror)


def _make_dirs(path: str) -> list[str]:
    """Create ``path`` and missing parents; return what was created, outermost first."""
    missing: list[str] = []
    current = path
    while not os.path.lexists(current):
        missing.append(current)
        current = os.path.dirname(current)
    created: list[str] = []
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o755)
        except FileExistsError:
            continue  # made meanwhile by someone outside the executor: theirs, not ours
        created.append(directory)
    return created
