"""``fs/getMetadata`` and ``fs/canonicalize``: questions about one object, no content."""

from __future__ import annotations

import errno
import os
import stat

from executor.fs import failures, syscalls
from executor.fs.resolve import Resolver
from executor.fs.view import Visibility, denial
from executor.protocol.fs_messages import Metadata

__all__ = ["canonicalize", "get_metadata"]


def get_metadata(resolver: Resolver, path: str, *, follow: bool) -> Metadata:
    """Describe ``path`` (its target, if it is a symlink that is followed)."""
    with resolver.locate(path, follow_parents=follow, follow_final=follow) as location:
        resolver.require_visible(location.path)
        st = os.stat(location.name, dir_fd=location.dir_fd, follow_symlinks=False)
        if resolver.visibility(location.path) is Visibility.DENIED:
            # A denied object shows that it exists and what it is, nothing more.
            symlink = location.followed or stat.S_ISLNK(st.st_mode)
            return _describe(st, symlink=symlink, created_ns=None, opaque=True)
        if stat.S_ISLNK(st.st_mode):
            # Not followed on purpose, or swapped in after resolution.
            raise failures.symlink_in_path() if not follow else denial(errno.ELOOP)
        born = syscalls.birth_time_ns(location.dir_fd, location.name, follow_symlinks=False)
        return _describe(st, symlink=location.followed, created_ns=born, opaque=False)


def _describe(
    st: os.stat_result, *, symlink: bool, created_ns: int | None, opaque: bool
) -> Metadata:
    return Metadata(
        is_directory=stat.S_ISDIR(st.st_mode),
        is_file=stat.S_ISREG(st.st_mode),
        is_symlink=symlink,
        size=0 if opaque else st.st_size,
        created_at_ms=0 if created_ns is None else max(created_ns // 1_000_000, 0),
        modified_at_ms=0 if opaque else max(st.st_mtime_ns // 1_000_000, 0),
    )


def canonicalize(resolver: Resolver, path: str) -> str:
    """The absolute real path of ``path``: every symlink resolved; it must exist."""
    with resolver.locate(path) as location:
        resolver.require_visible(location.path)
        os.stat(location.name, dir_fd=location.dir_fd, follow_symlinks=False)
        return location.path
