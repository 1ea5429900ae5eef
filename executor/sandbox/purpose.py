"""``Purpose``: whether a rule set confines a process or the executor's own filesystem calls.

The same intent binds differently for the two: ``:tmpdir`` is the child's ``TMPDIR`` for a
process but the context's temporary directories for a filesystem call, and only a process has
a cwd of its own to fall back on. Its own module because both the binding of targets and the
choice of policy cwd depend on it.
"""

from __future__ import annotations

import enum

__all__ = ["Purpose"]


class Purpose(enum.Enum):
    """What the rules are for; ``:tmpdir`` and the default policy cwd depend on it."""

    PROCESS = "process"
    FILESYSTEM = "filesystem"
