"""`executor --help` and `executor serve --help` read as documentation."""

from __future__ import annotations

import subprocess
import sys

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


def test_the_command_list_is_the_same_without_serves_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Other commands build the parser without serve's options (they cost the import of the
    daemon); `executor --help` must read the same either way."""
    from executor import cli

    assert cli.build_parser().format_help() == cli.build_parser(serve_options=False).format_help()


def test_exec_and_version_do_not_load_the_daemon() -> None:
    """`executor exec` runs once per command from scripts: its start-up (here up to a
    connection that is refused) must not import the daemon or the sandbox's parts."""
    probe = (
        "import sys\n"
        "from executor import cli\n"
        "cli.main(['exec', '--url', 'ws://127.0.0.1:1', '--', 'true'])\n"
        "heavy = sorted(m for m in sys.modules if m in {'executor.daemon', 'executor.server',"
        " 'executor.sandbox', 'executor.process', 'executor.runner', 'pluggy'})\n"
        "print(heavy, file=sys.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, check=True
    )
    assert result.stderr.strip().splitlines()[-1] == "[]"
