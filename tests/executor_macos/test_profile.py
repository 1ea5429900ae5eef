"""What rendered profiles mean: checked against the rule set through the SBPL model.

``seatbelt_model`` evaluates a profile the way SBPL is documented to work (last matching rule
decides); these tests check that, read that way, each profile grants exactly what the rule set
grants, covers both spellings of ``/tmp``-like paths, and refuses paths it cannot carry.
"""

from __future__ import annotations

import re

import pytest
from executor_macos.profile import SeatbeltProfile, render_profile

from executor.errors import SandboxUnavailable
from executor.protocol.intent import Access, NetworkMode
from executor.sandbox.rules import PathKind, PathRule, RuleOrigin, RuleSet
from tests.executor_macos.fakehost import FakeMacHost
from tests.executor_macos.seatbelt_model import Model
from tests.executor_macos.sexpr import parse
from tests.executor_macos.test_golden import rendered

READ, WRITE = "file-read-data", "file-write-data"

# (case, operation, path, allowed)
GOLDEN_MEANING = [
    ("read-only", READ, "/Users/dev/ws/src/main.py", True),
    ("read-only", WRITE, "/Users/dev/ws/src/main.py", False),
    ("read-only", WRITE, "/tmp/x", False),
    ("read-only", READ, "/private/tmp/executor-501/socket", False),
    ("read-only", READ, "/tmp/executor-501/socket", False),
    ("workspace", WRITE, "/Users/dev/ws/new.txt", True),
    ("workspace", WRITE, "/Users/dev/ws/.gitignore", True),
    ("workspace", READ, "/Users/dev/ws/.git/config", True),
    ("workspace", WRITE, "/Users/dev/ws/.git/config", False),
    ("workspace", WRITE, "/Users/dev/ws/.git", False),
    ("workspace", WRITE, "/Users/dev/ws/.codex", False),
    ("workspace", WRITE, "/Users/dev/ws/.codex/config.toml", False),
    ("workspace", WRITE, "/Users/dev/ws/.agents", False),
    ("workspace", WRITE, "/Users/dev/ws/.aws/credentials", False),
    ("workspace", WRITE, "/Users/dev/elsewhere.txt", False),
    ("workspace", WRITE, "/tmp/scratch", True),
    ("workspace", WRITE, "/private/tmp/scratch", True),
    ("workspace", WRITE, "/tmp/.git/hooks/pre-commit", False),
    ("workspace", WRITE, "/private/tmp/.codex", False),
    ("workspace", WRITE, "/var/folders/zz/xy12/T/tmp.123", True),
    ("workspace", WRITE, "/private/var/folders/zz/xy12/T/tmp.123", True),
    ("workspace", WRITE, "/var/folders/zz/xy12/T/.git", False),
    ("workspace", READ, "/tmp/executor-501/socket", False),
    ("workspace", WRITE, "/private/tmp/executor-501/socket", False),
    ("workspace", READ, "/etc/hosts", True),
    ("workspace-network", WRITE, "/Users/dev/ws/.git/HEAD", False),
    ("minimal", READ, "/usr/bin/env", True),
    ("minimal", READ, "/etc/passwd", True),
    ("minimal", READ, "/private/etc/passwd", True),
    ("minimal", READ, "/Users/dev/notes.txt", False),
    ("minimal", READ, "/Users/dev/ws/src/main.py", True),
    ("minimal", WRITE, "/Users/dev/ws/out.o", True),
    ("minimal", WRITE, "/Users/dev/ws/.codex", False),
    ("minimal", READ, "/usr/lib/libSystem.B.dylib", True),
    ("minimal", READ, "/private/var/db/timezone/zoneinfo/UTC", True),
    ("minimal", WRITE, "/tmp/x", False),
    ("deny-globs", READ, "/Users/dev/ws/.env", False),
    ("deny-globs", WRITE, "/Users/dev/ws/.env", False),
    ("deny-globs", READ, "/Users/dev/ws/src/app.env", False),
    ("deny-globs", WRITE, "/Users/dev/ws/new/created-later.env", False),
    ("deny-globs", READ, "/Users/dev/ws/src/app.env.example", True),
    ("deny-globs", READ, "/Users/dev/ws/src/main.py", True),
    ("deny-globs", READ, "/tmp/a.env", False),
    ("deny-globs", READ, "/private/tmp/a.env", False),
    ("deny-globs", READ, "/private/tmp/scratch.env", False),
    ("deny-globs", READ, "/tmp/sub/a.env", True),
    ("deny-globs", READ, "/Users/dev/ws/private/key.pem", False),
    ("deny-globs", WRITE, "/Users/dev/ws/private/new", False),
    ("deny-globs", READ, "/Users/dev/ws/private/public/readme", True),
    ("deny-globs", WRITE, "/Users/dev/ws/private/public/readme", False),
    ("deny-globs", READ, "/Users/dev/ws/secrets/1a.key", False),
    ("deny-globs", READ, "/Users/dev/ws/secrets/ab.key", True),
    ("network-only", WRITE, "/Users/dev/anything", True),
    ("network-only", READ, "/etc/master.passwd", True),
    ("codex-0.169-payload", WRITE, "/R/workspace/inside.txt", True),
    ("codex-0.169-payload", WRITE, "/R/outside/x.txt", False),
    ("codex-0.169-payload", WRITE, "/R/workspace/.git/index.lock", False),
    ("codex-0.169-payload", WRITE, "/R/workspace/.codex", False),
    ("codex-0.169-payload", WRITE, "/tmp/out", True),
]


def model(profile: SeatbeltProfile, *, deny_wins: bool = False) -> Model:
    """The SBPL model of ``profile``."""
    return Model(profile.text, dict(profile.params), deny_wins=deny_wins)


@pytest.mark.parametrize("deny_wins", [False, True], ids=["last-match-wins", "deny-wins"])
@pytest.mark.parametrize(
    ("case", "operation", "path", "allowed"),
    GOLDEN_MEANING,
    ids=[f"{case}-{op.split('-')[1]}-{path}" for case, op, path, _ in GOLDEN_MEANING],
)
def test_golden_profile_meaning(
    case: str, operation: str, path: str, allowed: bool, deny_wins: bool
) -> None:
    """Each golden profile allows exactly what its intent says, under both spellings."""
    assert model(rendered(case), deny_wins=deny_wins).allows(operation, path) is allowed


def rule_set(
    *rules: PathRule, globs: tuple[str, ...] = (), network: NetworkMode = NetworkMode.RESTRICTED
) -> RuleSet:
    """A restricted rule set."""
    return RuleSet(filesystem_restricted=True, rules=rules, deny_globs=globs, network=network)


def test_nested_reopening_follows_the_deepest_rule() -> None:
    """write > read > deny > read > write nesting: each level gets its own access."""
    rules = rule_set(
        PathRule("/", Access.READ),
        PathRule("/w", Access.WRITE),
        PathRule("/w/ro", Access.READ),
        PathRule("/w/ro/no", Access.DENY),
        PathRule("/w/ro/no/yes", Access.READ),
        PathRule("/w/ro/no/yes/rw", Access.WRITE),
    )
    seen = model(render_profile(rules))
    for path in ("/w/x", "/w/ro/x", "/w/ro/no/x", "/w/ro/no/yes/x", "/w/ro/no/yes/rw/x", "/other"):
        expected = rules.effective(path)
        assert seen.allows(READ, path) is (expected is not Access.DENY), path
        assert seen.allows(WRITE, path) is (expected is Access.WRITE), path


def test_missing_carve_out_cannot_be_created() -> None:
    """A missing protected name is excluded by literal as well as subpath."""
    rules = rule_set(
        PathRule("/", Access.READ),
        PathRule("/w", Access.WRITE),
        PathRule("/w/.codex", Access.READ, RuleOrigin.PROTECTED, PathKind.MISSING),
    )
    text = render_profile(rules).text
    assert '(require-not (literal (param "READ_1")))' in text
    assert '(require-not (subpath (param "READ_1")))' in text


def test_root_write_with_a_deny_keeps_the_deny() -> None:
    """Full-disk write with one denied tree: everything writable but that tree."""
    rules = rule_set(PathRule("/", Access.WRITE), PathRule("/ws/sub", Access.DENY))
    seen = model(render_profile(rules))
    assert seen.allows(WRITE, "/anywhere")
    assert not seen.allows(READ, "/ws/sub/file")
    assert not seen.allows(WRITE, "/ws/sub")


def test_unrestricted_filesystem_is_one_writable_root() -> None:
    """An open filesystem renders as "/" readable and writable, network rules still apply."""
    profile = render_profile(RuleSet(filesystem_restricted=False, network=NetworkMode.RESTRICTED))
    assert profile.params == (("WRITE_0", "/"),)
    assert "(allow system-socket (socket-domain AF_UNIX))" in profile.text
    assert "(allow network-outbound)" not in profile.text


@pytest.mark.parametrize(
    ("network", "present", "absent"),
    [
        (NetworkMode.RESTRICTED, "(socket-domain AF_UNIX)", "(allow network-outbound)"),
        (NetworkMode.ENABLED, "(allow network-outbound)", "(socket-domain AF_UNIX)"),
    ],
    ids=["restricted", "enabled"],
)
def test_network_section(network: NetworkMode, present: str, absent: str) -> None:
    """Restricted network allows no network operation at all; enabled allows them all."""
    text = render_profile(rule_set(PathRule("/", Access.READ), network=network)).text
    assert present in text
    assert absent not in text
    if network is NetworkMode.RESTRICTED:
        assert not re.search(r"\(allow network-", text)


@pytest.mark.parametrize(
    ("rules", "section"),
    [
        ((PathRule("/", Access.READ),), "; executor: preferences"),
        (
            (PathRule("/usr", Access.READ), PathRule("/w", Access.WRITE)),
            "; executor: platform runtime",
        ),
    ],
    ids=["root-readable", "minimal"],
)
def test_runtime_section(rules: tuple[PathRule, ...], section: str) -> None:
    """Preferences come with a readable disk, the platform runtime with :minimal."""
    text = render_profile(rule_set(*rules)).text
    assert section in text
    other = {"; executor: preferences", "; executor: platform runtime"} - {section}
    assert other.pop() not in text


def test_no_runtime_without_system_libraries() -> None:
    """A profile that grants no system libraries gets no platform grants either."""
    text = render_profile(rule_set(PathRule("/w", Access.WRITE))).text
    assert "; executor: platform runtime" not in text
    assert "; executor: preferences" not in text


def test_traverse_grants_only_metadata_of_ancestors() -> None:
    """Without a readable "/", the ancestors of readable roots get metadata and nothing else."""
    profile = render_profile(
        rule_set(PathRule("/usr", Access.READ), PathRule("/Users/u/ws", Access.WRITE))
    )
    values = {name: value for name, value in profile.params if name.startswith("TRAVERSE")}
    assert sorted(values.values()) == ["/", "/Users", "/Users/u"]
    seen = model(profile)
    assert seen.allows("file-read-metadata", "/Users/u")
    assert not seen.allows(READ, "/Users/u")
    assert not seen.allows("file-read-metadata", "/Users/other")


def test_anchors_protect_the_directories_above_a_carve_out() -> None:
    """A workspace inside writable /tmp cannot be renamed away from its protected .git."""
    rules = rule_set(
        PathRule("/", Access.READ),
        PathRule("/private/tmp", Access.WRITE),
        PathRule("/private/tmp/ws/.git", Access.READ, RuleOrigin.PROTECTED),
    )
    profile = render_profile(rules)
    anchors = sorted(value for name, value in profile.params if name.startswith("ANCHOR"))
    assert anchors == ["/private/tmp/ws", "/tmp/ws"]
    seen = model(profile)
    assert not seen.allows("file-write-unlink", "/private/tmp/ws")
    assert seen.allows("file-write-unlink", "/private/tmp/other")


def test_pinned_paths_are_anchors() -> None:
    """Pinned paths (a workspace in writable /tmp, a symlinked .git) cannot be unlinked or
    renamed; their siblings can."""
    rules = RuleSet(
        filesystem_restricted=True,
        rules=(PathRule("/", Access.READ), PathRule("/private/tmp", Access.WRITE)),
        pinned=("/private/tmp/box", "/private/tmp/box/ws", "/private/tmp/box/ws/.git"),
    )
    profile = render_profile(rules)
    anchors = sorted(value for name, value in profile.params if name.startswith("ANCHOR"))
    assert set(rules.pinned) <= set(anchors)
    seen = model(profile)
    for pinned in rules.pinned:
        assert not seen.allows("file-write-unlink", pinned), pinned
    assert seen.allows("file-write-unlink", "/private/tmp/box/other")


def test_glob_matches_are_not_stated_twice() -> None:
    """Deny rules found by scanning a glob are left to the glob's own regexes."""
    rules = rule_set(
        PathRule("/", Access.READ),
        PathRule("/w", Access.WRITE),
        PathRule("/w/a.env", Access.DENY, RuleOrigin.DENY_GLOB, PathKind.FILE),
        globs=("/w/**/*.env",),
    )
    profile = render_profile(rules)
    assert not [name for name, _ in profile.params if name.startswith("DENY")]
    assert not model(profile).allows(READ, "/w/a.env")


def test_policy_text_holds_no_path() -> None:
    """Every path travels as a parameter; the policy text only refers to it by name."""
    rules = rule_set(
        PathRule("/", Access.READ), PathRule('/Users/q"u(o)te', Access.WRITE), globs=("/x/*.key",)
    )
    profile = render_profile(rules)
    assert 'q"u(o)te' not in profile.text
    assert ".key" not in profile.text
    parse(profile.text)


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/w/a\0b", "NUL byte"),
        ("/w/caf\udce9", r"caf\xe9"),
        ("/w/\ud800", "not valid UTF-8"),
    ],
    ids=["nul", "undecodable-byte", "lone-surrogate"],
)
def test_refuses_paths_sandbox_exec_cannot_carry(path: str, message: str) -> None:
    """NUL bytes and non-UTF-8 bytes refuse the request, naming the path."""
    with pytest.raises(SandboxUnavailable) as caught:
        render_profile(rule_set(PathRule("/", Access.READ), PathRule(path, Access.WRITE)))
    assert message in caught.value.message
    assert caught.value.message.startswith(SandboxUnavailable.PREFIX)


def test_refuses_undecodable_glob() -> None:
    """A deny glob with non-UTF-8 bytes is refused like a path."""
    with pytest.raises(SandboxUnavailable, match="not valid UTF-8"):
        render_profile(rule_set(PathRule("/", Access.READ), globs=("/w/\udcff*",)))


def test_fake_host_resolves_private_links() -> None:
    """The fake Mac resolves /tmp, /var and /etc into /private (what the goldens rely on)."""
    host = FakeMacHost()
    assert host.realpath("/tmp/x") == "/private/tmp/x"
    assert host.kind("/var/folders/zz/xy12/T") is PathKind.DIRECTORY
    assert host.kind("/Users/dev/ws/.codex") is PathKind.MISSING
