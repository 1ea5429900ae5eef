"""The resolver and the sandbox view, in-process: classification, both strategies, races."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from executor.fs import files
from executor.fs.resolve import MAX_SYMLINK_HOPS, Resolver
from executor.fs.syscalls import openat2_supported
from executor.fs.view import SandboxView, Visibility
from executor.protocol.intent import Access
from executor.sandbox.rules import PathRule, RuleSet
from tests.fs.race import Swapper

#: openat2 (RESOLVE_BENEATH) is the kernel's half of the confinement: on CI its variant must
#: run, so it carries the `enforcement` mark (a skip fails there).
STRATEGIES = pytest.mark.parametrize(
    "openat2",
    [
        pytest.param(True, marks=pytest.mark.enforcement, id="openat2"),
        pytest.param(False, id="component-walk"),
    ],
)


def _rules(*rules: tuple[str, Access], globs: tuple[str, ...] = ()) -> RuleSet:
    return RuleSet(
        filesystem_restricted=True,
        rules=tuple(PathRule(path, access) for path, access in rules),
        deny_globs=globs,
    )


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/", Visibility.SKELETON),
        ("/w", Visibility.SKELETON),
        ("/w/ws", Visibility.WRITABLE),
        ("/w/ws/a/b", Visibility.WRITABLE),
        ("/w/ws/.git", Visibility.READABLE),
        ("/w/ws/.git/allowed/x", Visibility.WRITABLE),
        ("/w/ws/private/x", Visibility.DENIED),
        ("/w/ws/s.env", Visibility.DENIED),
        ("/w/ws/sub/later.env", Visibility.DENIED),
        ("/w/ws/sub/later.env/inside", Visibility.DENIED),
        ("/w/other", Visibility.INVISIBLE),
        ("/usr/bin/sh", Visibility.READABLE),
        ("/usr", Visibility.SKELETON),
        ("/etc", Visibility.INVISIBLE),
        ("/alias", Visibility.SKELETON),
        ("/alias/x", Visibility.INVISIBLE),
    ],
    ids=lambda value: str(value),
)
def test_visibility(path: str, expected: Visibility) -> None:
    """Deepest rule wins, globs deny at access time, ancestors and aliases are skeleton."""
    rules = _rules(
        ("/w/ws", Access.WRITE),
        ("/w/ws/.git", Access.READ),
        ("/w/ws/.git/allowed", Access.WRITE),
        ("/w/ws/private", Access.DENY),
        ("/usr/bin", Access.READ),
        globs=("/w/ws/**/*.env",),
    )
    assert SandboxView(rules, frozenset({"/alias"})).visibility(path) is expected


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """ws/{d/f, link -> d, abs -> /…/outside, up -> .., chain0..3 -> next}, outside/secret."""
    root = tmp_path.resolve()
    (root / "ws" / "d").mkdir(parents=True)
    (root / "ws" / "d" / "f").write_bytes(b"f")
    (root / "ws" / "link").symlink_to("d")
    (root / "ws" / "abs").symlink_to(root / "outside")
    (root / "ws" / "up").symlink_to("..")
    (root / "outside").mkdir()
    (root / "outside" / "secret").write_bytes(b"s")
    for index in range(3):
        (root / "ws" / f"chain{index}").symlink_to(f"chain{index + 1}")
    (root / "ws" / "chain3").symlink_to("d")
    return root


@pytest.fixture
def resolver_factory(tree: Path) -> Iterator[type[Resolver]]:
    """Resolvers are closed after the test."""
    made: list[Resolver] = []

    class Factory(Resolver):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    yield Factory
    for resolver in made:
        resolver.close()


def _skip_without_openat2(openat2: bool) -> None:
    if openat2 and not openat2_supported():
        pytest.skip("openat2 is not available on this host")


@STRATEGIES
@pytest.mark.parametrize(
    ("name", "real"),
    [
        ("ws/d/f", "ws/d/f"),
        ("ws/link/f", "ws/d/f"),
        ("ws/chain0/f", "ws/d/f"),
        ("ws/up/outside/secret", "outside/secret"),
        ("ws/abs/secret", "outside/secret"),
        ("ws/link", "ws/d"),
    ],
    ids=["plain", "symlink", "chain", "dotdot-link", "absolute-link", "final-link"],
)
def test_locate_finds_real_paths(
    resolver_factory: type[Resolver], tree: Path, openat2: bool, name: str, real: str
) -> None:
    """Both strategies reach the same real path, the view open to everything readable."""
    _skip_without_openat2(openat2)
    view = SandboxView(_rules(("/", Access.READ)))
    for resolver in (
        resolver_factory(use_openat2=openat2),
        resolver_factory(view, use_openat2=openat2),
    ):
        with resolver.locate(str(tree / name)) as location:
            assert location.path == str(tree / real)
            assert (
                os.stat(location.name, dir_fd=location.dir_fd).st_ino == os.stat(tree / real).st_ino
            )


@STRATEGIES
def test_symlink_hops_are_bounded(
    resolver_factory: type[Resolver], tmp_path: Path, openat2: bool
) -> None:
    """More than 40 links in a row is ELOOP, like the kernel."""
    _skip_without_openat2(openat2)
    root = tmp_path.resolve()
    (root / "target").mkdir()
    (root / f"l{MAX_SYMLINK_HOPS + 1}").symlink_to("target")
    for index in range(MAX_SYMLINK_HOPS + 1):
        (root / f"l{index}").symlink_to(f"l{index + 1}")
    resolver = resolver_factory(SandboxView(_rules(("/", Access.READ))), use_openat2=openat2)
    with pytest.raises(OSError, match="symbolic links") as caught:
        resolver.locate(str(root / "l0" / "x"))
    assert caught.value.errno == errno.ELOOP
    with resolver.locate(str(root / "l2" / "x")) as location:  # exactly 40 links
        assert location.path == str(root / "target" / "x")


@STRATEGIES
def test_sandboxed_walk_classifies_every_directory(
    resolver_factory: type[Resolver], tree: Path, openat2: bool
) -> None:
    """A symlink leading into a denied or invisible place fails there, not later."""
    _skip_without_openat2(openat2)
    rules = _rules((str(tree / "ws"), Access.WRITE), (str(tree / "outside"), Access.DENY))
    resolver = resolver_factory(SandboxView(rules), use_openat2=openat2)
    with pytest.raises(PermissionError) as denied:
        resolver.locate(str(tree / "ws" / "abs" / "secret"))
    assert denied.value.errno == errno.EACCES
    with pytest.raises(FileNotFoundError) as hidden:
        resolver.locate(str(tree.parent / "elsewhere" / "x"))
    assert hidden.value.errno == errno.ENOENT


@STRATEGIES
def test_nofollow_walk_refuses_symlinked_directories(
    resolver_factory: type[Resolver], tree: Path, openat2: bool
) -> None:
    """``followSymlinks: false``: a symlinked directory on the way is ENOTDIR."""
    _skip_without_openat2(openat2)
    resolver = resolver_factory(use_openat2=openat2)
    with pytest.raises(NotADirectoryError) as caught:
        resolver.locate(str(tree / "ws" / "link" / "f"), follow_parents=False, follow_final=False)
    assert caught.value.errno == errno.ENOTDIR


@STRATEGIES
def test_race_in_process(tmp_path: Path, openat2: bool) -> None:
    """Thousands of sandboxed writes against a swapping attacker never land outside."""
    _skip_without_openat2(openat2)
    root = tmp_path.resolve()
    workspace, outside = root / "ws", root / "outside"
    workspace.mkdir()
    outside.mkdir()
    (outside / "victim").write_bytes(b"original")
    view = SandboxView(_rules(("/", Access.READ), (str(workspace), Access.WRITE)))
    landed, refused = 0, set()
    with Swapper(workspace, outside):
        for _ in range(1500):
            for target in (workspace / "sw" / "victim", workspace / "fsw"):
                with Resolver(view, use_openat2=openat2) as resolver:
                    try:
                        files.write_file(resolver, str(target), b"pwned", follow=True)
                        landed += 1
                    except OSError as exc:
                        refused.add(exc.errno)
    assert refused <= {errno.EROFS, errno.ELOOP, errno.ENOTDIR, errno.ENOENT}
    assert (outside / "victim").read_bytes() == b"original"
    assert os.listdir(outside) == ["victim"]
    assert landed > 0


@pytest.mark.enforcement
def test_the_fast_path_never_opens_outside_its_anchor(tmp_path: Path) -> None:
    """The kernel-side fast path is confined to the allowed root it starts from
    (``RESOLVE_BENEATH``), whatever it is handed: a lookup that would leave that root — by
    ``..``, which normalization otherwise keeps away from it, or through a component renamed
    out of it mid-lookup — is not finished there (the slow path decides), never outside."""
    _skip_without_openat2(True)
    root = tmp_path.resolve()
    workspace, outside = root / "ws", root / "outside"
    (workspace / "sub").mkdir(parents=True)
    outside.mkdir()
    view = SandboxView(_rules(("/", Access.READ), (str(workspace), Access.WRITE)))
    with Resolver(view, use_openat2=True) as resolver:
        inside = resolver._open_exact(str(workspace / "sub"))
        assert inside is not None
        assert os.path.samestat(os.fstat(inside), os.stat(workspace / "sub"))
        os.close(inside)
        # Lexically inside the workspace (its anchor), but the lookup would leave the anchor
        # and come back: the kernel refuses that walk (EXDEV), the fast path answers None.
        climbing = resolver._open_exact(f"{workspace}/sub/../../outside/../ws/sub")
        assert climbing is None
