"""Profiles for policy authors (sandbox_profiles/*.toml): shipped ones load, bad ones are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from executor.errors import ProfileError
from executor.protocol.intent import Access, NetworkMode, ProfileType, parse_permissions
from executor.sandbox.materialize import materialize
from executor.sandbox.profiles import ProfileLibrary, default_library, load_file, shipped_directory
from tests.sandbox.fakehost import FakeHost

SHIPPED = ["danger-full-access", "read-only", "workspace", "workspace-network"]


def test_the_shipped_profiles_are_there() -> None:
    """The four documented profiles ship with the executor."""
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
    ("network-key", "[network]\nmode = 1", "network.mode: unknown key"),
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


def test_extra_directories_override_shipped_profiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EXECUTOR_PROFILES_DIR adds profiles and may replace shipped ones."""
    write(tmp_path, "read-only", 'description = "site policy"\n[filesystem]\n":root" = "read"')
    monkeypatch.setenv("EXECUTOR_PROFILES_DIR", str(tmp_path))
    assert default_library().get("read-only").description == "site policy"
    assert shipped_directory().joinpath("read-only.toml").is_file()


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
