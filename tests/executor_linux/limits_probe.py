"""Resource-limit probes, run INSIDE the sandbox: ``python3 limits_probe.py CASE [ARG]``.

Each case prints one JSON object on stdout (``memory`` prints progress lines first). Every
process a case creates arms its own ``alarm`` watchdog, so nothing outlives a failed limit
by more than ``WATCHDOG`` seconds, and the sandbox's PID namespace ends the rest with the
command. Standard library only.

* ``forkbomb [HOLD]``: every process forks as fast as it can (a real bomb, bounded by the
  watchdog, and stopped at once if it reaches ``RUNAWAY`` processes); reports how many
  processes it got and whether fork was refused, keeps the bomb going for HOLD seconds (so
  that others can be tested meanwhile), then kills it;
* ``memory MIB``: allocates and touches 32 MiB (which must work), frees it, then allocates
  MIB in 16 MiB steps, printing each step;
* ``files``: opens /dev/null until refused; then writes 512 KiB (must work) and 2 MiB
  (must stop at the file size limit) to ``big.bin`` in the cwd, with SIGXFSZ ignored;
  reports its own cgroups too;
* ``cpu``: burns 0.2 s of CPU (must work), then spins until the CPU limit ends it.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import sys
import time

WATCHDOG = 20
#: A bomb that gets this many processes is not limited at all: stop it at once.
RUNAWAY = 1000


def forkbomb(hold: float) -> None:
    signal.alarm(WATCHDOG)
    read_end, write_end = os.pipe()
    bomber = os.fork()
    if bomber == 0:
        os.close(read_end)
        os.setpgid(0, 0)
        _bomb(write_end)
    os.close(write_end)
    os.set_blocking(read_end, False)
    got, refused, last = 0, False, time.monotonic()
    # Until fork has been refused and no new process appeared for a while.
    while time.monotonic() - last < (0.5 if refused else 5.0):
        try:
            data = os.read(read_end, 4096)
        except BlockingIOError:
            time.sleep(0.02)
            continue
        if not data:
            break
        if b"+" in data:
            last = time.monotonic()
        got += data.count(b"+")
        refused = refused or b"!" in data
        if got >= RUNAWAY:
            break
    print(json.dumps({"processes": got, "refused": refused}), flush=True)
    time.sleep(hold)
    os.killpg(bomber, signal.SIGKILL)
    os.waitpid(bomber, 0)


def _bomb(report: int) -> None:
    """Body of every bomb process: report, then fork until the watchdog ends it."""
    while True:
        signal.alarm(WATCHDOG)
        os.write(report, b"+")
        told = False
        while True:
            try:
                child = os.fork()
            except OSError as exc:
                if not told:
                    os.write(report, b"!" if exc.errno == errno.EAGAIN else b"?")
                    told = True
                time.sleep(0.001)
                continue
            if child == 0:
                break  # the child runs the same body


def memory(mib: int) -> None:
    signal.alarm(WATCHDOG)
    _touch(32)
    print("32 ok", flush=True)
    held = []
    for step in range(16, mib + 16, 16):
        held.append(_touch(16))
        print(f"{step} held", flush=True)
    print(json.dumps({"allocated": mib}), flush=True)


def _touch(mib: int) -> bytearray:
    block = bytearray(mib << 20)
    block[::4096] = b"x" * (len(block) // 4096)  # every page: resident, charged
    return block


def files() -> None:
    signal.alarm(WATCHDOG)
    opened, error = [], ""
    try:
        while True:
            opened.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as exc:
        error = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    count = len(opened)
    for fd in opened:
        os.close(fd)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    sizes = {}
    for name, size in (("small", 512 << 10), ("big", 2 << 20)):
        try:
            with open(f"{name}.bin", "wb") as handle:
                handle.write(b"x" * size)
            sizes[name] = "ok"
        except OSError as exc:
            sizes[name] = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        sizes[f"{name}_size"] = str(os.path.getsize(f"{name}.bin"))
    with open("/proc/self/cgroup", encoding="ascii") as handle:
        cgroups = handle.read().splitlines()
    limits = {
        name: resource.getrlimit(getattr(resource, name))
        for name in ("RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_CPU", "RLIMIT_NPROC", "RLIMIT_DATA")
    }
    print(
        json.dumps({"open": count, "error": error, **sizes, "cgroups": cgroups, "rlimits": limits}),
        flush=True,
    )


def cpu() -> None:
    signal.alarm(WATCHDOG)
    start = time.process_time()
    while time.process_time() - start < 0.2:
        pass
    print("warm ok", flush=True)
    while True:
        pass


def main() -> None:
    case = sys.argv[1]
    if case == "forkbomb":
        forkbomb(float(sys.argv[2]) if len(sys.argv) > 2 else 0.0)
    elif case == "memory":
        memory(int(sys.argv[2]))
    elif case == "files":
        files()
    elif case == "cpu":
        cpu()
    else:
        raise SystemExit(f"unknown case {case}")


if __name__ == "__main__":
    main()
