"""The executor's private state directory: where it is, and making sure it is really ours.

The directory holds what sandboxed launches need on the host (mount placeholders, the
staging tmpfs) and is hidden from every sandbox. On a shared host its default name under
``/tmp`` is predictable, so another user could create it first (to watch or tamper with
what the daemon puts there), or leave a symlink in its place. ``ensure_state_directory``
creates it with mode 0700 and then checks the directory it actually opened — through a
descriptor opened with ``O_NOFOLLOW``, so a swap between the check and the open is caught —
and refuses anything it cannot trust.
"""

from __future__ import annotations

import os
import stat

from executor.errors import ConfigError

__all__ = ["ensure_state_directory", "state_directory", "state_path"]

_ELSEWHERE = "use another directory (--state-dir or EXECUTOR_STATE_DIR)"


def state_path(path: str) -> str:
    """``path`` made absolute with its parent directories resolved, its last component kept
    as given: a symlink there is checked (and refused), never silently followed."""
    absolute = os.path.abspath(path)
    parent, name = os.path.split(absolute)
    return os.path.join(os.path.realpath(parent), name) if name else absolute


def state_directory() -> str:
    """Where the executor's private state directory is (nothing is created or checked).

    ``EXECUTOR_STATE_DIR`` if set, else ``$XDG_RUNTIME_DIR/executor-<uid>``, else
    ``/tmp/executor-<uid>``.
    """
    explicit = os.environ.get("EXECUTOR_STATE_DIR")
    if explicit and os.path.isabs(explicit):
        return state_path(explicit)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = runtime if runtime and os.path.isabs(runtime) else "/tmp"
    return os.path.join(base, f"executor-{os.getuid()}")


def ensure_state_directory(path: str | None = None) -> str:
    """The state directory (``path``, else ``state_directory()``), created with mode 0700 if
    missing, and safe to use; returns its path.

    Refused with a one-line ``ConfigError`` (naming the path, what is wrong and what to do):
    something other than a directory, a symlink, a directory owned by another user or
    writable by its group or others, and one whose parent lets other users replace it. A
    directory of ours that others may only read is narrowed to 0700.
    """
    target = state_path(path or state_directory())
    parent = os.path.dirname(target)
    try:
        os.makedirs(parent, exist_ok=True)
        _check_parent(target, parent)
        try:
            os.mkdir(target, 0o700)
        except FileExistsError:
            pass  # checked below, whoever made it
    except OSError as exc:
        why = f"{exc.filename}: {exc.strerror}"
        if isinstance(exc, FileExistsError):  # from makedirs: a file where a parent should be
            why = f"{exc.filename} is in the way (not a directory)"
        raise ConfigError(
            f"cannot create the state directory {target}: {why}; {_ELSEWHERE}"
        ) from None
    try:
        # O_NOFOLLOW: what is checked below is what is at the path now, not a link's target.
        fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise _unsafe(target, _open_failure(target, exc)) from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            raise _unsafe(
                target,
                f"it is owned by {_user(info.st_uid)}, not by {_user(os.geteuid())} who runs the"
                " executor (another user may have created it to read or tamper with what the"
                f" daemon keeps there): remove it, or {_ELSEWHERE}",
            )
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise _unsafe(
                target,
                f"it is writable by other users (mode {stat.S_IMODE(info.st_mode):04o}): check"
                f" what is in it and `chmod 700` it, remove it, or {_ELSEWHERE}",
            )
        if info.st_mode & 0o077:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return target


def _check_parent(target: str, parent: str) -> None:
    """Whoever may rename entries in ``parent`` may swap the directory after it is checked."""
    try:
        info = os.stat(parent)
    except OSError as exc:
        raise _unsafe(target, f"its parent {parent} cannot be examined: {exc.strerror}") from None
    if info.st_mode & stat.S_ISVTX:
        return  # sticky (/tmp): only an entry's owner may rename or remove it
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _unsafe(
            target,
            f"its parent {parent} is writable by other users and not sticky (mode"
            f" {stat.S_IMODE(info.st_mode):04o}), so they could replace it: {_ELSEWHERE}",
        )
    if info.st_uid not in (0, os.geteuid()):
        raise _unsafe(
            target,
            f"its parent {parent} belongs to {_user(info.st_uid)}, who could replace it:"
            f" {_ELSEWHERE}",
        )


def _open_failure(target: str, exc: OSError) -> str:
    try:
        mode = os.lstat(target).st_mode
    except OSError:
        return f"it cannot be opened: {exc.strerror}"
    if stat.S_ISLNK(mode):
        return (
            "it is a symlink (another user may have planted it to redirect the daemon): remove"
            f" it, or give the directory it points to, or {_ELSEWHERE}"
        )
    if not stat.S_ISDIR(mode):
        return f"it is not a directory: {_ELSEWHERE}"
    return f"it cannot be opened: {exc.strerror}"


def _unsafe(target: str, why: str) -> ConfigError:
    return ConfigError(f"unsafe state directory {target}: {why}")


def _user(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"
