"""Can this host give a command private namespaces and mounts? (STDLIB ONLY; run as a script)

Run once by the daemon in a fresh interpreter (forking and unsharing are only safe in a
single-threaded process). Prints one line: ``ok proc`` / ``ok noproc`` / ``fail <reason>``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from executor_linux import syscalls


def main() -> None:
    """Try what the launcher will do, inside throwaway namespaces."""
    user = os.getuid() != 0
    flags = (
        syscalls.CLONE_NEWNS | syscalls.CLONE_NEWPID | syscalls.CLONE_NEWIPC | syscalls.CLONE_NEWNET
    )
    try:
        uid, gid = os.getuid(), os.getgid()
        syscalls.unshare(flags | (syscalls.CLONE_NEWUSER if user else 0))
        if user:
            syscalls.write_file("/proc/self/setgroups", "deny")
            syscalls.write_file("/proc/self/uid_map", f"{uid} {uid} 1")
            syscalls.write_file("/proc/self/gid_map", f"{gid} {gid} 1")
        syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
        syscalls.mount_setattr("/", set_flags=syscalls.MOUNT_ATTR_RDONLY)
    except OSError as exc:
        print(f"fail {exc.strerror} ({exc.errno})")
        return
    child = os.fork()
    if child == 0:
        try:
            syscalls.mount(
                "proc", "/proc", "proc", syscalls.MS_NOSUID | syscalls.MS_NODEV | syscalls.MS_NOEXEC
            )
        except OSError:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(child, 0)
    print("ok proc" if os.waitstatus_to_exitcode(status) == 0 else "ok noproc")


if __name__ == "__main__":
    main()
