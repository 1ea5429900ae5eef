"""Opening regular files for reading or replacing, and whole-file reads and writes.

Every open happens at a resolved ``Location`` with ``O_NOFOLLOW`` and ``O_NONBLOCK`` after
the object was looked at without opening it: a FIFO or device is refused, never opened (the
reference blocks forever on a FIFO), and a symlink swapped in after resolution fails with
``ELOOP`` instead of being followed.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from typing import Final

from executor.fs import failures
from executor.fs.resolve import Location, Resolver
from executor.fs.view import denial
from executor.memory import huge_buffer
from executor.protocol import b64codec

__all__ = ["open_for_read", "open_for_replace", "read_file_base64", "write_file"]

_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_WRITE_FLAGS: Final = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: Raw bytes encoded per step of a whole-file read (a multiple of 3: base64 chunks concatenate).
_ENCODE_CHUNK: Final = 3 * 1024 * 1024
_SETID_BITS: Final = stat.S_ISUID | stat.S_ISGID
#: Answers at least this large are encoded into a mapping of their own (``huge_buffer``).
_HUGE_AT: Final = 4 * 1024 * 1024


def open_for_read(
    resolver: Resolver, location: Location, display: str, *, strict: bool = False
) -> tuple[int, os.stat_result]:
    """Open the regular file at ``location`` read-only; returns the descriptor and its stat.

    ``strict`` is ``followSymlinks: false``, which the reference reports with other words.
    """
    resolver.require_readable(location.path)
    before = os.stat(location.name, dir_fd=location.dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(before.st_mode):
        raise denial(errno.ELOOP)
    if not stat.S_ISREG(before.st_mode):
        raise failures.not_a_regular_file() if strict else failures.not_a_file(display)
    fd = os.open(location.name, _READ_FLAGS, dir_fd=location.dir_fd)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise failures.not_a_regular_file() if strict else failures.not_a_file(display)
        resolver.require_readable_file(location.path, opened)
    except BaseException:
        os.close(fd)
        raise
    return fd, opened


def open_for_replace(resolver: Resolver, location: Location, display: str) -> int:
    """Open the file at ``location`` for writing, empty: created or truncated (never a parent)."""
    for _ in range(2):  # a second round only when the name appears between the two opens
        try:
            return _open_existing_for_replace(resolver, location, display)
        except FileNotFoundError:
            pass
        resolver.require_entry_change(location.path)
        try:
            return os.open(
                location.name, _WRITE_FLAGS | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=location.dir_fd
            )
        except FileExistsError:
            continue
    raise denial(errno.EEXIST)


def _open_existing_for_replace(resolver: Resolver, location: Location, display: str) -> int:
    if not resolver.visibility(location.path).exists:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
    before = os.stat(location.name, dir_fd=location.dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(before.st_mode):
        raise denial(errno.ELOOP)
    if stat.S_ISDIR(before.st_mode):
        raise denial(errno.EISDIR)
    resolver.require_writable(location.path)
    if not stat.S_ISREG(before.st_mode):
        raise failures.not_a_file(display)
    fd = os.open(location.name, _WRITE_FLAGS, dir_fd=location.dir_fd)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise failures.not_a_file(display)
        if resolver.sandboxed:
            _guard_sandboxed_write(fd, opened, display)
        os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _guard_sandboxed_write(fd: int, opened: os.stat_result, display: str) -> None:
    # Another name of this inode may lie outside the writable roots: never write through it.
    if opened.st_nlink > 1:
        raise failures.hard_linked(display, opened.st_nlink)
    # We write as the daemon's user; an unprivileged writer would lose set-id bits, so do we.
    if opened.st_mode & _SETID_BITS:
        os.fchmod(fd, stat.S_IMODE(opened.st_mode) & ~_SETID_BITS)


def write_all(fd: int, data: bytes | memoryview, offset: int | None = None) -> None:
    """Write every byte of ``data`` (at ``offset``, or at the current position)."""
    view = memoryview(data)
    position = offset
    while view:
        if position is None:
            written = os.write(fd, view)
        else:
            written = os.pwrite(fd, view, position)
            position += written
        view = view[written:]


def write_file(resolver: Resolver, path: str, data: bytes, *, follow: bool) -> None:
    """``fs/writeFile``: create or truncate ``path`` and write ``data``."""
    with resolver.locate(path, follow_parents=follow, follow_final=follow) as location:
        fd = open_for_replace(resolver, location, path)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def read_file_base64(
    resolver: Resolver, path: str, *, follow: bool, limit: int
) -> bytearray | memoryview:
    """``fs/readFile``: the whole file as base64, refused above ``limit`` bytes."""
    with resolver.locate(path, follow_parents=follow, follow_final=follow) as location:
        fd, opened = open_for_read(resolver, location, path, strict=not follow)
    try:
        if opened.st_size > limit:
            raise failures.too_large(path, opened.st_size, limit)
        return _encode(fd, path, limit, opened.st_size)
    finally:
        os.close(fd)


def _encode(fd: int, path: str, limit: int, size_hint: int) -> bytearray | memoryview:
    # Encode while reading, into one buffer sized from the file's size: the raw file is never
    # held whole, and the base64 text is written once and sent as it is (the answer is
    # spliced around it). Each copy of a large answer costs tens of ms of page faults.
    size = 4 * ((size_hint + 2) // 3)
    encoded: bytearray | mmap.mmap = huge_buffer(size) if size >= _HUGE_AT else bytearray(size)
    chunk = bytearray(_ENCODE_CHUNK)  # a multiple of 3: chunk encodings concatenate
    total = position = 0
    while True:
        filled = _fill(fd, chunk)
        total += filled
        if total > limit:
            raise failures.too_large(path, total, limit)
        piece = b64codec.encode(memoryview(chunk)[:filled])
        end = position + len(piece)
        if end > len(encoded) and isinstance(encoded, mmap.mmap):
            encoded = bytearray(encoded[:position])  # the file grew: a buffer that grows
        encoded[position:end] = piece  # grows if the file grew
        position = end
        if filled < len(chunk):
            break
    if isinstance(encoded, mmap.mmap):
        return memoryview(encoded)[:position]  # the mapping goes when the answer is sent
    del encoded[position:]  # the file shrank since it was opened
    return encoded


def _fill(fd: int, buffer: bytearray) -> int:
    """Read until ``buffer`` is full or the file ends; returns the byte count."""
    view = memoryview(buffer)
    filled = 0
    while filled < len(buffer):
        count = os.readv(fd, [view[filled:]])
        if count == 0:
            break
        filled += count
    return filled
