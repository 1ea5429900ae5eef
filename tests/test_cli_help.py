"""`executor --help` and `executor serve --help` read as documentation."""

from __future__ import annotations

import subprocess

import pytest

from tests.support.daemon import executor_command


@pytest.mark.parametrize(
    "command", [[], ["serve"], ["run"], ["profile", "explain"], ["doctor"], ["exec"]]
)
def test_help_is_complete_and_shows_only_real_defaults(command: list[str]) -> None:
    result = subprocess.run(
        [*executor_command(), *command, "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert result.stdout.startswith("usage: executor")
    assert "(default: None)" not in result.stdout
    assert "(default: [])" not in result.stdout
    assert "(default: False)" not in result.stdout


def test_every_serve_option_is_explained() -> None:
    help_text = subprocess.run(
        [*executor_command(), "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    lines = help_text.splitlines()
    options = [i for i, line in enumerate(lines) if line.startswith("  --")]
    for index in options:
        line = lines[index]
        explained = len(line.split("  ")) > 2 or (
            index + 1 < len(lines) and lines[index + 1].startswith(" " * 20)
        )
        assert explained, f"no help text for {line.strip()}"
