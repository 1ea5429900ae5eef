"""``EXECUTOR_LINUX_*`` layer switches: the usual spellings of off and on, and nothing else."""

from __future__ import annotations

import pytest

from executor.errors import ConfigError

probe = pytest.importorskip("executor_linux.probe")


@pytest.mark.parametrize("value", ["off", "OFF", "0", "false", "False", "no", " off "])
@pytest.mark.parametrize("layer", ["namespaces", "landlock", "cgroups"])
def test_the_usual_spellings_of_off_switch_a_layer_off(
    monkeypatch: pytest.MonkeyPatch, layer: str, value: str
) -> None:
    name = probe.LAYER_SWITCH_ENV[layer]
    monkeypatch.setenv(name, value)
    assert probe.switched_off(layer) == f"disabled by {name}={value}"


@pytest.mark.parametrize("value", [None, "", "on", "1", "true", "YES"])
def test_unset_and_the_spellings_of_on_leave_it_on(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("EXECUTOR_LINUX_LANDLOCK", raising=False)
    else:
        monkeypatch.setenv("EXECUTOR_LINUX_LANDLOCK", value)
    assert probe.switched_off("landlock") == ""


@pytest.mark.parametrize("value", ["flase", "disabled", "2", "of"])
def test_anything_else_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("EXECUTOR_LINUX_NAMESPACES", value)
    with pytest.raises(ConfigError) as refused:
        probe.switched_off("namespaces")
    assert refused.value.message.startswith(
        f"EXECUTOR_LINUX_NAMESPACES={value!r} is not understood: use off (or 0, false, no)"
    )
