"""The filesystem methods' own refusals, worded as the reference words them.

OS errors are translated by ``executor.errors.fs_error``; these are the cases where the
reference answers with a message of its own rather than an OS error text.
"""

from __future__ import annotations

from executor.errors import InternalError, InvalidRequest

__all__ = [
    "copy_into_itself",
    "copy_needs_recursive",
    "copy_unsupported_kind",
    "hard_linked",
    "no_follow_recursive_removal",
    "not_a_file",
    "not_a_regular_file",
    "remove_root",
    "symlink_in_path",
    "too_large",
    "unsettled_hard_link",
]


def not_a_file(path: str) -> InvalidRequest:
    """A file was expected at ``path`` (native path in the message)."""
    return InvalidRequest(f"path `{path}` is not a file")


def not_a_regular_file() -> InvalidRequest:
    """``fs/readFile`` with ``followSymlinks: false`` reached something else than a file."""
    return InvalidRequest("path is not a regular file")


def symlink_in_path() -> InvalidRequest:
    """``followSymlinks: false`` and the path names a symlink."""
    return InvalidRequest("path contains a symbolic link")


def no_follow_recursive_removal() -> InternalError:
    """``fs/remove`` with ``followSymlinks: false`` and ``recursive: true``."""
    return InternalError("recursive no-follow removal is unsupported")


def remove_root() -> InvalidRequest:
    """Ours: the reference starts deleting the whole host when asked to remove ``/``."""
    return InvalidRequest("fs/remove refuses to remove the filesystem root `/`")


def copy_needs_recursive() -> InvalidRequest:
    """A directory source without ``recursive: true``."""
    return InvalidRequest("fs/copy requires recursive: true when sourcePath is a directory")


def copy_into_itself() -> InvalidRequest:
    """The destination is the source directory or lies inside it."""
    return InvalidRequest("fs/copy cannot copy a directory to itself or one of its descendants")


def copy_unsupported_kind() -> InvalidRequest:
    """A FIFO, socket or device as the source."""
    return InvalidRequest("fs/copy only supports regular files, directories, and symlinks")


def too_large(path: str, size: int, limit: int) -> InvalidRequest:
    """Ours: ``fs/readFile`` caps what it returns in one response."""
    return InvalidRequest(
        f"file `{path}` has {size} bytes but fs/readFile returns at most {limit}; "
        "read it with fs/open and fs/readBlock"
    )


def hard_linked(path: str, links: int) -> InvalidRequest:
    """Ours: a sandboxed write never changes a file that has other names."""
    return InvalidRequest(
        f"path `{path}` has {links} hard links; a sandboxed write could change it outside "
        "the writable roots"
    )


def unsettled_hard_link(path: str, links: int, reason: str) -> InvalidRequest:
    """Ours: a multiply-linked file whose other names could not all be checked is not read."""
    return InvalidRequest(
        f"path `{path}` has {links} hard links and the search of the sandbox's denied trees "
        f"for its other names stopped ({reason}); refusing to read it, since it may be a "
        "denied file"
    )
