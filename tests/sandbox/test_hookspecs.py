"""The plugin API is complete and documented; misspellings fail loudly."""

from __future__ import annotations

import inspect
from typing import Any

import pluggy
import pytest

from executor.sandbox import defaults, hookimpl, hookspecs
from executor.sandbox.manager import get_plugin_manager

SPECS = [
    getattr(hookspecs, name)
    for name in dir(hookspecs)
    if name.startswith("executor_") and callable(getattr(hookspecs, name))
]


def test_there_are_hookspecs() -> None:
    """The spec module declares the backend, selection, launch and observation hooks."""
    assert {spec.__name__ for spec in SPECS} == {
        "executor_sandbox_backends",
        "executor_select_backend",
        "executor_prepare_launch",
        "executor_launch_planned",
    }


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.__name__)
def test_every_hookspec_is_documented(spec: Any) -> None:
    """Each hookspec has a docstring, and firstresult ones say so."""
    doc = inspect.getdoc(spec) or ""
    assert len(doc) > 80
    options = spec.executor_spec
    if options.get("firstresult"):
        assert "first non-None result" in doc


def test_builtin_defaults_are_trylast() -> None:
    """Any plugin can override the built-in implementations."""
    for name in ("executor_select_backend", "executor_prepare_launch"):
        assert getattr(defaults, name).executor_impl["trylast"]


def test_misspelled_hooks_are_caught() -> None:
    """check_pending() turns a typo in a plugin into an error at start-up."""

    class Typo:
        @hookimpl
        def executor_select_backnd(self) -> None:
            """Misspelled on purpose."""

    with pytest.raises(pluggy.PluginValidationError):
        get_plugin_manager(plugins=[Typo()])


def test_public_api_is_documented() -> None:
    """Every name a plugin imports from executor.sandbox has a docstring."""
    import executor.sandbox as api

    for name in api.__all__:
        value = getattr(api, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert inspect.getdoc(value), name
