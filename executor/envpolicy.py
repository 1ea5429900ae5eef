"""Child environments and program lookup, exactly as the reference builds them (pure).

Without ``envPolicy`` the child environment is exactly ``env``. With one: start from the
executor's environment (``all``, ``none``, or the ``core`` allow-list), drop the default
secret-looking names unless told not to, drop ``exclude`` globs, add ``set``, keep only
``includeOnly`` globs when given, and finally overlay ``env``, which is never filtered.
Globs are case-insensitive.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Iterable, Mapping
from typing import Final

from executor.errors import InvalidParams
from executor.protocol.messages import EnvPolicy, Inherit

__all__ = [
    "CORE_VARIABLES",
    "DEFAULT_EXCLUDES",
    "build_environment",
    "deny_variables",
    "find_program",
    "validate_command",
]

#: Variables ``inherit: core`` keeps (observed on the reference).
CORE_VARIABLES: Final = frozenset(
    {
        "HOME",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "LOGNAME",
        "PATH",
        "SHELL",
        "TEMP",
        "TMP",
        "TMPDIR",
        "USER",
    }
)
#: Names dropped unless ``ignoreDefaultExcludes`` (they tend to hold credentials).
DEFAULT_EXCLUDES: Final = ("*KEY*", "*SECRET*", "*TOKEN*")


def _matches(name: str, patterns: Iterable[str]) -> bool:
    lowered = name.lower()
    return any(fnmatch.fnmatchcase(lowered, pattern.lower()) for pattern in patterns)


def build_environment(
    env: Mapping[str, str], policy: EnvPolicy | None, executor_env: Mapping[str, str]
) -> dict[str, str]:
    """The child's environment for ``env`` and ``policy``."""
    if policy is None:
        return dict(env)
    if policy.inherit is Inherit.ALL:
        result = dict(executor_env)
    elif policy.inherit is Inherit.CORE:
        result = {k: v for k, v in executor_env.items() if k in CORE_VARIABLES}
    else:
        result = {}
    excludes = list(policy.exclude)
    if not policy.ignore_default_excludes:
        excludes.extend(DEFAULT_EXCLUDES)
    if excludes:
        result = {k: v for k, v in result.items() if not _matches(k, excludes)}
    result.update(policy.set)
    if policy.include_only:
        result = {k: v for k, v in result.items() if _matches(k, policy.include_only)}
    result.update(env)
    return result


def deny_variables(env: Mapping[str, str], patterns: Iterable[str]) -> dict[str, str]:
    """``env`` without the names matching ``patterns`` (``serve --env-deny``): fnmatch globs,
    case-sensitive as names are. Applied to the finished environment, ``env`` and ``set``
    included, so no ``envPolicy`` a client sends brings such a variable back."""
    denied = tuple(patterns)
    if not denied:
        return dict(env)
    return {
        name: value
        for name, value in env.items()
        if not any(fnmatch.fnmatchcase(name, pattern) for pattern in denied)
    }


def validate_command(
    argv: tuple[str, ...], env: Mapping[str, str], max_bytes: int, arg0: str | None = None
) -> None:
    """Refuse what ``execve`` cannot carry: NUL bytes, ``=`` in names, oversize argv+env.

    ``arg0`` (the client's override of ``argv[0]``) is checked too: a NUL byte there would
    otherwise only surface in the forked child, as a command that "started" and exited 127.
    """
    if not argv:
        raise InvalidParams("argv must not be empty")
    size = 0
    if arg0 is not None:
        if "\0" in arg0:
            raise InvalidParams("arg0 must not contain NUL bytes")
        size += len(arg0) + 1
    for index, arg in enumerate(argv):
        if "\0" in arg:
            raise InvalidParams(f"argv[{index}] must not contain NUL bytes")
        size += len(arg) + 1
    for name, value in env.items():
        if not name or "=" in name or "\0" in name:
            raise InvalidParams(f"invalid environment variable name {name!r}")
        if "\0" in value:
            raise InvalidParams(f"environment variable {name} must not contain NUL bytes")
        size += len(name) + len(value) + 2
    if size > max_bytes:
        raise InvalidParams(
            f"argv and environment take {size} bytes, more than the limit of {max_bytes}"
        )


def find_program(
    name: str, child_env: Mapping[str, str], executor_env: Mapping[str, str], cwd: str
) -> str:
    """Resolve a bare program name on ``PATH`` (the child's if it has one, else ours), the
    way ``execvp`` in the command's working directory would, as the reference does.

    Names containing a slash are returned unchanged (resolved by ``execve`` against ``cwd``).
    An empty or relative ``PATH`` entry is taken relative to ``cwd``, not to the daemon's
    directory. Entries that hold the name but cannot run it (not executable, a directory)
    are skipped; if nothing else is found that is ``PermissionError``, else
    ``FileNotFoundError``.
    """
    if "/" in name:
        return name
    search = child_env["PATH"] if "PATH" in child_env else executor_env.get("PATH", os.defpath)
    denied = False
    for directory in search.split(os.pathsep):
        candidate = os.path.join(cwd, directory if directory not in ("", ".") else "", name)
        try:
            found = os.stat(candidate)
        except OSError as exc:
            denied = denied or exc.errno == errno.EACCES  # a directory it may not search
            continue
        if stat.S_ISREG(found.st_mode) and os.access(candidate, os.X_OK):
            return candidate
        denied = True
    if denied:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
