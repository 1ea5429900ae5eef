"""`executor run`'s environment: ours minus secret-looking names (the daemon's default
excludes), `--env`, `--clearenv`, `--inherit-env`."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from executor.envpolicy import DEFAULT_EXCLUDES, build_environment
from executor.errors import ConfigError
from executor.protocol.messages import EnvPolicy, Inherit
from executor.runner import child_environment
from tests.executor_linux.conftest import linux_sandbox_available
from tests.support.daemon import executor_command
from tests.support.enforcement import skip_unless

SECRETS = {"GITHUB_TOKEN": "t", "aws_secret_access_key": "s", "OPENAI_API_KEY": "k"}
PLAIN = {"EXECUTOR_TEST_PLAIN": "p", "LANG": "C.UTF-8"}
#: Prints the command's environment as it is (Python would add LC_CTYPE to a bare one).
PRINT_ENV = shutil.which("env") or "/usr/bin/env"


def run_env(*options: str, profile: str = "danger-full-access") -> tuple[dict[str, str], str]:
    """The command's environment under ``options``, and our stderr."""
    env = {**os.environ, **SECRETS, **PLAIN}
    command = [PRINT_ENV]
    result = subprocess.run(
        [*executor_command(), "run", "--profile", profile, *options, "--", *command],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    pairs = (line.split("=", 1) for line in result.stdout.splitlines())
    return dict((name, value) for name, value in pairs), result.stderr


def test_secret_looking_variables_are_withheld_by_default() -> None:
    """Names matching the default excludes, in any case, do not reach the command; the rest
    does; `-v` names what was left out (never the values)."""
    seen, stderr = run_env("-v")
    assert not set(SECRETS) & set(seen)
    assert {k: seen.get(k) for k in PLAIN} == PLAIN and seen["PATH"] == os.environ["PATH"]
    line = next(line for line in stderr.splitlines() if "not passed" in line)
    assert all(name in line for name in SECRETS) and "EXECUTOR_TEST_PLAIN" not in line
    assert not any(value in line.split(": ", 1)[1].split(", ") for value in SECRETS.values())


@pytest.mark.enforcement
def test_the_same_holds_inside_a_sandbox() -> None:
    """The environment is decided before confinement: a sandboxed command gets the same."""
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    seen, _ = run_env(profile="read-only")
    assert not set(SECRETS) & set(seen) and seen["EXECUTOR_TEST_PLAIN"] == "p"


def test_env_passes_sets_and_copies() -> None:
    """`--env NAME` passes one of ours (secret-looking or not), `NAME=VALUE` sets one (even
    over ours), a NAME we do not have stays unset."""
    seen, _ = run_env(
        "--env", "GITHUB_TOKEN", "--env", "LANG=C", "--env", "X=a=b", "--env", "EXECUTOR_NOT_SET_X"
    )
    assert seen["GITHUB_TOKEN"] == "t" and seen["LANG"] == "C" and seen["X"] == "a=b"
    assert "EXECUTOR_NOT_SET_X" not in seen and "OPENAI_API_KEY" not in seen


def test_clearenv_starts_empty() -> None:
    """Only what `--env` adds, not even PATH; the program is still found on ours."""
    seen, _ = run_env("--clearenv", "--env", "X=1", "--env", "OPENAI_API_KEY")
    assert seen == {"X": "1", "OPENAI_API_KEY": "k"}


def test_inherit_env_passes_everything() -> None:
    """`--inherit-env`: the secret-looking names too."""
    seen, _ = run_env("--inherit-env")
    assert {k: seen.get(k) for k in SECRETS} == SECRETS


def test_clearenv_and_inherit_env_exclude_each_other() -> None:
    """A usage error (2) rather than a guess."""
    options = ["--clearenv", "--inherit-env"]
    result = subprocess.run(
        [*executor_command(), "run", "--profile", "read-only", *options, "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and "not allowed with" in result.stderr


def test_filtering_is_the_daemons_envpolicy() -> None:
    """The same names as an envPolicy without ignoreDefaultExcludes would drop."""
    ours = {**SECRETS, **PLAIN, "KEYRING": "x", "MONKEY": "y", "tokens": "z"}
    policy = EnvPolicy(
        inherit=Inherit.ALL, ignore_default_excludes=False, exclude=(), set={}, include_only=()
    )
    made = child_environment(ours, [], clear=False, inherit=False)
    assert made.env == build_environment({}, policy, ours)
    assert made.withheld == tuple(sorted(set(ours) - set(made.env)))
    assert set(made.withheld) == {*SECRETS, "KEYRING", "MONKEY", "tokens"}
    assert DEFAULT_EXCLUDES == ("*KEY*", "*SECRET*", "*TOKEN*")


@pytest.mark.parametrize("setting", ["", "=x"])
def test_a_setting_without_a_name_is_refused(setting: str) -> None:
    """`--env ''` and `--env =x` are errors naming the setting."""
    with pytest.raises(ConfigError, match="expected NAME=VALUE or NAME"):
        child_environment({}, [setting], clear=False, inherit=False)
