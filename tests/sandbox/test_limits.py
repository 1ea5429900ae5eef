"""Resource limits as values: text forms, profile ``[limits]``, ``serve --limit``, the defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from executor.cli import build_parser
from executor.errors import ProfileError
from executor.process.confinement import SandboxConfinement
from executor.sandbox import Command, ResourceLimits
from executor.sandbox.limits import (
    default_limits,
    parse_assignment,
    parse_limit,
    physical_memory,
)
from executor.sandbox.manager import SandboxManager, get_plugin_manager
from executor.sandbox.profiles import ProfileLibrary, default_library, load_file
from executor.sandbox.rules import RuleSet
from tests.sandbox.fakehost import FakeHost
from tests.support.daemon import executor_command

MiB = 1 << 20


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("processes", 512, 512),
        ("processes", "512", 512),
        ("memory", "512MiB", 512 * MiB),
        ("memory", "4GiB", 4 << 30),
        ("memory", "4G", 4 << 30),
        ("memory", "1.5GiB", 3 << 29),
        ("memory", "2GB", 2 * 10**9),
        ("memory", 1048576, MiB),
        ("file_size", "64k", 64 << 10),
        ("open_files", 1024, 1024),
        ("cpu_time", 30, 30),
        ("cpu_time", "90s", 90),
        ("cpu_time", "10m", 600),
        ("cpu_time", "2h", 7200),
        ("memory", "unlimited", None),
        ("cpu_time", "Unlimited", None),
    ],
)
def test_text_forms(name: str, text: object, value: int | None) -> None:
    """Integers, human sizes and durations; "unlimited" lifts a limit."""
    assert parse_limit(name, text) == value


def test_memory_as_a_share_of_physical_memory() -> None:
    """A share such as 50% is that part of this host's RAM, in whole MiB."""
    half = parse_limit("memory", "50%")
    assert half is not None and half % MiB == 0
    assert abs(half - physical_memory() // 2) < MiB


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("processes", 0, "must be positive"),
        ("processes", -5, "must be positive"),
        ("processes", True, "must be an integer or a string"),
        ("processes", 2.5, "must be an integer or a string"),
        ("processes", "4GiB", "expected a positive integer"),
        ("memory", "lots", "expected bytes"),
        ("memory", "4 parsecs", "expected bytes"),
        ("memory", "0.5", "whole, positive amount"),
        ("memory", "150%", "share of physical memory"),
        ("file_size", "50%", "expected bytes"),
        ("cpu_time", "1d", "expected seconds"),
        ("threads", 5, "unknown limit"),
    ],
)
def test_bad_values_say_what_was_expected(name: str, text: object, message: str) -> None:
    """Each refusal names what would have been accepted."""
    with pytest.raises(ValueError, match=message):
        parse_limit(name, text)


def test_limits_value() -> None:
    """Positive integers or None; reports list what is set, in a fixed order."""
    limits = ResourceLimits(cpu_time=5, memory=512 * MiB, processes=64)
    assert limits.summary() == "processes=64, memory=512MiB, cpu_time=5s"
    assert limits.replace(memory=None).summary() == "processes=64, cpu_time=5s"
    assert ResourceLimits().summary() == "none"
    with pytest.raises(ValueError, match="processes must be a positive integer"):
        ResourceLimits(processes=0)


def test_defaults_stop_a_fork_bomb_and_a_memory_hog() -> None:
    """Processes, memory and descriptors are capped by default; file size and CPU are not
    (docs/sandbox.md says why); a rule set carries the defaults unless told otherwise."""
    defaults = default_limits()
    assert defaults.processes == 2048 and defaults.open_files == 65536
    assert defaults.memory == parse_limit("memory", "50%")
    assert defaults.file_size is None and defaults.cpu_time is None
    assert RuleSet(filesystem_restricted=True).limits == defaults


# --- profiles ---------------------------------------------------------------------------------


def library(tmp_path: Path, **files: str) -> ProfileLibrary:
    """Shipped profiles plus ``files`` (name -> text) in ``tmp_path``."""
    from executor.sandbox.profiles import shipped_directory

    for name, text in files.items():
        (tmp_path / f"{name}.toml").write_text(text)
    return ProfileLibrary([shipped_directory(), tmp_path])


def test_shipped_profiles_carry_the_defaults_except_the_unsandboxed_one() -> None:
    """read-only states them, workspace and workspace-network inherit them; the
    danger-full-access file has no [limits] (nothing is sandboxed there)."""
    shipped = default_library()
    for name in ("read-only", "workspace", "workspace-network"):
        assert shipped.get(name).limits == default_limits()
    assert "limits" not in load_file(Path(shipped.get("danger-full-access").source)).data


def test_profile_limits_merge_through_extends(tmp_path: Path) -> None:
    """Keys override the parent's one by one; "unlimited" removes an inherited limit."""
    lib = library(
        tmp_path,
        base='extends = "workspace"\n[limits]\nprocesses = 100\nmemory = "1GiB"\n',
        child='extends = "base"\n[limits]\nmemory = "unlimited"\ncpu_time = "5m"\n',
    )
    assert lib.get("base").limits == default_limits().replace(processes=100, memory=1 << 30)
    assert lib.get("child").limits == default_limits().replace(
        processes=100, memory=None, cpu_time=300
    )


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ("[limits]\nthreads = 5\n", "limits.threads", "unknown key"),
        ('[limits]\nmemory = "lots"\n', "limits.memory", "expected bytes"),
        ("[limits]\nprocesses = 0\n", "limits.processes", "must be positive"),
        ("[limits]\nopen_files = true\n", "limits.open_files", "integer or a string"),
        ('limits = "small"\n', "limits", "must be a table"),
    ],
)
def test_bad_limits_name_the_file_and_key(
    tmp_path: Path, text: str, key: str, message: str
) -> None:
    """Strict validation, as for the rest of a profile."""
    lib = library(tmp_path, bad='extends = "workspace"\n' + text)
    with pytest.raises(ProfileError) as caught:
        lib.get("bad")
    assert f"bad.toml: {key}: " in caught.value.message
    assert message in caught.value.message


def test_an_error_in_a_parent_names_the_parent(tmp_path: Path) -> None:
    """The file that has the bad value is the one named."""
    lib = library(
        tmp_path,
        parent='extends = "workspace"\n[limits]\ncpu_time = "forever"\n',
        child='extends = "parent"\n',
    )
    with pytest.raises(ProfileError, match=r"parent\.toml: limits\.cpu_time"):
        lib.get("child")


def test_an_unsandboxed_profile_cannot_have_limits(tmp_path: Path) -> None:
    """type = "disabled" runs commands unconfined: limits there would be a false promise."""
    lib = library(tmp_path, loose='type = "disabled"\n[limits]\nprocesses = 10\n')
    with pytest.raises(ProfileError, match=r"loose\.toml: limits: .*unconfined"):
        lib.get("loose")


# --- the daemon -------------------------------------------------------------------------------


def test_serve_limit_option() -> None:
    """--limit NAME=VALUE, repeatable, same forms; bad ones are usage errors."""
    args = build_parser().parse_args(
        ["serve", "--limit", "processes=64", "--limit", "memory=512MiB", "--limit", "cpu-time=2m"]
    )
    assert args.limit == [("processes", 64), ("memory", 512 * MiB), ("cpu_time", 120)]
    assert parse_assignment("file_size=unlimited") == ("file_size", None)
    for bad in ("processes", "=5", "memory=huge", "colour=red"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", "--limit", bad])


def test_wire_requests_get_the_daemons_limits() -> None:
    """A client's sandbox carries no limits: the confinement puts the daemon's on the rules."""
    from executor.protocol.intent import parse_sandbox

    ours = ResourceLimits(processes=64, memory=128 * MiB)
    confinement = SandboxConfinement(
        SandboxManager(get_plugin_manager(blocked=("linux", "macos", "windows"))),
        FakeHost(dirs=["/ws"]),
        limits=ours,
    )
    intent = parse_sandbox(
        default_library().get("workspace").wire_context(workspace_roots=("/ws",), cwd="/ws")
    )
    command = Command(executable="/bin/true", argv=("true",), env={}, cwd="/ws", tty=False)
    rules = confinement.rules_for(intent, command)
    assert rules is not None and rules.limits == ours


# --- what operators see -----------------------------------------------------------------------


def test_doctor_and_explain_show_the_limits_and_how_they_are_enforced(tmp_path: Path) -> None:
    """doctor: the defaults, and one line per limit naming its mechanism on this host;
    profile explain: the profile's limits; both as the lines docs/sandbox.md shows."""

    def executor(*args: str) -> str:
        result = subprocess.run(
            [*executor_command(), *args],
            capture_output=True,
            text=True,
            env={**os.environ, "EXECUTOR_STATE_DIR": str(tmp_path / "state")},
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
        return result.stdout

    explained = executor("profile", "explain", "workspace", "--workspace", str(tmp_path))
    assert f"limits: {default_limits().summary()}\n" in explained
    doctor = executor("doctor", "--workspace", str(tmp_path))
    assert f"limits of every sandboxed command: {default_limits().summary()}" in doctor
    if sys.platform.startswith("linux"):
        for name in ("processes", "memory", "open_files", "file_size", "cpu_time"):
            assert f"linux.limits.{name}: " in doctor
        assert "profile workspace: enforced by linux — limits(" in doctor
