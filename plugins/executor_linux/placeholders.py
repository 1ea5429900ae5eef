"""Host-side placeholders for protected paths that do not exist yet.

A mount needs an existing mount point, so a read-only ``.codex`` (or a denied path) that does
not exist inside a writable root is created on the host as an empty directory for as long as
some sandboxed command needs it, then removed if it is still empty. The reference does the
same; while a command runs, such empty directories are visible on the host.

Several executor processes (daemons, ``executor run``) may need the same placeholder at once
(``/tmp/.git`` for every command that may write ``/tmp``). Removing it while another process
still mounts over it would fail that launch, or worse: since Linux 3.18 removing a directory
that is a mount point in *another* mount namespace succeeds and detaches that mount, lifting
another command's protection. So use is coordinated across the user's executor processes
with three files in one lock directory (``lock_directory()``):

* ``mutex`` — held (``flock``) while a batch of placeholders is created or removed;
* ``use`` — a shared POSIX record lock on one byte per path (at an offset derived from the
  path) for as long as this process uses it; a process about to remove it asks the kernel
  (``F_GETLK``) whether any *other* process still holds that byte;
* ``record`` — the directories executors created, so that whichever process is the last user
  removes them, and never a directory the user made.

The registry is per user (and, for an ordinary user, per state directory), but the places
are not: ``/tmp/.git`` is every user's, and a process holds its record locks for all its
clients at once (one client's unlock ends them all). So each client also holds a shared
``flock`` on every placeholder directory it uses, on a descriptor of its own; a directory
is removed only under an exclusive ``flock`` taken without waiting (any holder, of any
registry or client, refuses it), and a holder that got its lock on a directory removed
meanwhile (no links left) makes it again. Without this, another user's ``executor run``
removed the ``/tmp/.git`` it had made while this daemon's launch was about to mount over
it, and that launch failed: ``mounts: ENOENT``.

One batch (a launch's placeholders) costs two ``flock`` calls and one record update, plus a
lock call, an ``open`` and a ``flock`` of the directory, and a ``mkdir``/``rmdir`` per
placeholder.
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import hashlib
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

__all__ = ["Placeholders", "lock_directory"]

log = logging.getLogger("executor.sandbox.linux")

#: ``struct flock`` on Linux (native alignment): type, whence, start, len, pid.
_FLOCK = struct.Struct("@hhqqi4x")
#: Offsets are 40-bit: two paths sharing one is vanishingly rare, and then only delays a
#: removal (the byte looks in use), never makes one early.
_OFFSET_BITS = 40
#: A directory is locked exclusively only for the length of its ``rmdir``, so a shared lock
#: waits briefly: anyone who can open the directory (a sandboxed command that sees it, too)
#: can hold an exclusive lock on purpose, and a launch should then fail soon, with a clear
#: error, not stall.
_LOCK_WAIT = 0.5
#: Times a placeholder is made again after another registry removed it under the lock.
_ATTEMPTS = 8
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def lock_directory(state_dir: str) -> str:
    """Where the placeholder locks live: one place per user on this machine, whatever state
    directory a daemon was given, so that every executor process of the user takes part."""
    if os.getuid() == 0 and os.access("/run", os.W_OK):
        return "/run/executor-placeholders"
    return os.path.join(state_dir, "placeholders")


class Placeholders:
    """Placeholder directories, reference-counted in this process and across processes.

    A placeholder no command of this process needs any more lingers for ``grace`` seconds
    before it is removed: back-to-back commands (every one needs ``/tmp/.git``) then reuse
    it instead of paying a ``mkdir`` and an ``rmdir`` each (~0.2 ms apiece on a VM's disk,
    a dozen placeholders per launch). Whatever lingers is removed when the process exits.
    """

    def __init__(self, lock_dir: Callable[[], str], grace: float = 1.0) -> None:
        self._lock_dir = lock_dir
        self._grace = grace
        self._counts: dict[str, int] = {}
        self._idle: dict[str, float] = {}  # path -> when it may be removed
        self._offsets: dict[int, int] = {}  # offset -> paths of this process holding it
        self._locked: dict[str, int] = {}  # path -> descriptor holding its shared flock
        self._lock = threading.Lock()
        self._files: tuple[int, int, int] | None = None
        self._timer: threading.Timer | None = None
        atexit.register(self.flush)

    def acquire(self, paths: Iterable[str]) -> Callable[[], None]:
        """Make sure each path exists; returns the release callback."""
        wanted = list(dict.fromkeys(paths))
        with self._lock:
            if all(path in self._counts or path in self._idle for path in wanted):
                # Every one is held by this client already (in use, or lingering): nothing
                # to create, and no executor removes what this one holds (its shared lock of
                # the directory refuses that), so the cross-process mutex (contended by every
                # executor of the user) is not taken.
                for path in wanted:
                    if self._idle.pop(path, None) is not None:
                        self._counts[path] = 0
                    self._counts[path] = self._counts.get(path, 0) + 1
                return self._releaser(wanted)
        with self._lock, self._batch() as (use, record):
            for path in wanted:
                if self._idle.pop(path, None) is not None:
                    self._counts[path] = 0  # still held: reused as it is
            fresh = [path for path in wanted if path not in self._counts]
            created: list[str] = []
            try:
                for path in fresh:
                    self._hold(use, path)
                    created += self._make_locked(path)
            except BaseException:
                for path in fresh:
                    self._unhold(use, path)
                    self._unlock(path)
                _remove_dirs(created)
                raise
            finally:
                if created:
                    os.write(record, "".join(f"{c}\n" for c in created).encode())
            for path in wanted:
                self._counts[path] = self._counts.get(path, 0) + 1
        return self._releaser(wanted)

    def _make_locked(self, path: str) -> list[str]:
        """Make ``path`` (and missing parents) and hold a shared lock on it; returns what
        was made. Made again if it was removed before the lock (by another registry)."""
        created: list[str] = []
        for _ in range(_ATTEMPTS):
            created += _make_dirs(path)
            fd = _lock_shared(path)
            if isinstance(fd, _Gone):
                continue
            if fd is not None:
                self._locked[path] = fd
            return created
        raise OSError(errno.EAGAIN, f"placeholder {path} was removed {_ATTEMPTS} times over")

    def _unlock(self, path: str) -> None:
        fd = self._locked.pop(path, None)
        if fd is not None:
            os.close(fd)

    def _releaser(self, paths: list[str]) -> Callable[[], None]:
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._release(paths)

        return release

    def _release(self, paths: list[str]) -> None:
        with self._lock:
            unused = []
            for path in paths:
                self._counts[path] -= 1
                if not self._counts[path]:
                    del self._counts[path]
                    unused.append(path)
            if not unused:
                return
            if self._grace <= 0:
                self._drop(unused)
                return
            deadline = time.monotonic() + self._grace
            for path in unused:
                self._idle[path] = deadline
            if self._timer is None:
                self._schedule(self._grace)

    def flush(self) -> None:
        """Remove every lingering placeholder now (at exit, or when asked)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            idle, self._idle = list(self._idle), {}
            if idle:
                self._drop(idle)

    def _schedule(self, delay: float) -> None:
        self._timer = threading.Timer(delay, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        with self._lock:
            self._timer = None
            now = time.monotonic()
            due = [path for path, deadline in self._idle.items() if deadline <= now]
            for path in due:
                del self._idle[path]
            if due:
                self._drop(due)
            if self._idle:
                self._schedule(max(0.01, min(self._idle.values()) - now))

    def _drop(self, paths: list[str]) -> None:
        """Stop holding ``paths``; remove those no other process holds. Lock held."""
        for path in paths:
            self._unlock(path)  # this client's own shared lock would refuse the removal
        try:
            with self._batch() as (use, record):
                last = []
                for path in paths:
                    self._unhold(use, path)
                    if not _held_elsewhere(use, _offset(path)):
                        last.append(path)
                if last:
                    _remove_recorded(record, last)
        except OSError as exc:
            log.warning("placeholders %s: could not release: %s", ", ".join(paths), exc)

    # --- the lock files -----------------------------------------------------------------------

    @contextmanager
    def _batch(self) -> Iterator[tuple[int, int]]:
        mutex, use, record = self._open()
        fcntl.flock(mutex, fcntl.LOCK_EX)
        try:
            os.lseek(record, 0, os.SEEK_END)
            yield use, record
        finally:
            fcntl.flock(mutex, fcntl.LOCK_UN)

    def _open(self) -> tuple[int, int, int]:
        if self._files is None:
            directory = self._lock_dir()
            os.makedirs(directory, mode=0o700, exist_ok=True)
            flags = os.O_CREAT | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
            opened = [os.open(os.path.join(directory, n), flags, 0o600) for n in _NAMES]
            self._files = (opened[0], opened[1], opened[2])
        return self._files

    def _hold(self, use: int, path: str) -> None:
        offset = _offset(path)
        if not self._offsets.get(offset):
            _lock_byte(use, fcntl.F_SETLK, fcntl.F_RDLCK, offset)
        self._offsets[offset] = self._offsets.get(offset, 0) + 1

    def _unhold(self, use: int, path: str) -> None:
        offset = _offset(path)
        left = self._offsets.get(offset, 0) - 1
        if left > 0:
            self._offsets[offset] = left
            return
        self._offsets.pop(offset, None)
        _lock_byte(use, fcntl.F_SETLK, fcntl.F_UNLCK, offset)


_NAMES = ("mutex", "use", "record")


def _offset(path: str) -> int:
    digest = hashlib.sha256(os.fsencode(path)).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - _OFFSET_BITS)


def _lock_byte(fd: int, command: int, kind: int, offset: int) -> bytes:
    request = _FLOCK.pack(kind, os.SEEK_SET, offset, 1, 0)
    result: bytes = fcntl.fcntl(fd, command, request)
    return result


def _held_elsewhere(use: int, offset: int) -> bool:
    """Whether another process holds the byte (F_GETLK ignores this process's own locks)."""
    answer = _lock_byte(use, fcntl.F_GETLK, fcntl.F_WRLCK, offset)
    return bool(_FLOCK.unpack(answer)[0] != fcntl.F_UNLCK)


def _remove_recorded(record: int, paths: list[str]) -> None:
    """Remove what executors created of ``paths`` (and their created parents)."""
    os.lseek(record, 0, os.SEEK_SET)
    recorded = os.read(record, 1 << 22).decode(errors="replace").splitlines()
    # Only these paths and their ancestors may go: a record line naming anything else was
    # not written for them and is not acted on.
    doomed = {
        line
        for line in recorded
        if any(line == path or path.startswith(line + "/") for path in paths)
    }
    left = _remove_dirs(sorted(doomed))  # e.g. a created parent another placeholder is in
    kept = [
        line for line in dict.fromkeys(recorded) if line and (line not in doomed or line in left)
    ]
    os.ftruncate(record, 0)
    os.lseek(record, 0, os.SEEK_SET)
    if kept:
        os.write(record, "".join(f"{line}\n" for line in kept).encode())


def _remove_dirs(directories: list[str]) -> set[str]:
    """Remove empty directories no one holds, innermost first; returns those still there
    (not empty, or in use)."""
    left: set[str] = set()
    for directory in sorted(set(directories), key=lambda d: d.count("/"), reverse=True):
        try:
            if not _remove_unused(directory):
                left.add(directory)
        except FileNotFoundError:
            continue
        except OSError as exc:
            left.add(directory)
            if exc.errno not in (errno.ENOTEMPTY, errno.EBUSY):
                log.info("placeholder %s left as it is: %s", directory, exc.strerror)
    return left


def _remove_unused(directory: str) -> bool:
    """``rmdir`` under an exclusive lock of the directory; False when someone holds it."""
    fd = os.open(directory, _DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a client (of any registry) uses it
        locked, named = os.fstat(fd), os.lstat(directory)
        if (locked.st_dev, locked.st_ino) != (named.st_dev, named.st_ino):
            return False  # replaced meanwhile: not the directory that was found unused
        os.rmdir(directory)
        return True
    finally:
        os.close(fd)


class _Gone:
    """``_lock_shared``'s answer when the directory was removed before it was locked."""


_GONE = _Gone()


def _lock_shared(path: str) -> int | _Gone | None:
    """A descriptor of directory ``path`` holding a shared ``flock`` (none while it is being
    removed), ``_GONE`` if it is no longer there, None if it is no directory this process
    can open: a file or a symlink (no executor removes those), or another user's directory
    it may not read (then its maker's executors cannot see this use of it)."""
    try:
        fd = os.open(path, _DIRECTORY)
    except FileNotFoundError:
        return _GONE
    except OSError:
        return None
    try:
        deadline = time.monotonic() + _LOCK_WAIT
        delay = 0.0005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                # Exclusive only while one is removed: wait for that, not for ever.
                if time.monotonic() >= deadline:
                    raise OSError(
                        errno.EBUSY, f"placeholder {path} is locked by another process"
                    ) from None
                time.sleep(delay)
                delay = min(2 * delay, 0.05)
        if os.fstat(fd).st_nlink == 0:
            os.close(fd)
            return _GONE  # removed between the open and the lock
    except BaseException:
        os.close(fd)
        raise
    return fd


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
        except FileNotFoundError:
            break  # a parent another registry made was removed meanwhile: made again
        created.append(directory)
    return created
