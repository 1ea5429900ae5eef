"""The command a backend confines: what the core resolved, and the backend's child setup."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ChildSetup", "Command"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildSetup:
    """Backend code run in the forked child between fork and ``execve``.

    ``module_path`` is an absolute path to a stdlib-only module; the launcher server loads it
    once and calls ``function(payload, ctx)`` with a ``ChildContext``. ``payload`` holds only
    builtins (it is pickled to the launcher). ``native``, when given, does the same in the
    native launcher.
    """

    module_path: str
    function: str
    payload: Any
    #: The same setup for the native launcher (``executor/spawn/sandbox.c``), in the encoding
    #: it reads; used instead of ``module_path`` when that launcher is built and not turned
    #: off (``EXECUTOR_SANDBOX_LAUNCH=python``). ``None``: Python only.
    native: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """A fully resolved command: executable, argv (arg0 applied), env, cwd, tty, child setup."""

    executable: str
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    tty: bool
    setup: ChildSetup | None = None
