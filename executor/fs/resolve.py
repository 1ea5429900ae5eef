"""Path resolution that cannot be raced: every object is reached through descriptors.

A request path becomes a ``Location``: an open descriptor of the directory that holds the
object, the object's name in it, and the object's real path. Operations then act with
``*at`` system calls and ``O_NOFOLLOW`` on that name, so nothing an attacker swaps in after
resolution (a symlink, a renamed directory) can redirect them: at worst they fail.

Without a sandbox the kernel resolves directories (as the reference does). With a sandbox
every directory on the way is classified by its real path before it is entered:

* fast path — when every lexical prefix may be traversed, ``openat2`` with
  ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`` opens the directory from a
  descriptor of the deepest allowed root above it. Success proves the lexical path is the real
  path, so its classification holds;
* slow path — otherwise (a symlink on the way, or no ``openat2``), an ``O_NOFOLLOW`` walk one
  component at a time; each symlink is read from its own descriptor and the walk restarts on
  the resulting real path, so every directory entered was classified first.

``followSymlinks: false`` walks without following anything: a symlinked directory on the way
gives ``ENOTDIR``, as in the reference.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from dataclasses import dataclass
from types import TracebackType
from typing import Final

from executor.fs import syscalls
from executor.fs.view import SandboxView, Visibility, denial
from executor.protocol.intent import Access

__all__ = ["MAX_SYMLINK_HOPS", "Location", "Resolver", "split"]

#: Symlinks followed in one resolution before ``ELOOP`` (Linux's own limit).
MAX_SYMLINK_HOPS: Final = 40
_DIR_FLAGS: Final = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
_RESOLVE_STRICT: Final = syscalls.RESOLVE_NO_SYMLINKS | syscalls.RESOLVE_NO_MAGICLINKS


def split(path: str) -> tuple[str, str]:
    """``/a/b`` -> (``/a``, ``b``); the root is the entry ``.`` of itself."""
    if path == "/":
        return "/", "."
    return posixpath.dirname(path), posixpath.basename(path)


def _join(parent: str, name: str) -> str:
    return parent if name == "." else posixpath.join(parent, name)


@dataclass(slots=True)
class Location:
    """An object's place: a directory descriptor (owned), its name there, its real path."""

    dir_fd: int
    name: str
    path: str
    #: The request's last component was a symlink, and it was followed to get here.
    followed: bool = False

    def close(self) -> None:
        """Release the directory descriptor."""
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> Location:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class _Hops:
    """Symlinks followed so far in one resolution."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0

    def step(self) -> None:
        self.count += 1
        if self.count > MAX_SYMLINK_HOPS:
            raise denial(errno.ELOOP)


class Resolver:
    """Resolves paths for one request, inside ``view`` when the request is sandboxed."""

    def __init__(self, view: SandboxView | None = None, *, use_openat2: bool | None = None) -> None:
        self.view = view
        self._openat2 = syscalls.openat2_supported() if use_openat2 is None else use_openat2
        self._anchors: dict[str, int] = {}

    @property
    def sandboxed(self) -> bool:
        """Whether a sandbox view applies."""
        return self.view is not None

    def close(self) -> None:
        """Release the cached descriptors of allowed roots."""
        anchors, self._anchors = self._anchors, {}
        for fd in anchors.values():
            os.close(fd)

    def __enter__(self) -> Resolver:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- access checks (no-ops without a sandbox) -------------------------------------------

    def visibility(self, path: str) -> Visibility:
        """How ``path`` appears (everything is writable without a sandbox)."""
        return Visibility.WRITABLE if self.view is None else self.view.visibility(path)

    def require_readable(self, path: str) -> None:
        """See ``SandboxView.require_readable``."""
        if self.view is not None:
            self.view.require_readable(path)

    def require_readable_file(self, path: str, st: os.stat_result) -> None:
        """Content of the file ``st`` opened at ``path`` may be read."""
        if self.view is not None:
            self.view.require_readable_file(path, st)

    def require_visible(self, path: str) -> None:
        """See ``SandboxView.require_visible``."""
        if self.view is not None:
            self.view.require_visible(path)

    def require_writable(self, path: str) -> None:
        """See ``SandboxView.require_writable``."""
        if self.view is not None:
            self.view.require_writable(path)

    def require_entry_change(self, path: str) -> None:
        """See ``SandboxView.require_entry_change``."""
        if self.view is not None:
            self.view.require_entry_change(path)

    # --- resolution --------------------------------------------------------------------------

    def locate(
        self, path: str, *, follow_parents: bool = True, follow_final: bool = True
    ) -> Location:
        """Resolve the directory holding ``path`` and, if asked, a symlink at its end.

        After ``follow_final`` the name at the returned location was not a symlink when it was
        looked at (or does not exist: creating it then creates the symlink's target, as the
        kernel does).
        """
        hops = _Hops()
        followed = False
        while True:
            parent, name = split(path)
            dir_fd, real_parent = self._open_dir(parent, follow_parents, hops)
            real = _join(real_parent, name)
            target = self._link_target(dir_fd, name, real) if follow_final else None
            if target is None:
                return Location(dir_fd, name, real, followed)
            os.close(dir_fd)
            hops.step()
            path = posixpath.normpath(posixpath.join(real_parent, target))
            follow_parents = True
            followed = True

    def open_dir(self, path: str, *, follow: bool = True) -> tuple[int, str]:
        """An ``O_PATH`` descriptor of the directory ``path`` and its real path."""
        return self._open_dir(path, follow, _Hops())

    def _link_target(self, dir_fd: int, name: str, real: str) -> str | None:
        if name == "." or not self.visibility(real).traversable:
            # An invisible name does not exist here; a denied symlink cannot be read.
            return None
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):
                return None  # not a symlink, or nothing there
            raise
        if not target:
            raise denial(errno.ENOENT)
        return target

    def _open_dir(self, path: str, follow: bool, hops: _Hops) -> tuple[int, str]:
        if self.view is None and follow:
            fd = os.open(path, _DIR_FLAGS)
            return fd, _real_path(fd, path)
        if self._openat2 and self._prefixes_traversable(path):
            exact = self._open_exact(path)
            if exact is not None:
                return exact, path
        return self._walk(path, follow, hops)

    # --- fast path ---------------------------------------------------------------------------

    def _prefixes_traversable(self, path: str) -> bool:
        if self.view is None:
            return True
        current = path
        while True:
            if not self.view.visibility(current).traversable:
                return False
            if current == "/":
                return True
            current = posixpath.dirname(current)

    def _anchor(self, path: str) -> str:
        """The deepest allowed root at or above ``path`` (``/`` in the skeleton)."""
        if self.view is None:
            return "/"
        rule = self.view.rules.rule_for(path)
        return "/" if rule is None or rule.access is Access.DENY else rule.path

    def _anchor_fd(self, anchor: str) -> int:
        fd = self._anchors.get(anchor)
        if fd is None:
            fd = syscalls.openat2(-100, anchor, _DIR_FLAGS, _RESOLVE_STRICT)
            self._anchors[anchor] = fd
        return fd

    def _open_exact(self, path: str) -> int | None:
        """``path`` opened with no symlink anywhere on it, or None when one is in the way."""
        anchor = self._anchor(path)
        try:
            anchor_fd = self._anchor_fd(anchor)
            if path == anchor:
                return os.dup(anchor_fd)
            relative = path[len(anchor) :].lstrip("/")
            return syscalls.openat2(
                anchor_fd, relative, _DIR_FLAGS, _RESOLVE_STRICT | syscalls.RESOLVE_BENEATH
            )
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EXDEV, errno.ENOSYS, errno.EPERM, errno.EAGAIN):
                return None  # a symlink (or no openat2): the walk decides
            raise

    # --- slow path ---------------------------------------------------------------------------

    def _walk(self, path: str, follow: bool, hops: _Hops) -> tuple[int, str]:
        fd, current = os.open("/", _DIR_FLAGS), "/"
        pending = _components(path)
        try:
            while pending:
                name = pending.pop(0)
                child = posixpath.join(current, name)
                self._require_traversable(child)
                next_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                try:
                    mode = os.fstat(next_fd).st_mode
                    if stat.S_ISDIR(mode):
                        fd, next_fd = next_fd, fd  # the old directory is closed below
                        current = child
                        continue
                    target = _read_link(next_fd) if stat.S_ISLNK(mode) and follow else None
                finally:
                    os.close(next_fd)
                if target is None:
                    raise denial(errno.ENOTDIR)
                hops.step()
                # ``current`` is a real path, so joining lexically resolves ``..`` physically.
                pending = _components(posixpath.join(current, target, *pending))
                os.close(fd)
                fd, current = os.open("/", _DIR_FLAGS), "/"
        except BaseException:
            os.close(fd)
            raise
        return fd, current

    def _require_traversable(self, path: str) -> None:
        if self.view is None:
            return
        seen = self.view.visibility(path)
        if seen is Visibility.INVISIBLE:
            raise denial(errno.ENOENT)
        if seen is Visibility.DENIED:
            raise denial(errno.EACCES)


def _components(path: str) -> list[str]:
    return [part for part in posixpath.normpath("/" + path).split("/") if part]


def _read_link(fd: int) -> str:
    target = os.readlink("", dir_fd=fd)
    if not target:
        raise denial(errno.ENOENT)
    return target


def _real_path(fd: int, fallback: str) -> str:
    """The kernel's idea of where ``fd`` is (``fallback`` resolved when /proc is missing)."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(fallback)
    return real if real.startswith("/") else os.path.realpath(fallback)
