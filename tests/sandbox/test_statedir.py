"""The state directory is created private, and one the daemon cannot trust is refused.

Attacker-style: another user (``nobody``) or a group/world-writable directory got there
first, a symlink sits in its place, or the attacker wins the race between ``mkdir`` and
the check. Every refusal is one line naming the path, what is wrong and what to do.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from executor.errors import ConfigError
from executor.sandbox.statedir import ensure_state_directory, state_directory, state_path

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def nobody() -> int:
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no user `nobody` on this host")


def refusal(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        ensure_state_directory(str(path))
    message = caught.value.message
    assert "\n" not in message
    assert message.startswith(f"unsafe state directory {path}: ")
    return message


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_a_missing_directory_is_created_private(tmp_path: Path) -> None:
    target = tmp_path / "parent" / "state"
    assert ensure_state_directory(str(target)) == str(target)
    assert target.is_dir()
    assert mode(target) == 0o700


def test_an_existing_private_directory_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.mkdir(mode=0o700)
    (target / "kept").write_text("x")
    assert ensure_state_directory(str(target)) == str(target)
    assert (target / "kept").read_text() == "x"


def test_one_of_ours_others_may_only_read_is_narrowed(tmp_path: Path) -> None:
    """Older releases made it 0755 (an intermediate of ``makedirs``): kept, made 0700."""
    target = tmp_path / "state"
    target.mkdir()
    target.chmod(0o755)
    ensure_state_directory(str(target))
    assert mode(target) == 0o700


@pytest.mark.parametrize("bits", [0o777, 0o770, 0o702])
def test_a_directory_others_may_write_is_refused(tmp_path: Path, bits: int) -> None:
    """Pre-created 0777 (or group-writable): someone else may already have put things in it."""
    target = tmp_path / "state"
    target.mkdir()
    target.chmod(bits)
    message = refusal(target)
    assert f"writable by other users (mode {bits:04o})" in message
    assert "chmod 700" in message
    assert mode(target) == bits  # refused, not silently "fixed"


@ROOT_ONLY
def test_a_directory_another_user_created_is_refused(tmp_path: Path) -> None:
    """Squatting: ``nobody`` made it first, even with the right mode."""
    target = tmp_path / "state"
    target.mkdir(mode=0o700)
    os.chown(target, nobody(), -1)
    message = refusal(target)
    assert "owned by nobody" in message
    assert "remove it" in message


def test_a_symlink_in_its_place_is_refused_even_to_a_directory_of_ours(tmp_path: Path) -> None:
    """A planted link to one of our private directories would pass every other check."""
    ours = tmp_path / "ours"
    ours.mkdir(mode=0o700)
    link = tmp_path / "state"
    link.symlink_to(ours)
    message = refusal(link)
    assert "is a symlink" in message
    assert not (ours / "staging").exists()


def test_a_dangling_symlink_is_refused_not_followed(tmp_path: Path) -> None:
    """``mkdir`` must not create the link's target (somewhere the attacker chose)."""
    link = tmp_path / "state"
    link.symlink_to(tmp_path / "elsewhere")
    assert "is a symlink" in refusal(link)
    assert not (tmp_path / "elsewhere").exists()


def test_a_file_is_refused_in_one_line(tmp_path: Path) -> None:
    target = tmp_path / "state"
    target.write_text("not a directory")
    assert "it is not a directory" in refusal(target)


def test_a_path_below_a_file_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError) as caught:
        ensure_state_directory(str(tmp_path / "file" / "state"))
    assert "\n" not in caught.value.message
    assert f"cannot create the state directory {tmp_path}/file/state: " in caught.value.message


def test_a_parent_others_may_rename_in_is_refused(tmp_path: Path) -> None:
    """Whoever may rename entries of the parent could swap the directory after the check."""
    parent = tmp_path / "shared"
    parent.mkdir()
    parent.chmod(0o777)
    message = refusal(parent / "state")
    assert f"its parent {parent} is writable by other users and not sticky" in message
    assert not (parent / "state").exists()


def test_a_sticky_shared_parent_is_fine(tmp_path: Path) -> None:
    """/tmp: world-writable, but only an entry's owner may rename or remove it."""
    parent = tmp_path / "tmp"
    parent.mkdir()
    parent.chmod(0o1777)
    assert ensure_state_directory(str(parent / "state")) == str(parent / "state")


@ROOT_ONLY
def test_a_parent_another_user_owns_is_refused(tmp_path: Path) -> None:
    parent = tmp_path / "theirs"
    parent.mkdir(mode=0o755)
    os.chown(parent, nobody(), -1)
    assert "belongs to nobody" in refusal(parent / "state")


def _racing_mkdir(attack: Callable[[str], None]) -> Callable[..., None]:
    """``os.mkdir`` that loses the race: the attacker's entry appears first."""

    def mkdir(path: str, mode: int = 0o777) -> None:
        attack(path)
        raise FileExistsError(path)

    return mkdir


def test_a_symlink_planted_between_mkdir_and_the_check_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = tmp_path / "ours"
    ours.mkdir(mode=0o700)
    monkeypatch.setattr(os, "mkdir", _racing_mkdir(lambda p: os.symlink(ours, p)))
    assert "is a symlink" in refusal(tmp_path / "state")


@ROOT_ONLY
def test_a_directory_planted_between_mkdir_and_the_check_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def plant(path: str) -> None:
        real_mkdir(path, 0o700)
        os.chown(path, nobody(), -1)

    real_mkdir = os.mkdir
    monkeypatch.setattr(os, "mkdir", _racing_mkdir(plant))
    assert "owned by nobody" in refusal(tmp_path / "state")


def test_the_path_keeps_its_last_component_and_resolves_its_parents(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert state_path(str(tmp_path / "link" / "state")) == str(tmp_path / "real" / "state")
    assert state_path(str(tmp_path / "link")) == str(tmp_path / "link")


def test_the_default_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EXECUTOR_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    assert state_directory() == f"/run/user/1000/executor-{os.getuid()}"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert state_directory() == f"/tmp/executor-{os.getuid()}"
