"""Where our daemon spends its time in a benchmark case: cProfile inside the daemon.

    .venv/bin/python -m bench.profile output.stdout64 --runs 3 [--top 30] [--sort tottime]

Starts our daemon with the profiler loaded but off, runs the case once to warm up, turns the
profiler on (SIGUSR1), runs the case ``--runs`` times, dumps the statistics (SIGUSR2) and
prints the functions that took the most time. Only the daemon's own thread is profiled: the
launcher server, the commands and the client are not. cProfile adds a fixed cost to every
Python call, so calls-heavy paths look heavier than they are; compare shares, not seconds,
and confirm with ``perf record -g -p <daemon pid>`` where the time is spent below Python.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import signal
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import DaemonProcess, Target, our_command
from bench.run import discover

#: Runs inside the daemon's interpreter: the profiler starts on SIGUSR1 and is written to
#: $BENCH_PROFILE on SIGUSR2; then ``executor`` runs as its console script would.
_WRAPPER = """
import cProfile, os, signal, sys
from executor.cli import main
profiler = cProfile.Profile()
signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
def _dump(*_):
    profiler.disable()
    profiler.dump_stats(os.environ["BENCH_PROFILE"])
signal.signal(signal.SIGUSR2, _dump)
sys.exit(main(sys.argv[1:]))
"""


def profiled_command(scratch: Path) -> str:
    """Our daemon's command line, started through the profiling wrapper (kept in scratch)."""
    wrapper = scratch / "profiled_executor.py"
    wrapper.write_text(_WRAPPER)
    command = our_command()
    return f"{sys.executable} {wrapper}{command[command.index(' serve ') :]}"


async def profile(case_name: str, runs: int, output: Path, scratch: Path) -> None:
    """Run the case once, then ``runs`` times with the daemon's profiler on."""
    (case,) = (case for case in discover([case_name]) if case.name == case_name)
    daemon = DaemonProcess(profiled_command(scratch), env={"BENCH_PROFILE": str(output)})
    daemon.start()
    try:
        target = Target(name="ours", url=daemon.url, daemon=daemon)
        try:
            await case.run(target)
            os.kill(daemon.pid, signal.SIGUSR1)
            for _ in range(runs):
                print(await case.run(target), file=sys.stderr)
            os.kill(daemon.pid, signal.SIGUSR2)
            for _ in range(100):
                if output.exists():
                    break
                time.sleep(0.05)
        finally:
            target.close()
    finally:
        daemon.stop()


def main() -> None:
    """The command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("case", help="a case name, e.g. output.stdout64")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--sort", default="tottime", help="a pstats sort key")
    parser.add_argument("--save", metavar="PATH", help="keep the raw profile here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(args.save) if args.save else Path(scratch) / "daemon.prof"
        asyncio.run(profile(args.case, args.runs, output, Path(scratch)))
        pstats.Stats(str(output)).sort_stats(args.sort).print_stats(args.top)


if __name__ == "__main__":
    main()
