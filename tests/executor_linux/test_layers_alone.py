"""Each layer alone does its part: no other layer may hide that one is missing or weakened.

The escape catalog runs every layer together, where one layer's refusal masks another's
absence. Here a layer is applied *alone* to a plain child process that keeps root's
capabilities — so a refusal can only come from that layer — and the same call is shown to
get through (or fail differently) without it:

* **seccomp**: every system call the filter lists returns ``EPERM`` under the compiled
  filter, and something else without it. Arguments are invalid pointers and numbers, so that
  even unfiltered each call fails harmlessly (``EFAULT``, ``EINVAL``, ``EBADF``) in a child
  that runs in throwaway namespaces of its own.
* **Landlock**: the ruleset the backend plans for the ``workspace`` rules, applied alone:
  reading a file outside the granted trees fails with ``EACCES``, writing outside the
  writable ones fails, TCP ``connect`` to the test's own listener fails with the network
  off, and the granted counterparts work.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from executor_linux import plan, seccomp_policy
from executor_linux.probe import host_support

from executor.protocol.intent import parse_sandbox
from executor.sandbox.host import LocalHost
from executor.sandbox.materialize import materialize
from tests.executor_linux.conftest import linux_sandbox_available
from tests.executor_linux.probe_text import ATTEMPT
from tests.sandbox.wire import context, managed, special
from tests.support.enforcement import skip_unless

pytestmark = pytest.mark.enforcement

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
#: Throwaway namespaces for the unfiltered control run (root keeps its capabilities there).
PRIVATE = ["unshare", "--mount", "--uts", "--ipc", "--net", "--pid", "--fork", "--"]

#: Arguments that make a call fail harmlessly without the filter (default: six 1s — an
#: invalid pointer, a nonsense number).
SAFE_ARGS: dict[str, tuple[int, ...]] = {
    "iopl": (4,),  # levels are 0-3
    "ioperm": (0x10000, 1, 1),  # past the I/O bitmap
    "unshare": (1,),  # CSIGNAL bits: invalid for unshare
    "setns": (-1, 0),
    "reboot": (1, 1, 1, 1),  # wrong magic
    "utimensat": (-1, 1, 1, 0),
    "syslog": (-1, 0, 0),
    "keyctl": (-1,),
    "fsconfig": (-1, 1, 1, 1, 1),
    "fsmount": (-1, 0, 0),
    "io_uring_enter": (-1, 0, 0, 0, 0, 0),
    "io_uring_register": (-1, 0, 0, 0),
    "open_by_handle_at": (-1, 1, 0),
    "kexec_file_load": (-1, -1, 0, 1, 0),
    "bpf": (-1, 1, 0),
    "userfaultfd": (-1,),
    "process_vm_readv": (-1, 1, 1, 1, 1, 0),
    "process_vm_writev": (-1, 1, 1, 1, 1, 0),
    "ptrace": (-1, 0, 0, 0),
    "connect": (-1, 1, 1),
    "bind": (-1, 1, 1),
    "listen": (-1, 1),
    "accept": (-1, 1, 1),
    "accept4": (-1, 1, 1, 0),
    "fchmod": (-1, 0o644),
    "fchown": (-1, 0, 0),
    "fsetxattr": (-1, 1, 1, 1, 0),
    "fremovexattr": (-1, 1),
}

SECCOMP_PROBE = textwrap.dedent(
    """
    import ctypes, errno, json, sys
    sys.path.insert(0, sys.argv[1])
    from executor_linux import syscalls
    calls = json.loads(sys.argv[2])
    program = bytes.fromhex(sys.argv[3]) if len(sys.argv) > 3 else None
    if program is not None:
        syscalls.load_seccomp(program)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    out = {}
    for name, (number, args) in calls.items():
        ctypes.set_errno(0)
        result = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
        out[name] = "ok" if result != -1 else errno.errorcode.get(ctypes.get_errno(), "?")
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module", autouse=True)
def layers(sandbox_launch: str) -> None:
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    skip_unless(os.getuid() == 0, "the capability-keeping control runs need root")


def _calls(names: tuple[str, ...]) -> dict[str, tuple[int, tuple[int, ...]]]:
    seccomp = seccomp_policy._import_pyseccomp()
    calls = {}
    for name in names:
        try:
            number = seccomp.resolve_syscall(seccomp.Arch.NATIVE, name)
        except (ValueError, RuntimeError):
            continue
        if number >= 0:
            calls[name] = (number, SAFE_ARGS.get(name, (1, 1, 1, 1, 1, 1)))
    return calls


def _run_calls(
    calls: dict[str, tuple[int, tuple[int, ...]]], program: bytes | None
) -> dict[str, str]:
    argv = [sys.executable, "-I", "-c", SECCOMP_PROBE, str(PLUGINS), json.dumps(calls)]
    if program is not None:
        argv.append(program.hex())
    result = subprocess.run(
        [*PRIVATE, *argv], capture_output=True, text=True, timeout=60, check=True
    )
    report: dict[str, str] = json.loads(result.stdout)
    return report


#: The specification, written out here rather than read from the policy module, so that a
#: name dropped from the policy fails this test instead of silently leaving it.
ALWAYS = (
    *("ptrace", "process_vm_readv", "process_vm_writev"),
    *("io_uring_setup", "io_uring_enter", "io_uring_register"),
    *("unshare", "setns", "mount", "umount2", "pivot_root", "chroot"),
    *("open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr"),
    *("bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key"),
    *("init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load"),
    *("open_by_handle_at", "name_to_handle_at", "quotactl", "swapon", "swapoff", "acct"),
    *("reboot", "sethostname", "setdomainname", "syslog", "iopl", "ioperm"),
)
NETWORK_OFF = ("connect", "bind", "listen", "accept", "accept4")
METADATA = (
    *("chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat"),
    *("utime", "utimes", "futimesat", "setxattr", "lsetxattr", "fsetxattr"),
    *("removexattr", "lremovexattr", "fremovexattr"),
)


def test_the_specification_covers_the_policy() -> None:
    """A name added to the policy must be added here too (and so be tested)."""
    assert set(seccomp_policy.ALWAYS_DENIED) - {"lookup_dcookie"} <= set(ALWAYS)
    assert set(seccomp_policy.NETWORK_DENIED) <= set(NETWORK_OFF)
    assert set(seccomp_policy.METADATA_DENIED) - {"setxattrat", "removexattrat"} <= set(METADATA)


@pytest.mark.parametrize(
    ("variant", "names"),
    [
        ({"network_restricted": False}, ALWAYS),
        ({"network_restricted": True}, NETWORK_OFF),
        ({"network_restricted": False, "lock_metadata": True}, METADATA),
    ],
    ids=["always", "network-off", "metadata-locked"],
)
def test_the_filter_alone_denies_every_listed_call(
    variant: dict[str, bool], names: tuple[str, ...]
) -> None:
    calls = _calls(names)
    assert len(calls) >= len(names) * 2 // 3, "most names resolve on this architecture"
    filtered = _run_calls(calls, seccomp_policy.compile_filter(**variant))
    unfiltered = _run_calls(calls, None)
    for name in calls:
        assert filtered[name] == "EPERM", (name, filtered[name])
        assert unfiltered[name] != "EPERM", (name, "the control must fail otherwise")


LANDLOCK_PROBE = (
    textwrap.dedent(
        """
    import errno, json, os, socket, sys
    sys.path.insert(0, sys.argv[1])
    from executor_linux import landlock
    rules, cfg = json.loads(sys.argv[2]), json.loads(sys.argv[3])
    # Everything the probe needs is loaded now: a module imported later would be read from
    # the interpreter's tree, which the ruleset may not grant — and that refusal would hide
    # the one under test.
    "127.0.0.1".encode("idna")
    if rules is not None:
        ruleset = landlock.Ruleset(rules["fs"], rules["net"], rules["scoped"])
        for path, rights in rules["grants"]:
            try:
                ruleset.allow_path(path, rights)
            except FileNotFoundError:
                pass
        ruleset.restrict_self()
    """
    )
    + ATTEMPT
    + textwrap.dedent(
        """

    attempt("read_denied", lambda: open(cfg["denied"], "rb").read())
    attempt("read_granted", lambda: open(cfg["readable"], "rb").read())
    attempt("write_readonly", lambda: open(cfg["readonly_new"], "w").write("x"))
    attempt("write_workspace", lambda: open(cfg["workspace_new"], "w").write("x"))
    def connect():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as client:
            client.settimeout(5)
            client.connect(("127.0.0.1", cfg["port"]))
    attempt("tcp_connect", connect)
    print(json.dumps(out))
    """
    )
)


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def test_landlock_alone_confines_reads_writes_and_tcp(tmp_path: Path, listener: int) -> None:
    """The ruleset planned for `:minimal` read + workspace write, network off, alone."""
    support = host_support()
    root = Path(os.path.realpath(tmp_path))
    workspace, secret, outside = root / "ws", root / "secret", root / "outside"
    for directory in (workspace, secret, outside):
        directory.mkdir()
    (secret / "key").write_text("secret\n")
    sandbox = context(
        managed(special("minimal", "read"), special("project_roots", "write")),
        cwd=str(workspace),
        roots=(str(workspace),),
    )
    rules = materialize(parse_sandbox(sandbox), LocalHost(cwd=str(workspace)))
    assert rules is not None
    ruleset = plan.landlock_plan(rules, support.landlock_abi, private_shm=False)
    assert ruleset is not None
    cfg = {
        "denied": str(secret / "key"),
        "readable": "/etc/hostname" if os.path.exists("/etc/hostname") else "/etc/passwd",
        "readonly_new": str(outside / "new.txt"),
        "workspace_new": str(workspace / "new.txt"),
        "port": listener,
    }
    python = shutil.which("python3") or sys.executable
    for rules_json, expected in (
        (
            json.dumps(ruleset.to_spec()._asdict()),
            {
                "read_denied": "EACCES",
                "read_granted": "ok",
                "write_readonly": "EACCES",
                "write_workspace": "ok",
                "tcp_connect": "EACCES" if support.landlock_abi >= 4 else "ok",
            },
        ),
        (
            "null",
            dict.fromkeys(("read_denied", "read_granted", "write_readonly", "tcp_connect"), "ok"),
        ),
    ):
        result = subprocess.run(
            [python, "-I", "-c", LANDLOCK_PROBE, str(PLUGINS), rules_json, json.dumps(cfg)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        seen = json.loads(result.stdout)
        for name, outcome in expected.items():
            assert seen[name] == outcome, (rules_json[:20], name, seen)
    assert (workspace / "new.txt").exists()
