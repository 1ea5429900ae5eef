"""scripts/mutation_check.py stays runnable: every protection it removes is still where it says.

The script itself runs by hand (minutes per mutant); a refactoring that moves a snippet would
otherwise only be noticed the next time someone runs it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _catalog() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "mutation_check", ROOT / "scripts/mutation_check.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_every_mutation_finds_its_snippet_exactly_once() -> None:
    """Each mutation's ``old`` text occurs once in its file, so the mutant is well-defined."""
    catalog = _catalog()
    counts = {
        mutation.name: (ROOT / mutation.path).read_text().count(mutation.old)
        for mutation in catalog.MUTATIONS
    }
    assert len(counts) == len(catalog.MUTATIONS) >= 20
    assert {name: n for name, n in counts.items() if n != 1} == {}


def test_a_mutated_launcher_can_be_built(tmp_path: Path) -> None:
    """The script rebuilds the native launcher of its scratch copy from the same sources as
    setup.py (a fixed list of them went stale once and failed every native mutant)."""
    catalog = _catalog()
    spawn = tmp_path / "executor" / "spawn"
    spawn.mkdir(parents=True)
    for source in (ROOT / "executor" / "spawn").glob("*.[ch]"):
        (spawn / source.name).write_bytes(source.read_bytes())
    catalog._build_launcher(tmp_path)
    assert (spawn / "executor-launcher").stat().st_size > 0
