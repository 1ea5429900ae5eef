"""Run the benchmark cases against our daemon (and the reference), print medians and ratios.

    .venv/bin/python bench/run.py                                   # ours only
    .venv/bin/python bench/run.py --reference \\
        "CODEX_HOME=$HOME/codex-home $REF/node_modules/.bin/codex exec-server --listen ws://127.0.0.1:{port}"
    .venv/bin/python bench/run.py --reference-url ws://127.0.0.1:4500 --only rpc --trials 5

Trials are interleaved: in every trial each case runs against ours, then the reference, so
drift of the machine (thermal, noisy neighbours) hits both alike. Cases are discovered in
``bench/cases/*.py`` (see ``bench/README.md`` for the interface).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import pkgutil
import statistics
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import cases as cases_package
from bench.harness import Case, DaemonProcess, Metric, Target, our_command, raise_fd_limit

Results = dict[str, dict[str, list[float]]]  # metric -> target -> samples


def discover(only: Sequence[str], skip: Sequence[str] = ()) -> list[Case]:
    """Every ``Case`` of every module in ``bench/cases`` that ``only`` selects (all when
    empty) and ``skip`` does not: each a case name, a name prefix or a module name."""
    found: list[Case] = []
    for module_info in sorted(pkgutil.iter_modules(cases_package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"bench.cases.{module_info.name}")
        for case in getattr(module, "CASES", []):
            if (not only or _matches(case, module_info.name, only)) and not _matches(
                case, module_info.name, skip
            ):
                found.append(case)
    return found


def _matches(case: Case, module: str, names: Sequence[str]) -> bool:
    return any(
        case.name == name or case.name.startswith(name + ".") or module == name for name in names
    )


class Side:
    """One daemon under test and how to (re)start it."""

    def __init__(self, name: str, command: str | None, url: str | None) -> None:
        self.name = name
        self.command = command
        self.fixed_url = url
        self.shared: DaemonProcess | None = None

    def _start(self) -> DaemonProcess:
        assert self.command is not None
        daemon = DaemonProcess(self.command)
        daemon.start()
        return daemon

    def target(self, fresh: bool) -> tuple[Target, DaemonProcess | None]:
        """A target for one case run; the daemon returned must be stopped by the caller."""
        if self.fixed_url is not None:
            return Target(name=self.name, url=self.fixed_url), None
        if fresh:
            daemon = self._start()
            return Target(name=self.name, url=daemon.url, daemon=daemon), daemon
        if self.shared is None:
            self.shared = self._start()
        return Target(name=self.name, url=self.shared.url, daemon=self.shared), None

    def stop(self) -> None:
        """Stop the shared daemon."""
        if self.shared is not None:
            self.shared.stop()
            self.shared = None


async def run_case(case: Case, side: Side, results: Results) -> None:
    """One run of one case on one side; failures are reported, not fatal."""
    if case.needs_local and side.fixed_url is not None:
        return
    target, fresh = side.target(case.fresh_daemon)
    try:
        values = await asyncio.wait_for(case.run(target), 300)
    except Exception:
        print(f"  ! {case.name} on {side.name} failed:", file=sys.stderr)
        traceback.print_exc()
        return
    finally:
        target.close()
        if fresh is not None:
            fresh.stop()
    for metric, value in values.items():
        results.setdefault(metric, {}).setdefault(side.name, []).append(value)
    shown = ", ".join(f"{k}={v:,.2f}" for k, v in values.items())
    print(f"  {side.name:9} {case.name:20} {shown}", file=sys.stderr)


def _verdict(metric: Metric, ours: float | None, ref: float | None) -> str:
    notes = []
    if metric.absolute is not None and ours is not None:
        ok = ours <= metric.absolute if metric.better == "lower" else ours >= metric.absolute
        sign = "<=" if metric.better == "lower" else ">="
        notes.append(f"{'ok' if ok else 'MISS'} ({sign} {metric.absolute:g} {metric.unit})")
    if metric.target is not None and ours is not None and ref:
        ratio = ours / ref
        ok = ratio <= metric.target if metric.better == "lower" else ratio >= metric.target
        sign = "<=" if metric.better == "lower" else ">="
        notes.append(f"{'ok' if ok else 'MISS'} ({sign} {metric.target:g}x)")
    return "; ".join(notes)


def report(selected: list[Case], results: Results, with_reference: bool) -> str:
    """The table of medians and ratios, then the CPU each side's timed windows cost."""
    header = (
        f"{'metric':24} {'unit':6} {'ours':>12} {'reference':>12} {'ours/ref':>9} "
        f"{'per trial':>11}  target"
    )
    lines = [header, "-" * len(header)]
    for case in selected:
        for metric in case.metrics:
            samples = results.get(metric.name)
            if not samples:
                continue
            ours = _median(samples.get("ours"))
            ref = _median(samples.get("reference"))
            ratio = f"{ours / ref:9.2f}" if ours is not None and ref else " " * 9
            lines.append(
                f"{metric.name:24} {metric.unit:6} {_fmt(ours):>12} "
                f"{_fmt(ref) if with_reference else '':>12} {ratio} "
                f"{_ratio_range(samples):>11}  {_verdict(metric, ours, ref)}"
            )
    cpu = cpu_report(selected, results)
    return "\n".join([*lines, "", *cpu] if cpu else lines)


def cpu_report(selected: list[Case], results: Results) -> list[str]:
    """CPU (ms, medians) of client, daemon and server per side; client-bound cases flagged.

    A side whose client used more CPU than the daemon under test measured the client at
    least as much as the daemon: its number, and any ratio with it, is not trustworthy.
    """
    sides = [side for side in ("ours", "reference") if _has_cpu(selected, results, side)]
    if not sides:
        return []
    columns = "".join(f" {side + ' daemon':>16} {'client':>8} {'server':>8}" for side in sides)
    header = f"{'CPU in the timed window (ms)':30}{columns}  verdict"
    lines = [header, "-" * len(header)]
    for case in selected:
        for metric in case.metrics:
            if not metric.cpu or metric.name not in results:
                continue
            cells, flags = "", []
            for side in sides:
                daemon, client, server = (
                    _median(results.get(f"{metric.name}.cpu.{role}", {}).get(side))
                    for role in ("daemon", "client", "server")
                )
                cells += f" {_fmt(daemon):>16} {_fmt(client):>8} {_fmt(server):>8}"
                if daemon is not None and client is not None and client > daemon:
                    flags.append(f"client-bound on {side}")
                if daemon is not None and server is not None and server > daemon:
                    flags.append(f"server-bound on {side}")
            verdict = "; ".join(flags) + ": ratio not trustworthy" if flags else "ok"
            lines.append(f"{metric.name:30}{cells}  {verdict}")
    return lines


def _has_cpu(selected: list[Case], results: Results, side: str) -> bool:
    return any(
        results.get(f"{metric.name}.cpu.client", {}).get(side)
        for case in selected
        for metric in case.metrics
        if metric.cpu
    )


def _median(samples: list[float] | None) -> float | None:
    return statistics.median(samples) if samples else None


def _ratio_range(samples: dict[str, list[float]]) -> str:
    """Lowest and highest ours/reference of one trial (both sides ran in every trial)."""
    ours, ref = samples.get("ours", []), samples.get("reference", [])
    if len(ours) < 2 or len(ours) != len(ref) or not all(ref):
        return ""
    ratios = [o / r for o, r in zip(ours, ref, strict=True)]
    return f"{min(ratios):.2f}-{max(ratios):.2f}"


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 1000 else f"{value:,.2f}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ref = parser.add_mutually_exclusive_group()
    ref.add_argument(
        "--reference",
        metavar="COMMAND",
        help="shell command starting the reference; {port} is replaced by a free port",
    )
    ref.add_argument(
        "--reference-url",
        metavar="URL",
        help="an already running reference (memory cases are skipped)",
    )
    parser.add_argument(
        "--ours",
        metavar="COMMAND",
        default=our_command(),
        help="command starting our daemon (default: %(default)s)",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="CASE",
        help="a case name, its prefix (e.g. rpc) or its module; repeatable",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="CASE",
        help="leave out a case, prefix or module (e.g. scale); repeatable",
    )
    parser.add_argument(
        "--trials", type=int, default=3, help="interleaved trials per case (default: %(default)s)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write every sample as JSON")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    return parser.parse_args(argv)


async def main_async(args: argparse.Namespace) -> int:
    """Run every selected case ``--trials`` times, interleaving the sides."""
    selected = discover(args.only, args.skip)
    if args.list or not selected:
        for case in selected:
            print(f"{case.name:22} {case.description}")
        return 0 if selected else 2
    sides = [Side("ours", args.ours, None)]
    if args.reference or args.reference_url:
        sides.append(Side("reference", args.reference, args.reference_url))
    results: Results = {}
    try:
        for trial in range(1, args.trials + 1):
            print(f"trial {trial}/{args.trials}", file=sys.stderr)
            for case in selected:
                for side in sides:
                    await run_case(case, side, results)
    finally:
        for side in sides:
            side.stop()
    print(report(selected, results, len(sides) > 1))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    raise_fd_limit()
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
