"""Remove each sandbox protection in turn and check that the tests notice (run by hand).

    .venv/bin/python scripts/mutation_check.py [--only NAME ...] [--list]

First the sandbox-related test modules run against an unmutated scratch copy of the
checkout; what fails there (tests of the installed package itself) is left out. Then, for
every mutation below, the copy gets exactly that one change (a layer not applied, a rule
dropped, a check skipped), and the same tests run against it (``PYTHONPATH`` puts its
packages first; the daemon and launchers the tests start inherit it). A mutant is *caught*
when the tests fail. Every mutant must be caught;
the table this prints is kept in docs/sandbox-mutations.md. The snippets are matched
exactly, so a refactoring that moves one makes the script fail loudly instead of testing
nothing. Needs root (or user namespaces) and Landlock, like the enforcement tests; takes
several minutes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINUX = "plugins/executor_linux"
NATIVE = "executor/spawn/sandbox.c"
#: The native launcher's sources (setup.py); a mutant of one is rebuilt in the copy.
TESTS = (
    "tests/executor_linux",
    "tests/sandbox",
    "tests/fs/test_sandbox.py",
    "tests/fs/test_denied_inodes.py",
    "tests/fs/test_resolve.py",
    "tests/fs/test_race.py",
    "tests/netproxy",
    "tests/test_sandbox_network.py",
)


@dataclass(frozen=True)
class Mutation:
    """``old`` replaced by ``new`` in ``path``: one protection gone."""

    name: str
    path: str
    old: str
    new: str


MUTATIONS = (
    Mutation(
        "network namespace not created",
        f"{LINUX}/launcher.py",
        "        flags |= syscalls.CLONE_NEWNET\n",
        "        pass\n",
    ),
    Mutation(
        "capabilities not dropped",
        f"{LINUX}/launcher.py",
        '    ctx.run("capabilities", syscalls.drop_capabilities)\n',
        "",
    ),
    Mutation(
        "no_new_privs not set",
        f"{LINUX}/launcher.py",
        '    ctx.run("no_new_privs", syscalls.set_no_new_privs)\n',
        "",
    ),
    Mutation(
        "seccomp filter not loaded",
        f"{LINUX}/launcher.py",
        '        ctx.run("seccomp", lambda: syscalls.load_seccomp(program))\n',
        "        pass\n",
    ),
    Mutation(
        "Landlock not applied",
        f"{LINUX}/launcher.py",
        '        ctx.run("landlock", lambda: _apply_landlock(rules))\n',
        "        pass\n",
    ),
    Mutation(
        "Landlock TCP rules",
        f"{LINUX}/plan.py",
        "    net = landlock.NET_BIND_TCP | landlock.NET_CONNECT_TCP"
        " if restricted and abi >= 4 else 0\n",
        "    net = 0\n",
    ),
    Mutation(
        "seccomp: socket type allow-list (network off)",
        f"{LINUX}/seccomp_policy.py",
        "            _deny_other_types(f, seccomp, name, RESTRICTED_SOCKET_TYPES)\n",
        "",
    ),
    Mutation(
        "seccomp: socket family allow-list (network on)",
        f"{LINUX}/seccomp_policy.py",
        "            _deny_other_families(f, seccomp, name, NETWORK_FAMILIES)\n",
        "            pass\n",
    ),
    Mutation(
        "seccomp: clone with namespace flags",
        f"{LINUX}/seccomp_policy.py",
        '        _deny(f, seccomp, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))\n',
        "        pass\n",
    ),
    Mutation(
        "seccomp: io_uring_enter/register",
        f"{LINUX}/seccomp_policy.py",
        '    "io_uring_enter",\n    "io_uring_register",\n',
        "",
    ),
    Mutation(
        "seccomp: TIOCSTI/TIOCLINUX/USERFAULTFD_IOC_NEW",
        f"{LINUX}/seccomp_policy.py",
        "    for request, mask in DENIED_IOCTLS:\n",
        "    for request, mask in ():\n",
    ),
    Mutation(
        "seccomp: other processes' limits without a PID namespace",
        f"{LINUX}/backend.py",
        "shared_pids=not use_namespaces",
        "shared_pids=False",
    ),
    Mutation(
        "read-only root",
        f"{LINUX}/launcher.py",
        "    if plan.readonly_root:\n        _readonly_everywhere()\n",
        "",
    ),
    Mutation(
        "host read-only submounts inside writable roots",
        f"{LINUX}/launcher.py",
        "                    _set_readonly(point)\n",
        "                    pass\n",
    ),
    Mutation(
        "read-only carve-outs (.git): their submounts left writable",
        f"{LINUX}/launcher.py",
        "            syscalls.mount_setattr("
        "path, set_flags=syscalls.MOUNT_ATTR_RDONLY, recursive=True)\n"
        '        elif op == "mask_dir":\n',
        "            syscalls.mount_setattr(path, set_flags=syscalls.MOUNT_ATTR_RDONLY)\n"
        '        elif op == "mask_dir":\n',
    ),
    Mutation(
        "read-only carve-outs (.git) not mounted",
        f"{LINUX}/launcher.py",
        '        elif op == "ro":\n'
        "            syscalls.mount(target, target, None, syscalls.MS_BIND | syscalls.MS_REC)\n"
        "            syscalls.mount_setattr("
        "path, set_flags=syscalls.MOUNT_ATTR_RDONLY, recursive=True)\n",
        '        elif op == "ro":\n            pass\n',
    ),
    Mutation(
        "private /dev",
        f"{LINUX}/launcher.py",
        "    if plan.private_dev:\n        _private_dev(",
        "    if False:\n        _private_dev(",
    ),
    Mutation(
        "private /dev/shm",
        f"{LINUX}/plan.py",
        'private_shm=rules.access_of("/dev/shm") is not Access.WRITE',
        "private_shm=False",
    ),
    Mutation(
        "/proc masks",
        f"{LINUX}/launcher.py",
        "            _mask_proc(readonly)\n",
        "            pass\n",
    ),
    Mutation(
        "pins",
        f"{LINUX}/launcher.py",
        "            syscalls.mount(target, target, None, syscalls.MS_BIND | syscalls.MS_REC)\n"
        '        elif op == "ro":\n',
        '            pass\n        elif op == "ro":\n',
    ),
    Mutation(
        "protected names at pinned levels",
        "executor/sandbox/protection.py",
        "    anchors = dict.fromkeys([*writable, *sorted(draft.pinned)])\n",
        "    anchors = dict.fromkeys(writable)\n",
    ),
    Mutation(
        "planted symlinks refused",
        "executor/sandbox/materialize.py",
        "    refuse_planted_symlinks(draft, intent.workspace_roots)\n",
        "",
    ),
    Mutation(
        "placeholders: another process's use",
        f"{LINUX}/placeholders.py",
        "                    if not _held_elsewhere(use, _offset(path)):\n",
        "                    if True:\n",
    ),
    Mutation(
        "fs/*: removing pinned paths",
        "executor/fs/view.py",
        "        if self.rules.pins_below(path):\n",
        "        if False:\n",
    ),
    Mutation(
        "fs/*: RESOLVE_BENEATH",
        "executor/fs/resolve.py",
        "_RESOLVE_STRICT | syscalls.RESOLVE_BENEATH",
        "_RESOLVE_STRICT",
    ),
    Mutation(
        "fs/*: denied inodes under other names",
        "executor/fs/view.py",
        "            denied = self.inodes.is_denied(st)\n",
        "            denied = False\n",
    ),
    Mutation(
        "network: the session's namespace not joined",
        f"{LINUX}/launcher.py",
        "    if namespaces.join_net is not None:\n        _join_network(",
        "    if False:\n        _join_network(",
    ),
    Mutation(
        "network: loopback guard programs not attached",
        f"{LINUX}/loopback_guard.py",
        "            bpf.attach(fd, program, attach_type)\n",
        "            pass\n",
    ),
    Mutation(
        "network: host Unix sockets not masked",
        f"{LINUX}/backend.py",
        '                    + tuple(("mask_socket", path) for path in masked_sockets)\n',
        "                    + ()\n",
    ),
    Mutation(
        "proxy: the host's loopback at any port",
        "executor/netproxy/policy.py",
        "        if self.loopback_ports is None or port in self.loopback_ports:\n",
        "        if True:\n",
    ),
    Mutation(
        "proxy: addresses not vetted after resolving",
        "executor/netproxy/policy.py",
        "            why = self._loopback_refusal(address, port) or self.address_refusal(\n"
        "                address, explicit=explicit\n"
        "            )\n",
        "            why = None\n",
    ),
    Mutation(
        "limits: cgroups not joined",
        f"{LINUX}/rlimits.py",
        "    for join in spec.cgroups:\n",
        "    for join in ():\n",
    ),
    # The native launcher (sandbox.c) applies the same layers; the tests run both launchers.
    Mutation(
        "native: Landlock not enforced",
        NATIVE,
        '    CHECK("landlock", syscall(NR_LANDLOCK_RESTRICT_SELF, ruleset, 0));\n',
        "",
    ),
    Mutation(
        "native: seccomp filter not loaded",
        NATIVE,
        "        load_seccomp(sandbox);\n",
        "",
    ),
    Mutation(
        "native: capabilities not dropped",
        NATIVE,
        "    drop_capabilities();\n",
        "",
    ),
    Mutation(
        "native: network namespace not created",
        NATIVE,
        "        flags |= CLONE_NEWNET;\n",
        "",
    ),
    Mutation(
        "native: read-only root",
        NATIVE,
        "    if (result == 0 && sandbox->readonly_root) {\n",
        "    if (0) {\n",
    ),
    Mutation(
        "native: host Unix sockets not masked",
        NATIVE,
        "    if (op->op == 's') {\n        return mask_socket(op->path, empty_fd);\n",
        "    if (op->op == 's') {\n        return 0;\n",
    ),
    Mutation(
        "native: exit reported early from inside the command's cgroups",
        NATIVE,
        "    if (!pid1_joins_cgroups(sandbox)) {\n        join_cgroups(sandbox);\n    }\n",
        "    join_cgroups(sandbox);\n",
    ),
    Mutation(
        "native: a launch prepared ahead kept when the mounts change",
        "executor/spawn/launcher.c",
        "            drop_prepared(ready); /* its copy of the mount table is stale */\n",
        "",
    ),
    Mutation(
        "reused rule set: host answers not asked again",
        "executor/sandbox/memo.py",
        "        if entry is not None and _still_answers(host, entry[1]):\n",
        "        if entry is not None:\n",
    ),
    Mutation(
        "spare cgroup handed out though something joined it",
        f"{LINUX}/spare_cgroups.py",
        "        if made_for == limits and all(_unused(join) for join in group.joins):\n",
        "        if made_for == limits:\n",
    ),
)


def _copy(destination: Path) -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    extras = [b"executor/spawn/executor-launcher"]  # built at install time, not tracked
    for name in [*tracked, *extras]:
        if not name:
            continue
        source = ROOT / os.fsdecode(name)
        if not source.exists():
            continue
        target = destination / os.fsdecode(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def _build_launcher(copy: Path) -> None:
    """Compile the copy's native launcher from its (possibly mutated) sources."""
    compiler = os.environ.get("CC", "cc")
    target = copy / "executor/spawn/executor-launcher"
    # Every C file there, as setup.py builds it (a fixed list here went stale once).
    sources = sorted(str(source) for source in (copy / "executor/spawn").glob("*.c"))
    subprocess.run([compiler, "-O2", "-std=gnu11", "-o", str(target), *sources], check=True)


def _pytest(copy: Path, extra: list[str]) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": f"{copy}{os.pathsep}{copy / 'plugins'}",
        "EXECUTOR_REQUIRE_ENFORCEMENT": "1",
        "HYPOTHESIS_PROFILE": "ci",
    }
    return subprocess.run(
        [str(ROOT / ".venv/bin/pytest"), "-q", "-p", "no:cacheprovider", *extra, *TESTS],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def _failures(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [
        line.split(" ", 1)[1].split(" - ")[0]
        for line in result.stdout.splitlines()
        if line.startswith(("FAILED ", "ERROR "))
    ]


def _baseline(copy: Path) -> list[str]:
    """Tests that fail in the scratch copy with no mutation (they check the installed
    package itself, e.g. its entry points): left out of the mutant runs, and listed."""
    return _failures(_pytest(copy, []))


def _run(copy: Path, mutation: Mutation, skip: list[str]) -> tuple[bool, float, str]:
    path = copy / mutation.path
    original = (ROOT / mutation.path).read_text()
    if original.count(mutation.old) != 1:
        raise SystemExit(f"{mutation.name}: the snippet is not in {mutation.path} exactly once")
    path.write_text(original.replace(mutation.old, mutation.new))
    native = mutation.path.startswith("executor/spawn/") and mutation.path.endswith(".c")
    if native:
        _build_launcher(copy)
    started = time.monotonic()
    deselect = [arg for test in skip for arg in ("--deselect", test)]
    result = _pytest(copy, ["-x", *deselect])
    path.write_text(original)
    if native:
        _build_launcher(copy)
    failed = _failures(result)
    return result.returncode != 0, time.monotonic() - started, (failed or ["(see pytest)"])[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=[], help="mutation name substring")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if not args.only or any(o in m.name for o in args.only)]
    if args.list:
        for mutation in chosen:
            print(f"{mutation.name}  ({mutation.path})")
        return 0
    missed = 0
    with tempfile.TemporaryDirectory(prefix="executor-mutants-") as scratch:
        copy = Path(scratch) / "checkout"
        _copy(copy)
        skip = _baseline(copy)
        if skip:
            print(f"left out (fail in the copy without any mutation): {', '.join(skip)}\n")
        print("| protection removed | caught | first failing test | seconds |")
        print("|---|---|---|---:|")
        for mutation in chosen:
            caught, seconds, first = _run(copy, mutation, skip)
            missed += not caught
            verdict = "yes" if caught else "**NO**"
            print(f"| {mutation.name} | {verdict} | {first} | {seconds:.0f} |", flush=True)
    print(f"\n{len(chosen) - missed} of {len(chosen)} mutants caught", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
