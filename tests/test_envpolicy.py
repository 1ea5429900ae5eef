"""Child environments (protocol.md §5.5): unit table of envpolicy, then real /usr/bin/env runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from executor.client import SyncEnvironment
from executor.envpolicy import build_environment, find_program, validate_command
from executor.errors import InvalidParams
from executor.protocol.decode import decode
from executor.protocol.messages import EnvPolicy
from executor.spawn.spawner import sorted_environment
from tests.support.client import output_of
from tests.support.daemon import RunningDaemon

EXECUTOR_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "TERM": "xterm",
    "TZ": "UTC",
    "PWD": "/srv",
    "USER": "root",
    "API_KEY": "k",
    "keyring": "kr",
    "MY_SECRET_X": "s",
    "GH_TOKEN": "t",
    "Tokenizer": "tok",
    "PLAIN": "p",
    "CACHE_DIR": "/c",
}


def policy(**fields: Any) -> EnvPolicy:
    """An EnvPolicy decoded from wire fields (all five are required on the wire)."""
    wire = {
        "inherit": "all",
        "ignoreDefaultExcludes": False,
        "exclude": [],
        "set": {},
        "includeOnly": [],
    }
    wire.update(fields)
    return decode(EnvPolicy, wire)


CASES = [
    ("no-policy-is-exactly-env", {"A": "1"}, None, {"A": "1"}),
    ("no-policy-empty", {}, None, {}),
    (
        "inherit-all-default-excludes",
        {},
        policy(),
        {
            k: v
            for k, v in EXECUTOR_ENV.items()
            if k not in {"API_KEY", "keyring", "MY_SECRET_X", "GH_TOKEN", "Tokenizer"}
        },
    ),
    ("inherit-all-ignore-default-excludes", {}, policy(ignoreDefaultExcludes=True), EXECUTOR_ENV),
    (
        "inherit-core",
        {},
        policy(inherit="core"),
        {"PATH": "/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8", "USER": "root"},
    ),
    ("inherit-none", {}, policy(inherit="none"), {}),
    ("inherit-none-set", {}, policy(inherit="none", set={"X": "1"}), {"X": "1"}),
    (
        "set-is-not-default-excluded",
        {},
        policy(inherit="none", set={"MY_TOKEN": "1"}),
        {"MY_TOKEN": "1"},
    ),
    (
        "exclude-globs-case-insensitive",
        {},
        policy(inherit="core", exclude=["path", "H*"]),
        {"LANG": "C.UTF-8", "USER": "root"},
    ),
    (
        "set-overrides-inherited",
        {},
        policy(inherit="core", set={"HOME": "/h"}, includeOnly=["HOME"]),
        {"HOME": "/h"},
    ),
    (
        "include-only-filters-set-too",
        {},
        policy(inherit="none", set={"A": "1", "B": "2"}, includeOnly=["a"]),
        {"A": "1"},
    ),
    (
        "include-only-glob",
        {},
        policy(inherit="all", includeOnly=["*DIR", "P?ATH"]),
        {"CACHE_DIR": "/c"},
    ),
    (
        "env-overlay-wins-and-is-not-filtered",
        {"GH_TOKEN": "mine", "ZED": "z", "HOME": "/env"},
        policy(inherit="core", exclude=["ZED"], includeOnly=["HOME"]),
        {"HOME": "/env", "GH_TOKEN": "mine", "ZED": "z"},
    ),
]


@pytest.mark.parametrize(
    ("env", "env_policy", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_build_environment(
    env: dict[str, str], env_policy: EnvPolicy | None, expected: dict[str, str]
) -> None:
    """Each step of the reference's environment construction, in order."""
    assert build_environment(env, env_policy, EXECUTOR_ENV) == expected


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        ({"inherit": "all"}, "missing field `ignoreDefaultExcludes`"),
        (
            {
                "inherit": "some",
                "ignoreDefaultExcludes": False,
                "exclude": [],
                "set": {},
                "includeOnly": [],
            },
            "unknown variant `some`",
        ),
        (
            {
                "inherit": "all",
                "ignoreDefaultExcludes": False,
                "exclude": [1],
                "set": {},
                "includeOnly": [],
            },
            "expected a string",
        ),
        (
            {
                "inherit": "all",
                "ignoreDefaultExcludes": False,
                "exclude": [],
                "set": {"A": 1},
                "includeOnly": [],
            },
            "expected a string",
        ),
    ],
    ids=["missing-field", "bad-inherit", "exclude-not-string", "set-value-not-string"],
)
def test_policy_decoding_errors(wire: dict[str, Any], message: str) -> None:
    """A malformed envPolicy is InvalidParams naming the problem."""
    with pytest.raises(InvalidParams, match=message):
        decode(EnvPolicy, wire)


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ((), {}, "argv must not be empty"),
        (("a\0b",), {}, "argv[0] must not contain NUL bytes"),
        (("a", "b\0"), {}, "argv[1] must not contain NUL bytes"),
        (("a",), {"": "x"}, "invalid environment variable name"),
        (("a",), {"A=B": "x"}, "invalid environment variable name"),
        (("a",), {"A": "x\0"}, "environment variable A must not contain NUL bytes"),
        (("x" * 60,), {"A": "y" * 60}, "more than the limit of 100"),
    ],
    ids=["empty", "nul-argv0", "nul-arg", "empty-name", "equals-in-name", "nul-value", "too-big"],
)
def test_validate_command_refuses_what_execve_cannot_carry(
    argv: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    """Commands execve would reject (or that exceed the byte limit) are refused up front."""
    with pytest.raises(InvalidParams) as info:
        validate_command(argv, env, 100)
    assert message in info.value.message


def test_find_program_uses_child_path_then_daemon_path(tmp_path: Path) -> None:
    """Bare names are looked up on the child's PATH if it has one, else the daemon's."""
    tool = tmp_path / "mytool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    child_path = {"PATH": f"/nonexistent:{tmp_path}"}
    assert find_program("mytool", child_path, {"PATH": "/bin"}, "/") == str(tool)
    assert find_program("mytool", {}, {"PATH": str(tmp_path)}, "/") == str(tool)
    assert find_program("./rel/x", {}, {}, "/") == "./rel/x"
    with pytest.raises(FileNotFoundError):
        find_program("mytool", {"PATH": "/bin"}, {"PATH": str(tmp_path)}, "/")


def test_relative_path_entries_are_taken_in_the_commands_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty or relative PATH entry means the command's working directory, as execvp
    there would (and the reference does), not the daemon's own directory."""
    workspace = tmp_path / "workspace"
    (workspace / "bin").mkdir(parents=True)
    for place in (workspace / "hello", workspace / "bin" / "tool"):
        place.write_text("#!/bin/sh\n")
        place.chmod(0o755)
    elsewhere = tmp_path / "daemon"
    elsewhere.mkdir()
    (elsewhere / "other").write_text("#!/bin/sh\n")
    (elsewhere / "other").chmod(0o755)
    monkeypatch.chdir(elsewhere)
    cwd = str(workspace)
    assert find_program("hello", {"PATH": "."}, {}, cwd) == str(workspace / "hello")
    assert find_program("hello", {"PATH": ":/usr/bin"}, {}, cwd) == str(workspace / "hello")
    assert find_program("tool", {"PATH": "/nonexistent:bin"}, {}, cwd) == str(
        workspace / "bin" / "tool"
    )
    with pytest.raises(FileNotFoundError):  # in the daemon's directory only
        find_program("other", {"PATH": "."}, {}, cwd)


def test_a_match_that_cannot_run_is_permission_denied_unless_a_later_one_can(
    tmp_path: Path,
) -> None:
    """A PATH entry holding the name as a non-executable file or a directory is skipped;
    if nothing later runs, the lookup fails with EACCES (execvp's rule, and the
    reference's ``spawnPermissionDenied``) rather than ENOENT."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "notexec").write_text("")
    (first / "adir").mkdir()
    with pytest.raises(PermissionError):
        find_program("notexec", {"PATH": str(first)}, {}, "/")
    with pytest.raises(PermissionError):
        find_program("adir", {"PATH": str(first)}, {}, "/")
    (second / "notexec").write_text("#!/bin/sh\n")
    (second / "notexec").chmod(0o755)
    assert find_program("notexec", {"PATH": f"{first}:{second}"}, {}, "/") == str(
        second / "notexec"
    )


# --- over the wire, through /usr/bin/env -----------------------------------------------------


def _env_of(
    client: SyncEnvironment, env: dict[str, str], env_policy: dict[str, Any] | None
) -> dict[str, str]:
    lines = client.run(["/usr/bin/env"], env=env, env_policy=env_policy).stdout.decode()
    return dict(line.split("=", 1) for line in lines.splitlines())


@pytest.fixture(scope="module")
def env_daemon() -> Any:
    """A daemon with a known environment."""
    daemon = RunningDaemon(
        env={
            "EXEC_TEST_PLAIN": "plain",
            "EXEC_TEST_API_KEY": "secret",
            "exec_test_keyring": "secret",
            "TERM": "xterm",
            "TZ": "UTC",
            "LANG": "C.UTF-8",
        }
    )
    yield daemon
    daemon.stop()


def test_wire_without_policy_child_gets_exactly_env(env_daemon: RunningDaemon) -> None:
    """No envPolicy: /usr/bin/env prints exactly the given variables."""
    with env_daemon.connect() as client:
        assert _env_of(client, {"FOO": "bar"}, None) == {"FOO": "bar"}
        assert _env_of(client, {}, None) == {}


WIRE_POLICY = {"ignoreDefaultExcludes": False, "exclude": [], "set": {}, "includeOnly": []}


def test_wire_inherit_all_drops_secrets(env_daemon: RunningDaemon) -> None:
    """inherit all: the daemon's variables minus *KEY*/*SECRET*/*TOKEN* (case-insensitive)."""
    with env_daemon.connect() as client:
        env = _env_of(client, {"FOO": "bar"}, {**WIRE_POLICY, "inherit": "all"})
    assert env["EXEC_TEST_PLAIN"] == "plain"
    assert env["FOO"] == "bar"
    assert "EXEC_TEST_API_KEY" not in env
    assert "exec_test_keyring" not in env
    assert not [name for name in env if "TOKEN" in name.upper() or "SECRET" in name.upper()]


def test_wire_inherit_core(env_daemon: RunningDaemon) -> None:
    """inherit core keeps only the allow-list (TERM, TZ, PWD are not in it)."""
    with env_daemon.connect() as client:
        env = _env_of(client, {}, {**WIRE_POLICY, "inherit": "core"})
    assert env.get("LANG") == "C.UTF-8"
    assert "PATH" in env
    for name in ("TERM", "TZ", "PWD", "EXEC_TEST_PLAIN"):
        assert name not in env


def test_wire_full_policy(env_daemon: RunningDaemon) -> None:
    """exclude, set, includeOnly and the env overlay combine as specified."""
    wire = {
        "inherit": "all",
        "ignoreDefaultExcludes": True,
        "exclude": ["exec_test_PLAIN"],
        "set": {"EXEC_TEST_SET": "s", "OTHER": "o"},
        "includeOnly": ["EXEC_TEST_*"],
    }
    with env_daemon.connect() as client:
        env = _env_of(client, {"ZZZ": "overlay"}, wire)
    assert env == {
        "EXEC_TEST_API_KEY": "secret",
        "exec_test_keyring": "secret",
        "EXEC_TEST_SET": "s",
        "ZZZ": "overlay",
    }


def test_wire_environment_reaches_the_command_sorted_by_name(env_daemon: RunningDaemon) -> None:
    """The command sees its variables sorted by name, byte by byte, as under the reference
    (whose Rust ``Command`` keeps them in a ``BTreeMap``): the request's order, the policy's
    inherited and ``set`` variables and the overlay all end up in one sorted list."""
    with env_daemon.connect() as client:
        plain = client.run(
            ["/usr/bin/env"], env={"Z": "1", "A": "2", "_x": "3", "a": "4", "M": "5"}
        )
        policy = {**WIRE_POLICY, "inherit": "core", "set": {"B": "2", "A": "9"}}
        mixed = client.run(["/usr/bin/env"], env={"Z": "1"}, env_policy=policy)
    assert plain.stdout == b"A=2\nM=5\nZ=1\n_x=3\na=4\n"
    names = [line.split(b"=", 1)[0] for line in mixed.stdout.splitlines()]
    assert names == sorted(names) and {b"A", b"B", b"Z", b"PATH"} <= set(names)


def test_wire_bare_name_found_on_daemon_path_with_empty_env(env_daemon: RunningDaemon) -> None:
    """A bare program name resolves through the daemon's PATH when the child has none."""
    with env_daemon.connect() as client:
        result = client.run(["env"], env={})
    assert (result.exit_code, result.stdout, result.stderr) == (0, b"", b"")


def test_wire_bare_name_uses_child_path(env_daemon: RunningDaemon, tmp_path: Path) -> None:
    """A bare name resolves on the child's PATH first."""
    tool = tmp_path / "only-here"
    tool.write_text("#!/bin/sh\necho found-it\n")
    tool.chmod(0o755)
    with env_daemon.session() as client:
        _result, events = client.run("own", ["only-here"], env={"PATH": f"{tmp_path}:/bin"})
        assert output_of(events) == b"found-it\n"
        response = client.call(
            "process/start",
            {
                "processId": "none",
                "argv": ["only-here"],
                "cwd": "file:///tmp",
                "env": {"PATH": "/bin"},
                "tty": False,
            },
        )
        assert response["error"] == {
            "code": -32603,
            "message": "No such file or directory (os error 2)",
            "data": {"kind": "spawnNotFound"},
        }


def test_environment_order_is_byte_order_even_for_undecodable_names() -> None:
    """A name inherited with bytes that are not UTF-8 (a surrogate escape) sorts by its
    bytes, where code point order would differ: 0xff after U+FF21's 0xef 0xbc 0xa1."""
    undecodable = os.fsdecode(b"Z\xff")
    fullwidth = "Z\uff21"
    env = {undecodable: "1", fullwidth: "2", "A": "3", "a": "4"}
    assert [name for name, _ in sorted_environment(env)] == ["A", "Z\uff21", "Z\udcff", "a"]
    assert [name for name, _ in sorted_environment({"b": "1", "A": "2"})] == ["A", "b"]
