"""Host Unix sockets a networked sandbox must not reach by path (daemon side, at plan time).

Pathname Unix sockets are not scoped by network namespace: with the network on, a sandboxed
command could ``connect`` to any host service whose socket it can see — tmux, docker,
ssh-agent, a database, this daemon — whatever network namespace it is in. So the launcher
masks each such socket in the command's private mount namespace with the empty mode-000
file that masks denied files (``launch_spec.Mounts`` op ``mask_socket``).

Which sockets: every pathname a socket of the daemon's network namespace is *bound* to, as
``/proc/self/net/unix`` lists them — listeners (stream, seqpacket) and datagram receivers
(journald, syslog, notification sockets) alike, since either is a host service. The list is
the main thread's namespace (``/proc/self``), the host's, also when a daemon thread has
entered a session's namespace. A proxied command's own sockets live in its session's
namespace and are never listed, so commands of one session keep reaching each other's.

A listed path is masked when it still is a socket and its real path (symlinks on the way
resolved, as the launcher refuses them) is not already hidden by a mount of the plan: a
masked directory or file, a fresh ``/dev`` or ``/dev/shm``. Landlock does not govern
``connect`` on a Unix socket, so a socket in a tree only Landlock denies (a profile that
does not grant ``/``) is reachable and masked too. Relative names (bound from some
process's working directory) cannot be located and stay unmasked. More than ``MAX_MASKED``
sockets refuse the launch rather than leave the rest reachable.
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from collections.abc import Callable

from executor.errors import SandboxUnavailable
from executor_linux.launch_spec import Mounts

__all__ = ["MAX_MASKED", "PROC_NET_UNIX", "bound_paths", "sockets_to_mask", "unhidden_by"]

PROC_NET_UNIX = "/proc/self/net/unix"
#: Each mask costs ~40 us at launch and a line of every later ``mountinfo`` read.
MAX_MASKED = 4096
#: ``Num RefCount Protocol Flags Type St Inode [Path]`` (the kernel's ``unix_seq_show``).
_RECORD = re.compile(
    r"[0-9a-fA-F]+: [0-9A-F]{8} [0-9A-F]{8} [0-9A-F]{8} [0-9A-F]{4} [0-9A-F]{2} +\d+(?: (.*))?"
)


def bound_paths(table: str) -> list[str]:
    """The pathnames (not abstract or unnamed) sockets in ``table`` are bound to, each once.

    The kernel prints a name as it is, so a newline in it starts a line that is no record;
    such a line continues the name before it.
    """
    paths: list[str] = []
    current: str | None = None
    # Every record ends with a newline, the last one's included: not a part of its name.
    for line in table.removesuffix("\n").split("\n")[1:]:
        record = _RECORD.fullmatch(line)
        if record is None:
            if current is not None:
                current += "\n" + line
            continue
        if current is not None:
            paths.append(current)
        name = record.group(1)
        current = name if name and not name.startswith("@") else None
    if current is not None:
        paths.append(current)
    return list(dict.fromkeys(paths))


def unhidden_by(mounts: Mounts) -> Callable[[str], bool]:
    """Whether a path is still reachable in the sandbox after ``mounts`` (no mask or fresh
    ``/dev``/``/dev/shm`` covers it)."""
    hidden = {path for op, path in mounts.operations if op in ("mask_dir", "mask_file")}
    if mounts.private_shm:
        hidden.add("/dev/shm")
    fresh_dev = mounts.private_dev
    directories: dict[str, bool] = {"/": True}  # sockets share directories: each walked once

    def unhidden(path: str) -> bool:
        # A private /dev holds nothing of the host's but /dev/shm (when that is not private).
        in_shm = path == "/dev/shm" or path.startswith("/dev/shm/")
        if fresh_dev and path.startswith("/dev/") and not in_shm:
            return False
        return path not in hidden and directory_unhidden(posixpath.dirname(path))

    def directory_unhidden(directory: str) -> bool:
        known = directories.get(directory)
        if known is None:
            known = directories[directory] = directory not in hidden and directory_unhidden(
                posixpath.dirname(directory)
            )
        return known

    return unhidden


def sockets_to_mask(
    visible: Callable[[str], bool],
    *,
    read: Callable[[], str] | None = None,
    limit: int = MAX_MASKED,
) -> tuple[str, ...]:
    """Real paths of the host's bound Unix sockets that ``visible`` says the command reaches."""
    table = _read_table() if read is None else read()
    real_dirs: dict[str, str] = {}
    found: dict[str, None] = {}
    for path in bound_paths(table):
        if not path.startswith("/"):
            continue  # bound relative to some process's working directory: not locatable
        directory, name = posixpath.split(path)
        real_dir = real_dirs.get(directory)
        if real_dir is None:
            real_dir = real_dirs[directory] = os.path.realpath(directory)
        real = posixpath.join(real_dir, name)
        try:
            if not stat.S_ISSOCK(os.lstat(real).st_mode):
                continue
        except OSError:
            continue  # removed since it was bound: nothing to reach by that name
        if real not in found and visible(real):
            found[real] = None
    if len(found) > limit:
        raise SandboxUnavailable(
            f"this host has {len(found)} Unix sockets a networked sandbox could reach by path, "
            f"more than the {limit} the linux backend masks per launch; nothing was started"
        )
    return tuple(found)


def _read_table() -> str:
    # newline="": a name may hold a carriage return, which must not become a newline.
    with open(PROC_NET_UNIX, encoding="utf-8", errors="surrogateescape", newline="") as handle:
        return handle.read()
