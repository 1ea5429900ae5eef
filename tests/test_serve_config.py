"""``executor serve --config FILE``: every option from a TOML file, checked as on the command
line, errors naming the file and the key, the command line winning; and the full example in
docs/operating.md loads and starts a daemon configured as it says."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

import executor.logs
import executor.serve
from executor import cli
from executor.cli.serve_config import config_keys, parse_with_config, read_config
from executor.cli.serve_options import CONFIG_VALUE_TYPES, daemon_config, websocket_options
from executor.daemon import DaemonConfig
from executor.errors import ConfigError
from executor.transports.auth import ReloadingAuthenticator
from executor.transports.websocket import WebSocketOptions
from tests.support.daemon import RunningDaemon, executor_command
from tests.support.rawws import http_request, upgrade_headers
from tests.test_cli_serve import OPTIONS

OPERATING = Path(__file__).resolve().parents[1] / "docs" / "operating.md"

#: A command-line value for each option `OPTIONS` (test_cli_serve.py) does not cover.
MORE_OPTIONS: list[list[str]] = [
    ["--listen", "stdio"],
    ["--log-level", "debug"],
    ["--log-format", "json"],
    ["--state-dir", "/var/tmp/executor-state"],
    ["--require-sandbox", "read-only"],
    ["--workspace", "/srv/project"],
    ["--env-deny", "AWS_*"],
    ["--shared-loopback"],
    ["--ws-auth", "signed-bearer-token"],
    ["--ws-token-file", "/etc/executor/token"],
    ["--ws-token-sha256", "ab" * 32],
    ["--ws-shared-secret-file", "/etc/executor/secret"],
    ["--ws-issuer", "issuer"],
    ["--ws-audience", "audience"],
    ["--ws-max-clock-skew-seconds", "7"],
]


def serve_parser() -> argparse.ArgumentParser:
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve: argparse.ArgumentParser = subparsers.choices["serve"]
    return serve


KEYS = config_keys(serve_parser())


def toml_line(argv: list[str]) -> str:
    """The config-file line saying what ``argv`` (one option) says on the command line."""
    key, values = argv[0].removeprefix("--"), argv[1:]
    action = KEYS[key]
    if not values:
        return f"{key} = true"

    def literal(text: str) -> str:
        return text if action.type in CONFIG_VALUE_TYPES else f'"{text}"'

    if isinstance(action, argparse._AppendAction):
        return f"{key} = [{literal(values[0])}]"
    return f"{key} = {literal(values[0])}"


def parse_file(tmp_path: Path, text: str, *argv: str) -> argparse.Namespace:
    path = tmp_path / "serve.toml"
    path.write_text(text)
    return parse_with_config(cli.build_parser(), ["serve", "--config", str(path), *argv])


def without_config(args: argparse.Namespace) -> dict[str, Any]:
    return {name: value for name, value in vars(args).items() if name != "config"}


# --- every option ------------------------------------------------------------------------------


def test_every_option_has_a_key() -> None:
    """Each of serve's options can be set in a file under its long name, --config and --help
    excepted; and each has a case below (a new option fails here until it gets one)."""
    covered = {argv[0].removeprefix("--") for argv, _, _ in OPTIONS} | {
        argv[0].removeprefix("--") for argv in MORE_OPTIONS
    }
    assert set(KEYS) == covered
    assert "config" not in KEYS and "help" not in KEYS


@pytest.mark.parametrize(
    "argv",
    [argv for argv, _, _ in OPTIONS] + MORE_OPTIONS,
    ids=lambda argv: argv[0],
)
def test_a_key_sets_what_its_option_sets(argv: list[str], tmp_path: Path) -> None:
    """The file's `key = value` leaves exactly the namespace `--key value` leaves."""
    from_file = parse_file(tmp_path, toml_line(argv) + "\n")
    from_flags = cli.build_parser().parse_args(["serve", *argv])
    assert without_config(from_file) == without_config(from_flags)
    assert without_config(from_file) != without_config(cli.build_parser().parse_args(["serve"]))


def test_an_empty_file_changes_nothing(tmp_path: Path) -> None:
    args = parse_file(tmp_path, "# nothing\n")
    assert daemon_config(args) == DaemonConfig()
    assert websocket_options(args, None) == WebSocketOptions()


# --- the command line wins ---------------------------------------------------------------------


def test_the_command_line_overrides_the_file(tmp_path: Path) -> None:
    """A scalar given on the command line wins; a repeatable one replaces the file's whole
    list instead of adding to it; what the command line leaves out comes from the file."""
    text = (
        'listen = "ws://127.0.0.1:9999"\nsession-ttl = 5\nstop-grace = 3\n'
        'env-deny = ["AWS_*", "GITHUB_*"]\nblock-plugin = ["macos"]\n'
        "http-allow-private = true\n"
    )
    args = parse_file(
        tmp_path, text, "--session-ttl", "7", "--env-deny", "NPM_*", "--listen", "stdio"
    )
    assert args.listen == "stdio"
    config = daemon_config(args)
    assert config.session_ttl == 7.0
    assert config.env_deny == ("NPM_*",)
    assert config.process.stop_grace == 3.0
    assert config.blocked_plugins == ("macos",)
    assert config.http.allow_private is True


def test_an_abbreviated_option_still_counts_as_given(tmp_path: Path) -> None:
    args = parse_file(tmp_path, 'env-deny = ["AWS_*"]\n', "--env-d", "NPM_*")
    assert args.env_deny == ["NPM_*"]


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("session_ttl = 3", "unknown key 'session_ttl' (did you mean 'session-ttl'?)"),
        ("frobnicate = 1", "unknown key 'frobnicate' (keys are serve's long options"),
        ("config = 'other.toml'", "unknown key 'config'"),
        ("[http]\nrequests = 'off'", "unknown key 'http'"),
        ('session-ttl = "80"', "session-ttl: expected a number, found a string ('80')"),
        ("session-ttl = 0", "session-ttl: invalid value '0': expected a positive number"),
        ("session-ttl = true", "session-ttl: expected a number, found true or false (True)"),
        ("max-processes = 1.5", "max-processes: expected an integer, found a number (1.5)"),
        ("max-processes = -2", "max-processes: invalid value '-2': expected a positive integer"),
        ("listen = 8765", "listen: expected a string, found an integer (8765)"),
        ("block-plugin = 'macos'", "block-plugin: expected a list (the option is repeatable)"),
        ("env-deny = [1]", "env-deny: expected a string, found an integer (1)"),
        ("detached-output = 'keep'", "detached-output: invalid choice 'keep' (choose from"),
        ("http-allow-private = 'yes'", "http-allow-private: expected true or false, found a"),
        ("limit = ['speed=9']", "limit: speed: unknown limit"),
        ("http-allow-cidr = ['nope']", "http-allow-cidr: not an address or CIDR: 'nope'"),
        (
            "ws-max-clock-skew-seconds = -1",
            "ws-max-clock-skew-seconds: invalid value '-1': expected 0 or a positive",
        ),
        ("listen = ", "not valid TOML: Invalid value (at line 1, column 10)"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_file_and_key(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "serve.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError) as raised:
        read_config(str(path), serve_parser())
    assert raised.value.message.startswith(f"{path}: ")
    assert expected in raised.value.message
    # Through the command line: exit status 2 and that one line, nothing served.
    assert cli.main(["serve", "--config", str(path)]) == 2
    assert capsys.readouterr().err == f"executor: {raised.value.message}\n"


def test_a_missing_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.toml"
    assert cli.main(["serve", "--config", str(missing)]) == 2
    expected = f"executor: cannot read config file {missing}: No such file or directory\n"
    assert capsys.readouterr().err == expected


def test_help_mentions_the_config_file() -> None:
    text = " ".join(serve_parser().format_help().split())
    assert "--config FILE read options from this TOML file" in text
    assert "Every option can also be set in a TOML file (--config)" in text


# --- the documented example --------------------------------------------------------------------


def documented_example() -> str:
    """The TOML block of docs/operating.md's "Configuration file" section."""
    section = OPERATING.read_text().split("## Configuration file\n", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```toml\n(.*?)```", section, flags=re.DOTALL)
    return str(block)


def test_the_documented_example_names_every_key() -> None:
    """Every key appears in the example, set or as a commented-out line."""
    named = set(re.findall(r"^(?:# )?([a-z0-9-]+) = ", documented_example(), flags=re.MULTILINE))
    assert set(KEYS) - named == set()


def test_the_documented_example_configures_a_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example, with its token path pointing at a real file, starts `serve` with what it
    says: its listener, floor, environment denials, token auth and limits."""
    token = tmp_path / "token"
    token.write_text("a-capability-token\n")
    text = documented_example().replace("/home/alice/.config/executor/token", str(token))
    assert str(token) in text
    path = tmp_path / "serve.toml"
    path.write_text(text)
    seen: list[tuple[Any, DaemonConfig, WebSocketOptions]] = []

    async def fake_serve(address: Any, config: DaemonConfig, options: WebSocketOptions) -> int:
        seen.append((address, config, options))
        return 0

    monkeypatch.setattr(executor.serve, "serve", fake_serve)
    monkeypatch.setattr(executor.logs, "configure_logging", lambda *args: None)
    assert cli.main(["serve", "--config", str(path)]) == 0
    [(address, config, options)] = seen
    assert (address.kind, address.port) == ("ws", 8765)
    assert config.require_sandbox == "workspace"
    assert config.workspace_roots == ("/home/alice/src/project",)
    assert "AWS_*" in config.env_deny
    assert config.session_ttl == DaemonConfig().session_ttl
    assert config.secret_files == (str(token.resolve()),)
    assert isinstance(options.auth, ReloadingAuthenticator)
    assert options.auth.refusal("Bearer a-capability-token") is None
    assert options.auth.refusal("Bearer wrong") is not None


# --- a real daemon -----------------------------------------------------------------------------


def test_a_daemon_started_from_a_file_enforces_it(tmp_path: Path) -> None:
    """`executor serve --config FILE` as a unit runs it: the file's token auth is on (a
    missing token gets 401), and its listen is overridden by the command line's."""
    token = tmp_path / "token"
    token.write_text("from-the-file\n")
    path = tmp_path / "serve.toml"
    path.write_text(
        f'listen = "ws://127.0.0.1:1"\nws-auth = "capability-token"\nws-token-file = "{token}"\n'
    )
    daemon = RunningDaemon(["--config", str(path)])  # adds --listen ws://127.0.0.1:0
    try:
        assert http_request(daemon.url, "GET", "/", upgrade_headers({})).status == 401
        with daemon.client(additional_headers={"Authorization": "Bearer from-the-file"}) as c:
            assert c.initialize("config-file")["sessionId"]
    finally:
        daemon.stop()


def test_a_bad_file_stops_the_daemon_before_it_listens(tmp_path: Path) -> None:
    path = tmp_path / "serve.toml"
    path.write_text("max-processes = 0\n")
    result = subprocess.run(
        [*executor_command(), "serve", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        f"executor: {path}: max-processes: invalid value '0': expected a positive integer\n"
    )
