"""The distribution ships every package and the shipped profiles (a wheel, not just a checkout)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def declared() -> tuple[list[str], dict[str, str]]:
    """Packages and package directories declared in pyproject.toml."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return setuptools["packages"], setuptools["package-dir"]


def test_every_package_directory_is_declared() -> None:
    """A subpackage missing from the explicit list would be absent from installed wheels."""
    packages, _ = declared()
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "executor").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert found <= set(packages), sorted(found - set(packages))


def test_plugins_and_profiles_map_to_their_directories() -> None:
    """First-party plugins and the shipped profiles are installed from their own folders."""
    packages, dirs = declared()
    for name, directory in dirs.items():
        assert name in packages
        assert (ROOT / directory / "__init__.py").is_file(), directory
    assert dirs["executor.sandbox_profiles"] == "sandbox_profiles"
