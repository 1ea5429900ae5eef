"""A backend setup hook that adds nothing: the launcher's fork path with no sandbox layer.

STDLIB ONLY (the launcher server loads it by path). On macOS every plain command takes this
path (fork, ``ChildContext.exec``: setsid, terminal, chdir, execve), because ``posix_spawn``
there cannot start a new session; routing Linux launches through this hook runs that path
here too.
"""

from __future__ import annotations

from typing import Any


def run(_payload: Any, ctx: Any) -> None:
    """Go straight to the command."""
    ctx.exec()
