"""Build hook for the one native part: the launcher server (``executor/spawn/launcher.c``).

Everything else is declared in ``pyproject.toml``. The launcher is compiled with the C
compiler Python was built with (``CC`` overrides it) and lands next to ``spawner.py``; an
editable install compiles it in place. Without a compiler, or off Linux, the build goes on
without it and the daemon forks a Python supervisor per command instead (slower, same
behaviour); ``executor doctor`` shows which one runs.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig

from setuptools import Command, setup
from setuptools.command.build import build
from setuptools.dist import Distribution

SOURCES = [
    "executor/spawn/launcher.c",
    "executor/spawn/sandbox.c",
    "executor/spawn/command_spawn.c",
]
TARGET = "executor/spawn/executor-launcher"
CFLAGS = ["-O2", "-Wall", "-Wextra", "-std=gnu11"]


class BuildLauncher(Command):
    """Compile the native launcher server."""

    description = "compile the native launcher server (Linux)"
    user_options: list[tuple[str, str | None, str]] = []

    def initialize_options(self) -> None:
        self.build_lib: str | None = None
        self.editable_mode = False

    def finalize_options(self) -> None:
        self.set_undefined_options("build_py", ("build_lib", "build_lib"))

    def _target(self) -> str:
        if self.editable_mode or self.build_lib is None:
            return TARGET
        return os.path.join(self.build_lib, TARGET)

    def run(self) -> None:
        if not sys.platform.startswith("linux"):
            print("executor: the native launcher is Linux-only; skipping it", file=sys.stderr)
            return
        compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
        target = self._target()
        os.makedirs(os.path.dirname(target), exist_ok=True)
        # Built beside the target and renamed over it: a running launcher keeps its old file
        # (writing into a running executable fails with ETXTBSY).
        partial = target + ".partial"
        command = [*compiler, *CFLAGS, "-o", partial, *SOURCES]
        try:
            subprocess.run(command, check=True)
            os.replace(partial, target)
        except (OSError, subprocess.CalledProcessError) as exc:
            print(
                f"executor: WARNING: could not build the native launcher ({exc}); the daemon "
                "will use its Python supervisor",
                file=sys.stderr,
            )

    def get_outputs(self) -> list[str]:
        return [self._target()]

    def get_source_files(self) -> list[str]:
        return [*SOURCES, "executor/spawn/sandbox.h", "executor/spawn/command_spawn.h"]

    def get_output_mapping(self) -> dict[str, str]:
        return {}


class BinaryDistribution(Distribution):
    """The wheel carries a compiled program, so it is platform-specific."""

    def has_ext_modules(self) -> bool:
        return True


build.sub_commands = [*build.sub_commands, ("build_launcher", None)]
setup(distclass=BinaryDistribution, cmdclass={"build_launcher": BuildLauncher})
