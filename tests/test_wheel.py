"""A wheel built from the checkout is what a plugin author installs: name, packages, data.

Built from a copy of the tracked files (so the checkout's own build products cannot leak in)
with the same pip the Makefile uses; its contents are then read, not installed.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from collections.abc import Iterator
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    work = tmp_path_factory.mktemp("wheel")
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    source = work / "src"
    for name in filter(None, tracked):
        relative = name.decode()
        if not (ROOT / relative).is_file():
            continue  # deleted in the working tree
        target = source / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((ROOT / relative).read_bytes())
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(work), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    [path] = work.glob("*.whl")
    with zipfile.ZipFile(path) as archive:
        yield archive


def _metadata(wheel: zipfile.ZipFile) -> tuple[str, dict[str, str]]:
    dist_info = next(n.split("/")[0] for n in wheel.namelist() if ".dist-info/" in n)
    text = wheel.read(f"{dist_info}/METADATA").decode()
    message = Parser().parsestr(text)
    return dist_info, {key: str(value) for key, value in message.items()}


def test_the_distribution_is_named_executor_daemon(wheel: zipfile.ZipFile) -> None:
    """Not `executor`: that name on the public index is another project."""
    dist_info, metadata = _metadata(wheel)
    assert metadata["Name"] == "executor-daemon"
    assert dist_info.startswith("executor_daemon-")
    assert metadata["License-Expression"] == "Apache-2.0"
    assert f"{dist_info}/licenses/LICENSE" in wheel.namelist()


def test_every_package_profile_and_data_file_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    """Every module of the checkout's packages, the shipped profiles and the profile schema."""
    names = set(wheel.namelist())
    expected = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "executor").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    expected |= {
        f"executor_linux/{path.name}" for path in (ROOT / "plugins/executor_linux").glob("*.py")
    }
    expected |= {
        f"executor/sandbox_profiles/{path.name}"
        for path in (ROOT / "sandbox_profiles").glob("*")
        if path.suffix in (".toml", ".py")
    }
    expected.add("executor/sandbox/profile.schema.json")
    assert expected - names == set()


def test_the_plugins_register_through_the_entry_point_group(wheel: zipfile.ZipFile) -> None:
    """The first-party backends are found the way a third party's are."""
    dist_info, _ = _metadata(wheel)
    entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()
    assert "[executor.sandbox]" in entry_points
    for backend in ("linux", "macos", "windows"):
        assert f"{backend} = executor_{backend}.plugin" in entry_points
    assert "executor = executor.cli:main" in entry_points
