"""Profiles for policy authors (sandbox_profiles/*.toml): shipped ones load, bad ones are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.errors import ProfileError
from executor.protocol.intent import Access, NetworkMode, ProfileType, parse_permissions
from executor.sandbox.materialize import materialize
from executor.sandbox.profiles import (
    InvalidProfile,
    ProfileLibrary,
    default_library,
    load_file,
    shipped_directory,
)
from tests.sandbox.fakehost import FakeHost

SHIPPED = ["danger-full-access", "read-only", "workspace", "workspace-network", "workspace-proxy"]


def test_the_shipped_profiles_are_there() -> None:
    """The five documented profiles ship with the executor."""
    assert default_library().names() == SHIPPED


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_loads_and_round_trips(name: str) -> None:
    """Each compiles to a wire profile that the request parser reads back identically."""
    profile = default_library().get(name)
    assert profile.description
    assert parse_permissions(profile.wire) == profile.permissions


def test_workspace_matches_the_reference_workspace_write() -> None:
    """`workspace` = root read, workspace write, /tmp and $TMPDIR write, network off."""
    profile = default_library().get("workspace")
    assert profile.permissions.network is NetworkMode.RESTRICTED
    host = FakeHost(dirs=["/ws/.git", "/t"])
    rules = materialize(
        profile.intent(workspace_roots=("/ws",)),
        host,
        process_cwd="/ws",
        child_env={"TMPDIR": "/t"},
    )
    assert rules is not None
    assert rules.access_of("/ws/a") is Access.WRITE
    assert rules.access_of("/ws/.git/config") is Access.READ
    assert rules.access_of("/tmp/a") is Access.WRITE and rules.access_of("/t/a") is Access.WRITE
    assert rules.access_of("/etc/passwd") is Access.READ


def test_network_and_disabled_profiles() -> None:
    """`workspace-network` enables the network; `danger-full-access` disables the sandbox."""
    library = default_library()
    assert library.get("workspace-network").permissions.network is NetworkMode.ENABLED
    assert library.get("danger-full-access").permissions.type is ProfileType.DISABLED


def write(directory: Path, name: str, text: str) -> Path:
    """Write a profile file."""
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


BAD = [
    ("unknown-key", 'colour = "red"', "colour: unknown key"),
    (
        "bad-access",
        '[filesystem]\n":root" = "all"',
        'filesystem.":root": access must be one of read, write, deny',
    ),
    (
        "write-glob",
        '[filesystem]\n"/srv/**" = "write"',
        'filesystem."/srv/**": globs only support deny access',
    ),
    (
        "relative-path",
        '[filesystem]\n"srv" = "read"',
        "must be absolute, use ~/..., or start with :",
    ),
    ("unknown-special", '[filesystem]\n":everything" = "read"', "unknown special path"),
    (
        "dotdot-in-workspace",
        '[filesystem.":workspace_roots"]\n"../up" = "write"',
        "must be relative and must not contain ..",
    ),
    ("network-key", "[network]\ncolour = 1", "network.colour: unknown key"),
    (
        "network-mode",
        '[network]\nenabled = true\nmode = "socks"',
        'network.mode: must be "full" or "proxy", got "socks"',
    ),
    ("network-value", '[network]\nenabled = "yes"', "network.enabled: must be true or false"),
    ("zero-depth", "glob_scan_max_depth = 0", "glob_scan_max_depth: must be a positive integer"),
    ("bad-type", 'type = "sometimes"', "type: must be one of managed, disabled, external"),
    ("bad-toml", "[filesystem", "invalid TOML"),
    ("unknown-parent", 'extends = "nope"', "extends: unknown profile 'nope'"),
]


@pytest.mark.parametrize(("text", "message"), [(b[1], b[2]) for b in BAD], ids=[b[0] for b in BAD])
def test_invalid_profiles_name_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    """Strict validation: the error names the file and the key path."""
    path = write(tmp_path, "bad", text)
    with pytest.raises(ProfileError) as caught:
        ProfileLibrary([tmp_path]).compile(load_file(path))
    assert str(path) in caught.value.message
    assert message in caught.value.message


def test_extends_cycles_are_reported(tmp_path: Path) -> None:
    """a extends b extends a is an error that shows the cycle."""
    write(tmp_path, "a", 'extends = "b"')
    write(tmp_path, "b", 'extends = "a"')
    with pytest.raises(ProfileError, match="cycle: a -> b -> a"):
        ProfileLibrary([tmp_path]).get("a")


def test_extends_merges_tables(tmp_path: Path) -> None:
    """A child overrides and adds keys of its parent's tables."""
    write(
        tmp_path,
        "base",
        '[filesystem]\n":root" = "read"\n"/srv" = "write"\n[network]\nenabled = true',
    )
    write(tmp_path, "child", 'extends = "base"\n[filesystem]\n"/srv" = "read"\n"~/.ssh" = "deny"')
    profile = ProfileLibrary([tmp_path]).get("child")
    assert profile.permissions.network is NetworkMode.ENABLED
    entries = {str(e.target): e.access for e in profile.permissions.file_system.entries}  # type: ignore[union-attr]
    assert Access.READ in entries.values() and Access.DENY in entries.values()
    assert Access.WRITE not in entries.values()


def test_a_user_file_named_like_a_shipped_profile_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stray read-only.toml that disables the sandbox does not become `read-only`: the
    name is refused, naming both files, and so is every profile extending it."""
    stray = write(tmp_path, "read-only", 'description = "oops"\ntype = "disabled"')
    write(tmp_path, "child", 'extends = "read-only"')
    monkeypatch.setenv("EXECUTOR_PROFILES_DIR", str(tmp_path))
    library = default_library()
    shipped = shipped_directory() / "read-only.toml"
    with pytest.raises(ProfileError) as caught:
        library.get("read-only")
    assert str(stray) in caught.value.message and str(shipped) in caught.value.message
    assert "replaces_shipped = true" in caught.value.message
    for name in ("child", "workspace"):  # the shipped `workspace` extends `read-only` too
        with pytest.raises(ProfileError, match="shipped profile 'read-only'"):
            library.get(name)
    assert library.get("danger-full-access").shipped  # the others are untouched


def test_replaces_shipped_true_replaces_a_shipped_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `replaces_shipped = true` the user's file is the profile, and says so."""
    write(
        tmp_path,
        "read-only",
        'description = "site policy"\nreplaces_shipped = true\n[filesystem]\n":root" = "read"',
    )
    monkeypatch.setenv("EXECUTOR_PROFILES_DIR", str(tmp_path))
    library = default_library()
    profile = library.get("read-only")
    assert profile.description == "site policy"
    assert profile.replaces_shipped and not profile.shipped
    assert not library.is_shipped("read-only") and library.is_shipped("workspace")
    # `workspace` extends the replacement, as it would extend any `read-only`.
    assert library.get("workspace").limits == profile.limits
    assert shipped_directory().joinpath("read-only.toml").is_file()


def test_replaces_shipped_must_be_a_boolean_and_is_not_needed_elsewhere(tmp_path: Path) -> None:
    """A string is an error; a user file that shadows no shipped name needs nothing, and a
    later user directory still overrides an earlier one."""
    bad = write(tmp_path, "mine", 'replaces_shipped = "yes"')
    with pytest.raises(ProfileError, match="replaces_shipped: must be true or false"):
        ProfileLibrary([tmp_path]).get("mine")
    bad.unlink()
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    write(first, "site", 'description = "first"')
    write(second, "site", 'description = "second"')
    assert ProfileLibrary([shipped_directory(), first, second]).get("site").description == (
        "second"
    )


def test_every_problem_in_a_file_is_reported(tmp_path: Path) -> None:
    """Not only the first: each bad key is one problem, naming the file and the key."""
    path = write(
        tmp_path,
        "many",
        'colour = "red"\nglob_scan_max_depth = 0\n'
        '[filesystem]\n":root" = "all"\n"srv" = "read"\n"/srv/**" = "write"\n'
        '[network]\nenabled = "yes"\n[limits]\nmemory = "lots"\nthreads = 4\n',
    )
    profile, problems = ProfileLibrary([shipped_directory()]).check(path)
    assert profile is None
    assert [(problem.source, problem.key) for problem in problems] == [
        (str(path), key)
        for key in (
            "colour",
            "limits.memory",
            "limits.threads",
            "network.enabled",
            'filesystem.":root"',
            'filesystem."srv"',
            'filesystem."/srv/**"',
            "glob_scan_max_depth",
        )
    ]
    with pytest.raises(InvalidProfile) as caught:
        ProfileLibrary([tmp_path]).get("many")
    assert len(caught.value.problems) == len(problems)
    assert len(caught.value.message.splitlines()) == len(problems)


def test_a_broken_parent_is_named_once(tmp_path: Path) -> None:
    """A child of a broken profile lists the parent's problems under the parent's file."""
    parent = write(tmp_path, "base", "[limits]\nmemory = 0\n")
    child = write(tmp_path, "child", 'extends = "base"\n[network]\nenabled = true\n')
    _, problems = ProfileLibrary([tmp_path]).check(child)
    assert [str(problem) for problem in problems] == [
        f"{parent}: limits.memory: must be positive, got 0",
        f"{child}: extends: profile 'base' is invalid",
    ]


def test_load_all_lists_the_good_and_names_the_broken(tmp_path: Path) -> None:
    """One broken file does not hide the others."""
    write(tmp_path, "broken", "[filesystem")
    write(tmp_path, "fine", 'extends = "workspace"')
    profiles, errors = ProfileLibrary([shipped_directory(), tmp_path]).load_all()
    assert [profile.name for profile in profiles] == sorted([*SHIPPED, "fine"])
    assert list(errors) == ["broken"]
    assert "invalid TOML" in errors["broken"].message


def test_protected_names_accumulate_through_extends(tmp_path: Path) -> None:
    """A profile extending `workspace` adds names; it cannot drop the parent's."""
    (tmp_path / "mine.toml").write_text(
        'extends = "workspace"\nprotected_names = ["secrets.toml"]\n', encoding="utf-8"
    )
    library = ProfileLibrary([shipped_directory(), tmp_path])
    fs = library.get("mine").permissions.file_system
    assert fs is not None
    assert "secrets.toml" in fs.protected_names
    assert {".vscode", ".mcp.json", ".bashrc"} <= set(fs.protected_names)
    (tmp_path / "bad.toml").write_text('protected_names = ["a/b"]\n', encoding="utf-8")
    with pytest.raises(ProfileError, match="protected_names"):
        ProfileLibrary([tmp_path]).get("bad")
