"""What each Linux sandbox layer costs a launch: ``/bin/true`` under the ``sandboxed-spawn``
case's sandbox, with one layer taken out at a time (Linux, as root or with user namespaces).

    .venv/bin/python bench/layers.py [--runs 60]

Launches go straight through the Linux backend and the launcher server (no daemon, no
WebSocket), so the numbers isolate the layers: each row is the median launch-to-exit time
with that layer removed from the plan, and the difference to the full plan is its cost.
Variants are interleaved run by run, so drift of the machine hits them alike. The layers are
applied by the native launcher (``executor/spawn/sandbox.c``) where it is built; the last row
is the full plan applied by the Python launcher (``launcher.py``), the fallback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from executor_linux import launch_spec, native_spec
from executor_linux.backend import LinuxBackend
from executor_linux.launch_spec import LaunchSpec, Mounts

from bench.cases.sandbox import workspace_sandbox
from executor.protocol.intent import parse_sandbox
from executor.sandbox import Command
from executor.sandbox.host import LocalHost
from executor.sandbox.materialize import materialize
from executor.spawn.spawner import Spawner

Variant = Callable[[LaunchSpec], LaunchSpec]


def _mounts(spec: LaunchSpec, change: Callable[[Mounts], Mounts]) -> LaunchSpec:
    assert spec.namespaces is not None, "the bench needs namespaces"
    namespaces = spec.namespaces._replace(mounts=change(spec.namespaces.mounts))
    return spec._replace(namespaces=namespaces)


def _no_private_dev(spec: LaunchSpec) -> LaunchSpec:
    return _mounts(spec, lambda mounts: mounts._replace(private_dev=False))


def _no_proc_masks(spec: LaunchSpec) -> LaunchSpec:
    return _mounts(spec, lambda mounts: mounts._replace(mask_proc=False))


def _no_pins(spec: LaunchSpec) -> LaunchSpec:
    def without_pins(mounts: Mounts) -> Mounts:
        ops = tuple(op for op in mounts.operations if op[0] != "pin")
        return mounts._replace(operations=ops)

    return _mounts(spec, without_pins)


def _no_limits(spec: LaunchSpec) -> LaunchSpec:
    return spec._replace(limits=None)


VARIANTS: dict[str, Variant | None] = {
    "full plan": None,
    "- private /dev": _no_private_dev,
    "- /proc masks": _no_proc_masks,
    "- pins": _no_pins,
    "- limits (cgroups, rlimits)": _no_limits,
}
#: The full plan once more, applied by the Python launcher.
PYTHON = "full plan, Python launcher"


async def _measure(runs: int, workspace: str) -> dict[str, float]:
    backend = LinuxBackend()
    rules = materialize(parse_sandbox(workspace_sandbox(workspace)), LocalHost(cwd=workspace))
    assert rules is not None
    previous = os.environ.pop("EXECUTOR_SANDBOX_LAUNCH", None)
    spawner = Spawner()
    os.environ["EXECUTOR_SANDBOX_LAUNCH"] = "python"
    python = Spawner()
    del os.environ["EXECUTOR_SANDBOX_LAUNCH"]
    if previous is not None:
        os.environ["EXECUTOR_SANDBOX_LAUNCH"] = previous
    samples: dict[str, list[float]] = {name: [] for name in [*VARIANTS, PYTHON]}
    try:
        for run in range(runs + 1):
            for name, variant in [*VARIANTS.items(), (PYTHON, None)]:
                command = Command(
                    executable="/bin/true", argv=("true",), env={}, cwd=workspace, tty=False
                )
                plan = backend.prepare(rules, command)
                assert plan.setup is not None
                setup = plan.setup
                if variant is not None:
                    spec = variant(launch_spec.decode(setup.payload))
                    native = native_spec.encode(spec)
                    setup = replace(setup, payload=launch_spec.encode(spec), native=native)
                request = Command(
                    executable=plan.executable,
                    argv=plan.argv,
                    env={},
                    cwd=workspace,
                    tty=False,
                    setup=setup,
                )
                started = time.perf_counter()
                launch = (python if name == PYTHON else spawner).launch(request, (0, 1, 2))
                await launch.started
                await launch.exited
                elapsed = time.perf_counter() - started
                if plan.release is not None:
                    plan.release()
                if run:  # the first round warms the launcher up
                    samples[name].append(elapsed * 1000)
    finally:
        spawner.close()
        python.close()
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="executor-layers-") as root:
        workspace = os.path.join(os.path.realpath(root), "box", "ws")
        os.makedirs(workspace)
        medians = asyncio.run(_measure(args.runs, workspace))
    full = medians["full plan"]
    print(f"{'variant':32} {'median ms':>10} {'layer costs':>12}")
    for name, value in medians.items():
        cost = "" if name == "full plan" else f"{full - value:+.2f}"
        print(f"{name:32} {value:10.2f} {cost:>12}")


if __name__ == "__main__":
    main()
