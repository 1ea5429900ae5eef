"""The one rule for CI: a skipped ``enforcement`` test fails when EXECUTOR_REQUIRE_ENFORCEMENT
is set, however it skipped (its body, a fixture, a module-level ``skipif``, a marked param);
unmarked skips and expected failures are left alone. Checked on a throwaway test file run
by a separate pytest with this repository's plugin."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.enforcement import REQUIRE_ENV

ROOT = Path(__file__).resolve().parents[1]

BODY = """
import pytest

@pytest.fixture
def unavailable():
    pytest.skip("no such feature here")

@pytest.mark.enforcement
def test_body_skip():
    pytest.skip("no such feature here")

@pytest.mark.enforcement
def test_fixture_skip(unavailable):
    pass

@pytest.mark.enforcement
@pytest.mark.skipif(True, reason="decided by a mark")
def test_skipif_mark():
    pass

@pytest.mark.parametrize(
    "mode", [pytest.param("strict", marks=pytest.mark.enforcement), "lenient"]
)
def test_marked_param(mode):
    pytest.skip(f"{mode} is not available")

def test_unmarked_skip():
    pytest.skip("not an enforcement test")

@pytest.mark.enforcement
@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False

@pytest.mark.enforcement
def test_runs():
    pass
"""

MODULE_SKIPIF = """
import pytest

pytestmark = [pytest.mark.enforcement, pytest.mark.skipif(True, reason="module-wide")]

def test_one():
    pass
"""


def outcomes(tmp_path: Path, required: bool) -> tuple[dict[str, str], str]:
    """Each test's outcome in a run of the throwaway files, and the run's output."""
    (tmp_path / "test_body.py").write_text(BODY)
    (tmp_path / "test_module.py").write_text(MODULE_SKIPIF)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    enforcement: test\n")
    env = {key: value for key, value in os.environ.items() if key != REQUIRE_ENV}
    if required:
        env[REQUIRE_ENV] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    plugins = ["-p", "tests.support.enforcement", "-p", "no:cacheprovider"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *plugins, "-v", "--strict-markers", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    line = re.compile(r"^\S+?::(\S+) (PASSED|FAILED|SKIPPED|XFAIL|ERROR)\b", re.MULTILINE)
    found = {name: outcome.lower() for name, outcome in line.findall(result.stdout)}
    assert found, result.stdout + result.stderr
    return found, result.stdout


#: Outcomes without the variable.
UNREQUIRED = {
    "test_body_skip": "skipped",
    "test_fixture_skip": "skipped",
    "test_skipif_mark": "skipped",
    "test_marked_param[strict]": "skipped",
    "test_marked_param[lenient]": "skipped",
    "test_unmarked_skip": "skipped",
    "test_expected_failure": "xfail",
    "test_runs": "passed",
    "test_one": "skipped",
}


def test_without_the_variable_skips_stay_skips(tmp_path: Path) -> None:
    assert outcomes(tmp_path, required=False)[0] == UNREQUIRED


def test_with_the_variable_every_marked_skip_fails(tmp_path: Path) -> None:
    expected = {
        **UNREQUIRED,
        "test_body_skip": "failed",
        "test_fixture_skip": "error",  # a failed setup phase is an error
        "test_skipif_mark": "error",
        "test_marked_param[strict]": "failed",
        "test_one": "error",
    }
    found, output = outcomes(tmp_path, required=True)
    assert found == expected
    assert "an enforcement test was skipped (Skipped: no such feature here)" in output
    assert f"but {REQUIRE_ENV}=1 requires every enforcement test to run here" in output


@pytest.mark.parametrize("value", ["", "0"])
def test_empty_or_zero_does_not_require(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.enforcement import enforcement_required

    monkeypatch.setenv(REQUIRE_ENV, value)
    assert not enforcement_required()
    monkeypatch.setenv(REQUIRE_ENV, "1")
    assert enforcement_required()
