"""Every fixture that outlives a test here is made once per launcher (``sandbox_launch``).

A daemon, an ``executor run`` or a ``Spawner`` picks its launcher from
``EXECUTOR_SANDBOX_LAUNCH`` when it starts. A module-scoped fixture that does not name
``sandbox_launch`` is made once and kept when pytest switches launchers inside the module (a
module run alone, or by ``pytest-xdist --dist loadfile``): its ``[python]`` tests would run
the native launcher. ``test_backend.py`` shows a module's daemon really follows the parameter.
"""

from __future__ import annotations

import ast
from pathlib import Path

HERE = Path(__file__).parent
OUTLIVING = {"module", "package", "session", "class"}


def _scope(decorator: ast.expr) -> str | None:
    """The scope a ``@pytest.fixture(scope=...)`` decorator names (None: not one, or per test)."""
    if not isinstance(decorator, ast.Call):
        return None
    name = decorator.func
    if not (isinstance(name, ast.Attribute) and name.attr == "fixture") and not (
        isinstance(name, ast.Name) and name.id == "fixture"
    ):
        return None
    for keyword in decorator.keywords:
        if keyword.arg == "scope" and isinstance(keyword.value, ast.Constant):
            return str(keyword.value.value)
    return None


def outliving_fixtures(source: str) -> dict[str, list[str]]:
    """Fixtures of ``source`` that outlive a test: name -> the fixtures they ask for."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            _scope(d) in OUTLIVING for d in node.decorator_list
        ):
            found[node.name] = [a.arg for a in node.args.args]
    return found


def test_the_check_sees_a_module_fixture() -> None:
    """The walk finds scoped fixtures, and only those."""
    source = (
        "import pytest\n"
        "@pytest.fixture(scope='module')\ndef kept(sandbox_launch): ...\n"
        "@pytest.fixture(scope='module', autouse=True)\ndef shared(): ...\n"
        "@pytest.fixture\ndef fresh(): ...\n"
    )
    assert outliving_fixtures(source) == {"kept": ["sandbox_launch"], "shared": []}


def per_launcher(fixtures: dict[str, list[str]], given: set[str]) -> set[str]:
    """The ``fixtures`` that ask for ``sandbox_launch``, or for one of ``given`` (made per
    launcher already) or of themselves that does."""
    ok = set(given) | {"sandbox_launch"}
    grew = True
    while grew:
        grew = False
        for name, uses in fixtures.items():
            if name not in ok and ok & set(uses):
                ok.add(name)
                grew = True
    return ok & set(fixtures)


def test_the_check_follows_fixtures_that_ask_for_one_made_per_launcher() -> None:
    """A fixture asking for one that names ``sandbox_launch`` is made per launcher too."""
    fixtures = {"kept": ["sandbox_launch"], "on_top": ["kept"], "shared": ["tmp_path_factory"]}
    assert per_launcher(fixtures, set()) == {"kept", "on_top"}
    assert per_launcher({"uses_conftest": ["scene_kept"]}, {"scene_kept"}) == {"uses_conftest"}


def test_every_fixture_that_outlives_a_test_is_one_per_launcher() -> None:
    """Each module-, package- or session-scoped fixture of the package asks for
    ``sandbox_launch``, itself or through another such fixture (its own module's or the
    conftest's)."""
    shared = outliving_fixtures((HERE / "conftest.py").read_text())
    shared_ok = per_launcher(shared, set())
    missing = [f"conftest.py::{name}" for name in sorted(set(shared) - shared_ok)]
    count = len(shared)
    for path in sorted(HERE.glob("test_*.py")):
        fixtures = outliving_fixtures(path.read_text())
        count += len(fixtures)
        ok = per_launcher(fixtures, shared_ok)
        missing += [f"{path.name}::{name}" for name in sorted(set(fixtures) - ok)]
    assert count >= 8  # the walk found the package's fixtures
    assert missing == []
