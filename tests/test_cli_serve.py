"""``executor serve``'s options: their defaults are the configuration's, and each one lands in
the configuration it names; ``--state-dir`` is passed on, not put into the environment."""

from __future__ import annotations

import argparse
import ipaddress
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import executor.logs
import executor.serve
from executor import cli
from executor.cli.serve_options import daemon_config, websocket_options
from executor.daemon import DaemonConfig
from executor.output import DetachedOutput
from executor.process import ProcessLimits
from executor.sandbox.api import HostInfo
from executor.sandbox.host import state_directory
from executor.sandbox.limits import DEFAULT_LIMITS_TEXT, default_limits
from executor.serve import DEFAULT_LISTEN
from executor.transports.auth import DEFAULT_MAX_CLOCK_SKEW
from executor.transports.websocket import WebSocketOptions
from tests.sandbox.wire import context, managed, special
from tests.support.daemon import RunningDaemon
from tests.support.enforcement import skip_unless


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["serve", *argv])


def serve_help() -> str:
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = " ".join(subparsers.choices["serve"].format_help().split())
    return text.split(" options: ", 1)[1]  # past the usage line


# --- defaults ----------------------------------------------------------------------------------


def test_defaults_are_the_configurations_defaults() -> None:
    """Without options, serve builds exactly the configurations' own defaults: a default
    changed in a dataclass changes serve's, and one changed in the CLI alone fails here."""
    args = parse()
    assert daemon_config(args) == DaemonConfig()
    assert websocket_options(args, None) == WebSocketOptions()
    assert args.listen == DEFAULT_LISTEN


def test_help_shows_the_configurations_defaults() -> None:
    """--help shows the defaults the configurations hold, not copies of them."""
    text = serve_help()
    process, options, daemon = ProcessLimits(), WebSocketOptions(), DaemonConfig()
    for option, default in [
        ("--session-ttl", daemon.session_ttl),
        ("--max-processes", process.max_total),
        ("--retained-output-bytes", process.retained_bytes),
        ("--detached-output", process.detached_output.value),
        ("--max-message-bytes", options.max_message_bytes),
        ("--http-max-buffered-bytes", daemon.http.max_buffered_bytes),
    ]:
        after = text.split(f"{option} ", 1)[1]
        assert f"(default: {default})" in after.split(" --", 1)[0], option
    assert f"(default: {DEFAULT_MAX_CLOCK_SKEW})" in text
    for name, value in DEFAULT_LIMITS_TEXT.items():
        assert f"{name}={value}" in text


OPTIONS: list[tuple[list[str], Callable[[DaemonConfig, WebSocketOptions], Any], Any]] = [
    (["--session-ttl", "5"], lambda d, w: d.session_ttl, 5.0),
    (["--process-retention", "6"], lambda d, w: d.process.exited_retention, 6.0),
    (["--retained-output-bytes", "7"], lambda d, w: d.process.retained_bytes, 7),
    (["--detached-output", "block"], lambda d, w: d.process.detached_output, DetachedOutput.BLOCK),
    (["--max-processes-per-session", "8"], lambda d, w: d.process.max_per_session, 8),
    (["--max-processes", "9"], lambda d, w: d.process.max_total, 9),
    (["--max-command-bytes", "10"], lambda d, w: d.process.max_command_bytes, 10),
    (["--stop-grace", "11"], lambda d, w: d.process.stop_grace, 11.0),
    (["--block-plugin", "macos"], lambda d, w: d.blocked_plugins, ("macos",)),
    (
        ["--limit", "processes=12"],
        lambda d, w: d.sandbox_limits,
        default_limits().replace(processes=12),
    ),
    (["--max-frame-bytes", "13"], lambda d, w: w.max_frame_bytes, 13),
    (["--max-message-bytes", "14"], lambda d, w: w.max_message_bytes, 14),
    (["--ping-interval", "15"], lambda d, w: w.ping_interval, 15.0),
    (["--ping-timeout", "16"], lambda d, w: w.ping_timeout, 16.0),
    (["--close-timeout", "17"], lambda d, w: w.close_timeout, 17.0),
    (["--http-requests", "off"], lambda d, w: d.http.enabled, False),
    (["--http-header-env-var", "TOKEN"], lambda d, w: d.http.header_env_vars, {"TOKEN"}),
    (["--http-allow-host", "example.com"], lambda d, w: d.http.allowed_hosts, ("example.com",)),
    (["--http-allow-private"], lambda d, w: d.http.allow_private, True),
    (
        ["--http-allow-cidr", "10.0.0.0/8"],
        lambda d, w: d.http.allowed_networks,
        (ipaddress.ip_network("10.0.0.0/8"),),
    ),
    (["--http-max-buffered-bytes", "18"], lambda d, w: d.http.max_buffered_bytes, 18),
    (["--require-sandbox", "read-only"], lambda d, w: d.require_sandbox, "read-only"),
    (["--workspace", "/srv/ws"], lambda d, w: d.workspace_roots, ("/srv/ws",)),
    (["--env-deny", "AWS_*"], lambda d, w: d.env_deny, ("AWS_*",)),
]


@pytest.mark.parametrize(("argv", "field", "expected"), OPTIONS, ids=[o[0][0] for o in OPTIONS])
def test_each_option_sets_its_field(
    argv: list[str], field: Callable[[DaemonConfig, WebSocketOptions], Any], expected: Any
) -> None:
    """Each option lands in the field whose default it shows (and is not that default)."""
    args = parse(*argv)
    daemon, options = daemon_config(args), websocket_options(args, None)
    assert field(daemon, options) == expected
    assert field(DaemonConfig(), WebSocketOptions()) != expected


# --- bad values ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["--session-ttl", "abc"],
            "argument --session-ttl: invalid value 'abc': expected a positive number of seconds",
        ),
        (["--stop-grace", "0"], "argument --stop-grace: invalid value '0': expected a positive"),
        (["--ping-interval", "nan"], "invalid value 'nan': expected a positive number of seconds"),
        (["--close-timeout", "inf"], "invalid value 'inf': expected a positive number of seconds"),
        (
            ["--max-processes", "1.5"],
            "argument --max-processes: invalid value '1.5': expected a positive integer",
        ),
        (["--max-frame-bytes", "-3"], "invalid value '-3': expected a positive integer"),
        (
            ["--ws-max-clock-skew-seconds", "x"],
            "invalid value 'x': expected 0 or a positive whole number of seconds",
        ),
    ],
    ids=lambda value: value[0] if isinstance(value, list) else "",
)
def test_a_bad_value_names_the_option_and_what_it_expects(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not argparse's `invalid _positive value`: the value, the option, what would do."""
    with pytest.raises(SystemExit) as exited:
        parse(*argv)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert expected in error
    assert len(error.splitlines()) == 2  # the short usage line, then the error


# --- the state directory -----------------------------------------------------------------------


def test_state_dir_is_passed_on_not_put_into_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`serve --state-dir DIR` runs the daemon with DIR (its parents resolved; a symlink as
    DIR itself is refused when the daemon checks it), and leaves this process's environment
    as it was; without it, EXECUTOR_STATE_DIR still sets the default."""
    monkeypatch.setenv("EXECUTOR_STATE_DIR", str(tmp_path / "from-env"))
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path)
    seen: list[DaemonConfig] = []

    async def fake_serve(address: object, config: DaemonConfig, options: object) -> int:
        seen.append(config)
        return 0

    monkeypatch.setattr(executor.serve, "serve", fake_serve)
    monkeypatch.setattr(executor.logs, "configure_logging", lambda *args: None)
    before = dict(os.environ)
    assert cli.main(["serve", "--listen", "stdio", "--state-dir", "link/state"]) == 0
    assert dict(os.environ) == before
    assert seen[0].state_dir == str((tmp_path / "real").resolve() / "state")
    assert cli.main(["serve", "--listen", "stdio"]) == 0
    assert seen[1].state_dir == state_directory() == str(tmp_path / "from-env")


def test_the_linux_backend_takes_the_state_dir_it_is_given(tmp_path: Path) -> None:
    """The Linux plugin builds its backend on the host's state directory."""
    executor_linux = pytest.importorskip("executor_linux.plugin")
    given = HostInfo.current(state_dir=str(tmp_path))
    [backend] = executor_linux.executor_sandbox_backends(host=given)
    assert backend.state_dir == str(tmp_path)
    [default] = executor_linux.executor_sandbox_backends(host=HostInfo.current())
    assert default.state_dir == state_directory()  # EXECUTOR_STATE_DIR, else its default


@pytest.fixture
def two_state_dirs() -> Iterator[tuple[Path, Path]]:
    """A directory for --state-dir and one for EXECUTOR_STATE_DIR (left uncreated)."""
    root = Path(tempfile.mkdtemp(prefix="executor-state-")).resolve()
    yield root / "given", root / "from-env"
    shutil.rmtree(root, ignore_errors=True)


def test_state_dir_reaches_the_sandbox_backend(two_state_dirs: tuple[Path, Path]) -> None:
    """The Linux backend stages its launches in the --state-dir (the directory every sandbox
    has hidden), not in the one the environment names."""
    from tests.executor_linux.conftest import linux_sandbox_available

    skip_unless(
        sys.platform.startswith("linux") and linux_sandbox_available(),
        "Landlock, seccomp and namespaces are needed",
    )
    given, from_env = two_state_dirs
    daemon = RunningDaemon(["--state-dir", str(given)], env={"EXECUTOR_STATE_DIR": str(from_env)})
    try:
        with daemon.session() as client:
            sandbox = context(managed(special("root", "read")), cwd="/")
            params = {
                "processId": "p",
                "argv": ["/bin/true"],
                "cwd": "file:///",
                "env": {},
                "tty": False,
                "sandbox": sandbox,
            }
            client.request("process/start", params)
            events = client.process_events("p")
            exited = next(e["params"] for e in events if e["method"] == "process/exited")
            assert exited["exitCode"] == 0
    finally:
        daemon.stop()
    assert (given / "staging").is_dir()
    assert not from_env.exists()
