"""``HostView``: everything materialization may ask about the host, as one protocol.

Materialization is pure given a host: it learns about the filesystem only through this
interface, so that tests can describe any host exactly (``tests/sandbox/fakehost.py``) and the
real machine is one implementation among others (``executor.sandbox.host.LocalHost``).
"""

from __future__ import annotations

from typing import Protocol

from executor.sandbox.globscan import GlobScan, ScanLimits
from executor.sandbox.rules import PathKind

__all__ = ["HostView"]


class HostView(Protocol):
    """What materialization may ask about the host."""

    #: Directories ``:minimal`` stands for on this platform.
    minimal_paths: tuple[str, ...]
    #: The executor's own state directories, hidden from every sandbox.
    hidden_paths: tuple[str, ...]
    #: The executor's working directory (the default policy cwd of filesystem calls).
    cwd: str
    #: The executor user's home directory.
    home: str | None

    def kind(self, path: str) -> PathKind:
        """What is at ``path`` (symlinks followed)."""

    def realpath(self, path: str) -> str:
        """``path`` with symlinks resolved (missing tails kept as they are)."""

    def is_symlink(self, path: str) -> bool:
        """Whether ``path`` itself is a symlink (not followed)."""

    def is_shared_directory(self, path: str) -> bool:
        """Whether others may create entries in directory ``path`` (world-writable or sticky)."""

    def gitdir_pointer(self, path: str) -> str | None:
        """If ``path`` is a ``.git`` file (``gitdir: X``), the absolute git dir it names."""

    def glob_matches(self, base: str, regex: str, limits: ScanLimits) -> GlobScan:
        """Existing paths below ``base`` (at most ``limits.max_depth`` levels) matching
        ``regex``; a matching directory is not entered. ``truncated`` says which bound of
        ``limits`` stopped the scan early (``DEPTH``: directories remained unscanned)."""
