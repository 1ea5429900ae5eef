"""``MaterializeMemo``: a rule set is reused only while the host answers as it did.

Each change below happens between two launches of the same request; the second launch must
get exactly what a fresh ``materialize`` returns then, never the first launch's rules.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from executor.protocol.intent import parse_sandbox
from executor.sandbox.materialize import materialize
from executor.sandbox.memo import MaterializeMemo
from executor.sandbox.rules import PathKind, RuleSet
from tests.sandbox.fakehost import FakeHost
from tests.sandbox.wire import REAL_CLIENT_SANDBOX, context, glob, managed, special

WORKSPACE = "/R/workspace"
ENV = {"PATH": "/usr/bin:/bin"}


def fresh(host: FakeHost, sandbox: dict[str, Any] = REAL_CLIENT_SANDBOX) -> RuleSet | None:
    return materialize(parse_sandbox(sandbox), host, process_cwd=WORKSPACE, child_env=ENV)


def memoized(
    memo: MaterializeMemo, host: FakeHost, sandbox: dict[str, Any] = REAL_CLIENT_SANDBOX
) -> RuleSet | None:
    return memo.materialize(parse_sandbox(sandbox), host, process_cwd=WORKSPACE, child_env=ENV)


def test_the_same_request_on_an_unchanged_host_reuses_the_rules() -> None:
    host = FakeHost(dirs=[WORKSPACE])
    memo = MaterializeMemo()
    first = memoized(memo, host)
    assert first is not None and first == fresh(host)
    assert memoized(memo, host) is first


def _gitdir_inside(host: FakeHost) -> None:
    """A ``.git`` file now points into the writable workspace: that git dir must turn
    read-only (a stale plan would leave it writable)."""
    host.files.add(f"{WORKSPACE}/.git")
    host.gitdirs[f"{WORKSPACE}/.git"] = f"{WORKSPACE}/modules/x.git"
    host.dirs.add(f"{WORKSPACE}/modules")
    host.dirs.add(f"{WORKSPACE}/modules/x.git")


def _symlink_swapped_in(host: FakeHost) -> None:
    """``.codex`` is now a symlink to a directory elsewhere in the workspace."""
    host.dirs.add(f"{WORKSPACE}/elsewhere")
    host.symlinks[f"{WORKSPACE}/.codex"] = f"{WORKSPACE}/elsewhere"


def _parent_renamed(host: FakeHost) -> None:
    """The workspace's parent was renamed and a symlink left in its place."""
    host.dirs -= {"/R", WORKSPACE}
    host.dirs |= {"/moved", "/moved/workspace"}
    host.symlinks["/R"] = "/moved"


def _protected_name_created(host: FakeHost) -> None:
    """``.agents`` now exists as a directory (no longer a missing name to protect)."""
    host.dirs.add(f"{WORKSPACE}/.agents")


def _tmp_gone(host: FakeHost) -> None:
    """``/tmp`` is no longer a directory (``:slash_tmp`` then grants nothing)."""
    host.dirs.discard("/tmp")


@pytest.mark.parametrize(
    "change",
    [_gitdir_inside, _symlink_swapped_in, _parent_renamed, _protected_name_created, _tmp_gone],
)
def test_a_host_that_changed_between_launches_gets_fresh_rules(
    change: Callable[[FakeHost], None],
) -> None:
    host = FakeHost(dirs=[WORKSPACE])
    memo = MaterializeMemo()
    before = memoized(memo, host)
    change(host)
    expected = fresh(host)
    assert expected != before, "the change must matter to materialization"
    assert memoized(memo, host) == expected
    assert memoized(memo, host) == expected  # and that is what is kept now


def test_a_gitdir_pointed_into_the_workspace_is_read_only_on_the_next_launch() -> None:
    """The escalation a stale plan would be: the git dir named by a new ``.git`` file would
    stay writable inside the writable workspace."""
    host = FakeHost(dirs=[WORKSPACE])
    memo = MaterializeMemo()
    assert memoized(memo, host) is not None
    _gitdir_inside(host)
    rules = memoized(memo, host)
    assert rules is not None
    assert rules.access_of(f"{WORKSPACE}/modules/x.git").value == "read"
    assert rules.access_of(f"{WORKSPACE}/src").value == "write"


def test_other_inputs_are_keys_not_reuses() -> None:
    """Another cwd or environment (``TMPDIR`` is ``:tmpdir``) is another materialization."""
    host = FakeHost(dirs=[WORKSPACE, "/scratch"])
    memo = MaterializeMemo()
    intent = parse_sandbox(REAL_CLIENT_SANDBOX)
    plain = memo.materialize(intent, host, process_cwd=WORKSPACE, child_env=ENV)
    with_tmpdir = {**ENV, "TMPDIR": "/scratch"}
    other = memo.materialize(intent, host, process_cwd=WORKSPACE, child_env=with_tmpdir)
    assert other == materialize(intent, host, process_cwd=WORKSPACE, child_env=with_tmpdir)
    assert other != plain


def test_deny_glob_scans_are_not_reused() -> None:
    """A scan runs under a clock deadline: every launch scans afresh."""
    host = FakeHost(dirs=[WORKSPACE], files=[f"{WORKSPACE}/a.pem"])
    sandbox = context(
        managed(special("root", "read"), special("project_roots", "write"), glob("**/*.pem")),
        cwd=WORKSPACE,
        roots=(WORKSPACE,),
    )
    memo = MaterializeMemo()
    first = memoized(memo, host, sandbox)
    host.files.add(f"{WORKSPACE}/b.pem")
    second = memoized(memo, host, sandbox)
    assert second == fresh(host, sandbox) != first
    assert second is not None and second.access_of(f"{WORKSPACE}/b.pem").value == "deny"


class _FlickeringHost(FakeHost):
    """A host that changes while it is asked and back: ``.codex`` is a directory for just
    the second time its kind is asked (materialization asks twice), missing before and
    after, as when something creates it and removes it again meanwhile."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.asked_codex = 0

    def kind(self, path: str) -> PathKind:
        if path == f"{WORKSPACE}/.codex":
            self.asked_codex += 1
            if self.asked_codex == 2:
                return PathKind.DIRECTORY
        return super().kind(path)


def test_rules_from_a_host_that_changed_while_asked_are_not_reused() -> None:
    """Two answers to one question mean the rules match neither moment: even when the host
    answers as it did first, the next launch materializes afresh."""
    host = _FlickeringHost(dirs=[WORKSPACE])
    memo = MaterializeMemo()
    during = memoized(memo, host)
    assert host.asked_codex == 2
    after = memoized(memo, host)
    assert after is not during
    assert after == fresh(host)


def test_an_equal_intent_that_is_another_object_finds_the_same_rules() -> None:
    """Keys compare intents by value: a sandbox parsed afresh (not the object the parser
    remembered) finds the rules of its equal; an intent that differs does not."""
    host = FakeHost(dirs=[WORKSPACE, "/elsewhere"])
    memo = MaterializeMemo()
    intent = parse_sandbox(REAL_CLIENT_SANDBOX)
    twin = copy.deepcopy(intent)
    assert twin == intent and twin is not intent
    first = memo.materialize(intent, host, process_cwd=WORKSPACE, child_env=ENV)
    assert memo.materialize(twin, host, process_cwd=WORKSPACE, child_env=ENV) is first
    other = replace(intent, workspace_roots=("/elsewhere",))
    rules = memo.materialize(other, host, process_cwd=WORKSPACE, child_env=ENV)
    assert rules == materialize(other, host, process_cwd=WORKSPACE, child_env=ENV) != first
