"""A fixed, fake macOS host for materializing intents in tests (``HostView``).

It looks like a Mac: ``/tmp``, ``/var`` and ``/etc`` are links into ``/private``, ``$TMPDIR``
lives under ``/var/folders``, the user is ``dev`` with a workspace ``/Users/dev/ws`` (holding
a ``.git`` directory, ``.env`` files and a ``private`` directory), and the protocol examples'
``/R/workspace`` exists too. Nothing touches the real filesystem, so goldens are stable.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from executor.protocol.intent import parse_sandbox
from executor.protocol.paths import parse_path_uri
from executor.sandbox.globscan import GlobScan, ScanLimits
from executor.sandbox.materialize import materialize
from executor.sandbox.purpose import Purpose
from executor.sandbox.rules import PathKind, RuleSet, is_within
from tests.sandbox.fakehost import bounded_scan

__all__ = ["TMPDIR", "WORKSPACE", "FakeMacHost", "rules_for"]

WORKSPACE = "/Users/dev/ws"
TMPDIR = "/var/folders/zz/xy12/T/"

LINKS = {"/tmp": "/private/tmp", "/var": "/private/var", "/etc": "/private/etc"}
DIRECTORIES = (
    "/bin",
    "/sbin",
    "/usr/bin",
    "/usr/lib",
    "/usr/share",
    "/private/etc",
    "/private/tmp",
    "/private/var/folders/zz/xy12/T",
    "/System/Library",
    "/Library/Apple",
    "/Library/Preferences",
    "/opt/homebrew/lib",
    "/dev",
    "/Users/dev/ws/.git",
    "/Users/dev/ws/src",
    "/Users/dev/ws/private/public",
    "/R/workspace/.git",
    "/R/outside",
    "/private/tmp/executor-501",
)
FILES = (
    "/Users/dev/ws/.env",
    "/Users/dev/ws/src/app.env",
    "/Users/dev/ws/src/main.py",
    "/Users/dev/ws/private/key.pem",
    "/private/tmp/scratch.env",
)
#: What ``executor.sandbox.host.minimal_paths("darwin")`` lists on this host.
MINIMAL = (
    "/bin",
    "/sbin",
    "/usr",
    "/etc",
    "/private/etc",
    "/System",
    "/Library/Apple",
    "/Library/Preferences",
    "/opt/homebrew/lib",
    "/dev",
)


class FakeMacHost:
    """``HostView`` of the fixed fake Mac described in the module docstring."""

    minimal_paths: tuple[str, ...]
    hidden_paths: tuple[str, ...]
    cwd: str
    home: str | None

    def __init__(self) -> None:
        self.minimal_paths = MINIMAL
        self.hidden_paths = ("/tmp/executor-501",)
        self.cwd = WORKSPACE
        self.home = "/Users/dev"
        self.files = set(FILES)
        self.directories = {"/"}
        for path in (*DIRECTORIES, *FILES):
            parent = posixpath.dirname(path)
            while parent not in self.directories:
                self.directories.add(parent)
                parent = posixpath.dirname(parent)
        self.directories.update(DIRECTORIES)

    def realpath(self, path: str) -> str:
        """``path`` with the ``/private`` links resolved."""
        for link, target in LINKS.items():
            if is_within(path, link):
                return target + path[len(link) :]
        return path

    def kind(self, path: str) -> PathKind:
        """Directory, file or missing (links followed)."""
        real = self.realpath(path)
        if real in self.directories:
            return PathKind.DIRECTORY
        return PathKind.FILE if real in self.files else PathKind.MISSING

    def is_symlink(self, path: str) -> bool:
        """The ``/private`` links (``/tmp``, ``/var``, ``/etc``) are the only ones."""
        return path in LINKS

    def is_shared_directory(self, path: str) -> bool:
        """``/private/tmp`` is world-writable and sticky, as on a Mac."""
        return path == "/private/tmp"

    def gitdir_pointer(self, path: str) -> str | None:
        """No ``.git`` files on this host."""
        return None

    def glob_matches(self, base: str, regex: str, limits: ScanLimits) -> GlobScan:
        """Entries below ``base`` (spelled as under ``base``) matching ``regex``."""
        real_base = self.realpath(base)
        below = []
        for entry in self.files | self.directories:
            if entry == real_base or not is_within(entry, real_base):
                continue
            spelled = base.rstrip("/") + entry[len(real_base.rstrip("/")) :]
            below.append((spelled, entry[len(real_base.rstrip("/")) :].count("/")))
        return bounded_scan(below, regex, limits)


def rules_for(
    sandbox: Mapping[str, Any], *, cwd: str = WORKSPACE, env: Mapping[str, str] | None = None
) -> RuleSet:
    """The rule set the daemon would build for a ``process/start`` ``sandbox`` on this host."""
    intent = parse_sandbox(dict(sandbox))
    rules = materialize(
        intent, FakeMacHost(), purpose=Purpose.PROCESS, process_cwd=cwd, child_env=env
    )
    assert rules is not None
    return rules


def cwd_of(uri: str) -> str:
    """The native path of a ``file:`` URI."""
    return parse_path_uri(uri)
