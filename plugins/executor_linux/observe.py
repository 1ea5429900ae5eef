"""What the layers look like from inside the confined process (STDLIB ONLY; launcher side).

The enforcement report a user reads (``executor run -v``, the daemon log, a denial verdict)
must say what *happened*, not what was planned: a layer that was planned but is not in force
fails the launch here, before the command runs. Observed, from the process that is about to
become (or spawn) the command, after every layer was applied:

* namespaces: each planned one has another inode than before ``unshare`` (``/proc/self/ns``),
  a joined network namespace the planned inode;
* mounts: ``/`` read-only when planned, the private ``/dev`` (a read-only tmpfs with a devpts
  instance), a fresh ``/proc``, and every planned mount point there with the planned flag;
* ``/proc/self/status``: ``NoNewPrivs: 1``, every capability set empty, ``Seccomp: 2`` with
  at least one filter;
* Landlock: ``landlock_restrict_self`` succeeded (the kernel offers no way to read a domain
  back), with the ABI and the rights it handles.

``/proc/self/status`` and ``mountinfo`` are opened before Landlock applies (a profile may
not grant ``/proc``); reading an open procfs file from offset 0 shows the state at that read.
The native launcher (``executor/spawn/sandbox.c``: ``verify``) checks the same, in the same
words.
"""

from __future__ import annotations

import os
import stat

from executor_linux.launch_spec import LaunchSpec, Namespaces

__all__ = ["NAMESPACES", "Observer", "mounts", "namespace_inodes"]

NAMESPACES = ("user", "mnt", "pid", "ipc", "net")
_CAPABILITY_SETS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


def namespace_inodes() -> dict[str, int]:
    """The inode of each namespace this process is in."""
    return {name: os.stat(f"/proc/self/ns/{name}").st_ino for name in NAMESPACES}


class Observer:
    """Open the views before the layers; ``verify`` after them."""

    def __init__(self) -> None:
        self._status = os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)
        self._mountinfo = os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC)

    def close(self) -> None:
        """Release the views."""
        os.close(self._status)
        os.close(self._mountinfo)

    def verify(
        self, launch: LaunchSpec, before: dict[str, int] | None, landlock: bool
    ) -> tuple[list[str], str]:
        """(what is planned but not in force, the observed report line)."""
        problems: list[str] = []
        parts: list[str] = []
        spec = launch.namespaces
        if spec is not None and before is not None:
            parts.append(self._namespaces(spec, before, problems))
        if spec is not None:
            parts.append(self._mounts(spec, problems))
        status = _fields(_read_all(self._status))
        if status.get("NoNewPrivs") != "1":
            problems.append("no_new_privs is not set")
        parts.append("no_new_privs")
        rules = launch.landlock
        if rules is not None:
            if not landlock:
                problems.append("Landlock was not applied")
            parts.append(
                f"landlock(restricted: fs={rules.fs:#x} net={rules.net:#x} "
                f"scoped={rules.scoped:#x}, {len(rules.grants)} grants)"
            )
        held = [name for name in _CAPABILITY_SETS if int(status.get(name, "1"), 16)]
        if held:
            problems.append(f"capabilities left in {', '.join(held)}")
        parts.append("capabilities(none)")
        if launch.seccomp:
            filters = status.get("Seccomp_filters", "0")
            if status.get("Seccomp") != "2" or filters == "0":
                problems.append("the seccomp filter is not loaded")
            parts.append(f"seccomp(filter mode, {filters} filter{'s' if filters != '1' else ''})")
        return problems, " + ".join(parts)

    def _namespaces(self, spec: Namespaces, before: dict[str, int], problems: list[str]) -> str:
        after = namespace_inodes()
        planned = ["mnt", "pid", "ipc"] + [
            name for name, on in (("net", spec.net), ("user", spec.user)) if on
        ]
        for name in planned:
            if after[name] == before[name]:
                problems.append(f"the {name} namespace is the host's")
        shown = [f"{n}:{after[n]}" for n in planned]
        if spec.join_net is not None:
            if after["net"] != spec.join_net[1]:
                problems.append("the net namespace is not the session's")
            shown.append(f"net:{after['net']}=session")
        return f"namespaces({','.join(shown)})"

    def _mounts(self, spec: Namespaces, problems: list[str]) -> str:
        plan = spec.mounts
        mounts = _mount_table(_read_all(self._mountinfo))

        def expect(path: str, *, readonly: bool | None = None, fstype: str | None = None) -> None:
            found = mounts.get(path)
            if found is None:
                problems.append(f"{path} is not mounted")
            elif readonly is not None and found[0] is not readonly:
                problems.append(f"{path} is {'read-only' if found[0] else 'writable'}")
            elif fstype is not None and found[1] != fstype:
                problems.append(f"{path} is {found[1]}, not {fstype}")

        if plan.readonly_root:
            expect("/", readonly=True)
        for op, path in plan.operations:
            if op == "rw":
                expect(path, readonly=False)
            elif op == "ro":
                expect(path, readonly=True)
            elif op == "mask_dir":
                expect(path, fstype="tmpfs")
            elif op == "mask_socket":
                if path not in mounts and _is_socket(path):
                    problems.append(f"the host socket {path} is not masked")
            else:
                expect(path)
        extra = []
        if plan.private_dev:
            expect("/dev", readonly=True, fstype="tmpfs")
            expect("/dev/pts", fstype="devpts")
            extra.append("private /dev")
        if spec.proc:
            expect("/proc", fstype="proc")
            extra.append("fresh /proc")
        readonly = ["read-only /"] if plan.readonly_root else []
        checked = len(plan.operations)
        return f"mounts({', '.join([*readonly, *extra, f'{checked} planned mounts'])})"


def _is_socket(path: str) -> bool:
    """A socket the launcher skipped as gone must still be gone (or no socket) now."""
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def _read_all(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _fields(status: str) -> dict[str, str]:
    fields = {}
    for line in status.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def _unescape(field: str) -> str:
    return (
        field.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
    )


def mounts(mountinfo: str) -> list[tuple[str, bool, str]]:
    """(mount point, read-only, filesystem type) of every mount in ``mountinfo``, in order."""
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        separator = fields.index("-")
        found.append((_unescape(fields[4]), "ro" in fields[5].split(","), fields[separator + 1]))
    return found


def _mount_table(mountinfo: str) -> dict[str, tuple[bool, str]]:
    """Mount point -> (read-only, filesystem type) of the topmost mount there."""
    return {point: (readonly, kind) for point, readonly, kind in mounts(mountinfo)}
