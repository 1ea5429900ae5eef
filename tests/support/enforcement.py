"""Skips that must not happen on CI: with EXECUTOR_REQUIRE_ENFORCEMENT=1 they fail instead."""

from __future__ import annotations

import os

import pytest

REQUIRE_ENV = "EXECUTOR_REQUIRE_ENFORCEMENT"


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
