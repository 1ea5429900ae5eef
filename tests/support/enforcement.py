"""Skips that must not happen on CI: with EXECUTOR_REQUIRE_ENFORCEMENT=1 they fail instead.

The rule lives here, once: a test marked ``enforcement`` (directly, by its module's
``pytestmark`` or by a ``pytest.param``) that skips — in its body, in a fixture, or through
a ``skipif`` mark — is reported as failed when the variable is set. The root ``conftest.py``
loads this module as a plugin. ``skip_unless`` does the same for tests that carry no mark.
An enforcement module must not skip at import (``pytest.skip(allow_module_level=True)``):
no test exists yet to carry the mark; use a ``skipif`` in ``pytestmark`` instead.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

REQUIRE_ENV = "EXECUTOR_REQUIRE_ENFORCEMENT"
MARKER = "enforcement"


def enforcement_required() -> bool:
    """CI sets the variable: every enforcement test must run there."""
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def skip_unless(condition: bool, reason: str) -> None:
    """Skip the calling test when ``condition`` is false, or fail it where enforcement is needed."""
    if condition:
        return
    if enforcement_required():
        pytest.fail(f"{reason} (enforcement is required here: {REQUIRE_ENV}=1)")
    pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A skipped ``enforcement`` test, in any phase, fails where enforcement is required."""
    report = yield
    if (
        report.skipped
        and not hasattr(report, "wasxfail")  # an xfail is reported as a skip: not ours
        and item.get_closest_marker(MARKER) is not None
        and enforcement_required()
    ):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        report.outcome = "failed"
        report.longrepr = (
            f"an enforcement test was skipped ({reason}), but {REQUIRE_ENV}=1 requires every "
            "enforcement test to run here"
        )
    return report
