"""A profile's ``[network]``: mode, allow, deny, local_ports — compiled to a ``NetworkPolicy``,
checked strictly (every problem names the file and the key), merged through ``extends``, in
the schema, and shown by ``profile explain`` (docs/profiles.md, "[network]")."""

from __future__ import annotations

import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from shutil import rmtree
from typing import Any

import pytest

from executor.errors import SandboxUnavailable
from executor.protocol.intent import NetworkMode, ProfileType, parse_permissions
from executor.sandbox import NetworkAccess, NetworkPolicy
from executor.sandbox.profile_report import explain, explain_lines, network_json, network_lines
from executor.sandbox.profile_schema import check_file, schema_problems
from executor.sandbox.profiles import (
    InvalidProfile,
    Profile,
    ProfileLibrary,
    default_library,
    shipped_directory,
)
from executor.sandbox.rules import RuleSet
from tests.sandbox.test_cli import executor
from tests.sandbox.test_profile_cli import as_json

REGISTRIES = (
    "pypi.org",
    "files.pythonhosted.org",
    "registry.npmjs.org",
    "github.com",
    "*.github.com",
    "*.githubusercontent.com",
    "crates.io",
    "static.crates.io",
    "index.crates.io",
    "proxy.golang.org",
    "sum.golang.org",
)


def library_with(directory: Path, **files: str) -> ProfileLibrary:
    """The shipped profiles and ``files`` (name: TOML text) written into ``directory``."""
    for name, text in files.items():
        (directory / f"{name}.toml").write_text(text, encoding="utf-8")
    return ProfileLibrary([shipped_directory(), directory])


def load(directory: Path, text: str, **parents: str) -> Profile:
    """Profile ``p`` of ``text`` (its parents beside it)."""
    return library_with(directory, p=text, **parents).get("p")


def problems_of(directory: Path, text: str, **parents: str) -> list[tuple[str, str, str]]:
    """Every ``(file, key, message)`` that loading ``text`` as ``p.toml`` reports."""
    with pytest.raises(InvalidProfile) as caught:
        load(directory, text, **parents)
    return [(p.source, p.key, p.message) for p in caught.value.problems]


# --- compiling -------------------------------------------------------------------------------


def test_the_network_policy_of_each_mode(tmp_path: Path) -> None:
    """No table / enabled = false: none; enabled: full (mode's default); mode = "proxy": the
    patterns and ports as written. The wire form says on or off (proxy is on), and the
    request parser reads it back identically."""
    cases: list[tuple[str, NetworkPolicy, NetworkMode]] = [
        ("", NetworkPolicy(mode=NetworkAccess.NONE), NetworkMode.RESTRICTED),
        ("[network]\nenabled = false", NetworkPolicy(), NetworkMode.RESTRICTED),
        (
            "[network]\nenabled = true",
            NetworkPolicy(mode=NetworkAccess.FULL),
            NetworkMode.ENABLED,
        ),
        (
            '[network]\nenabled = true\nmode = "full"\nlocal_ports = [5432, 6379]',
            NetworkPolicy(mode=NetworkAccess.FULL, local_ports=(5432, 6379)),
            NetworkMode.ENABLED,
        ),
        (
            '[network]\nenabled = true\nmode = "proxy"\n'
            'allow = ["pypi.org", "*.pythonhosted.org", "localhost", "127.0.0.1", "::1", "*"]\n'
            'deny = ["*.corp.example", "Evil.Example."]\nlocal_ports = [5432]',
            NetworkPolicy(
                mode=NetworkAccess.PROXY,
                allow=("pypi.org", "*.pythonhosted.org", "localhost", "127.0.0.1", "::1", "*"),
                deny=("*.corp.example", "Evil.Example."),
                local_ports=(5432,),
            ),
            NetworkMode.ENABLED,
        ),
        (
            '[network]\nenabled = true\nmode = "proxy"',  # nothing allowed: only local ports
            NetworkPolicy(mode=NetworkAccess.PROXY),
            NetworkMode.ENABLED,
        ),
    ]
    for text, policy, wire in cases:
        profile = load(tmp_path, '[filesystem]\n":root" = "read"\n' + text)
        assert profile.network == policy, text
        assert profile.network.local_binding is True
        assert profile.permissions.network is wire, text
        assert profile.wire["network"] == wire.value
        assert parse_permissions(profile.wire) == profile.permissions


def test_external_and_disabled_profiles(tmp_path: Path) -> None:
    """An external profile's network is its table's; a disabled one has the host's (its
    command runs unconfined)."""
    external = load(tmp_path, 'type = "external"\n[network]\nenabled = true\nmode = "proxy"')
    assert external.network.mode is NetworkAccess.PROXY
    assert external.wire == {"type": "external", "network": "enabled"}
    disabled = default_library().get("danger-full-access")
    assert disabled.network == NetworkPolicy(mode=NetworkAccess.FULL)
    assert disabled.network_policy(False) == disabled.network  # nothing to override


def test_the_run_override_and_the_intent_agree(tmp_path: Path) -> None:
    """`--network on` gives a profile without network the host's and keeps a network that
    is on as it is (proxied stays proxied); `--network off` takes it away. The intent's
    on/off is the policy's, whatever the override."""
    library = default_library()
    proxied = library.get("workspace-proxy")
    for name, expected in {
        "workspace": {
            None: NetworkPolicy(),
            True: NetworkPolicy(mode=NetworkAccess.FULL),
            False: NetworkPolicy(),
        },
        "workspace-network": {
            None: NetworkPolicy(mode=NetworkAccess.FULL),
            True: NetworkPolicy(mode=NetworkAccess.FULL),
            False: NetworkPolicy(),
        },
        "workspace-proxy": {None: proxied.network, True: proxied.network, False: NetworkPolicy()},
    }.items():
        profile = library.get(name)
        for override, policy in expected.items():
            assert profile.network_policy(override) == policy, (name, override)
            intent = profile.intent(workspace_roots=("/ws",), network=override)
            on = intent.permissions.network is NetworkMode.ENABLED
            assert on is policy.enabled, (name, override)
    assert proxied.network.mode is NetworkAccess.PROXY


def test_a_profile_built_by_hand_follows_its_permissions() -> None:
    """Without ``network``, a Profile's policy is what ``permissions.network`` says."""
    library = default_library()
    for name, mode in [
        ("read-only", NetworkAccess.NONE),
        ("workspace-network", NetworkAccess.FULL),
        ("danger-full-access", NetworkAccess.FULL),
    ]:
        loaded = library.get(name)
        by_hand = Profile(
            name=name,
            description="",
            source="x.toml",
            permissions=loaded.permissions,
            wire=loaded.wire,
        )
        assert by_hand.network == NetworkPolicy(mode=mode), name
    explicit = Profile(
        name="p",
        description="",
        source="p.toml",
        permissions=library.get("read-only").permissions,
        wire={},
        network=NetworkPolicy(),
    )
    assert explicit.network == NetworkPolicy()


# --- bad input -------------------------------------------------------------------------------

ON = "[network]\nenabled = true\n"
PROXY = ON + 'mode = "proxy"\n'
#: (id, [network] text, key, what the message says, whether the schema sees it in the file).
BAD_NETWORK = [
    ("not-a-table", "network = 1", "network", "must be a table", True),
    ("unknown-key", ON + "ports = [1]", "network.ports", "unknown key (known: allow, deny,", True),
    ("enabled-string", '[network]\nenabled = "yes"', "network.enabled", "must be true or", True),
    (
        "mode-value",
        ON + 'mode = "socks"',
        "network.mode",
        'must be "full" or "proxy", got "socks"',
        True,
    ),
    ("mode-type", ON + "mode = 1", "network.mode", 'must be "full" or "proxy", got 1', True),
    (
        "proxy-while-off",
        '[network]\nenabled = false\nmode = "proxy"',
        "network.mode",
        'mode = "proxy" with enabled = false: a mode applies only to a network that is on',
        True,
    ),
    (
        "proxy-while-off-by-default",
        '[network]\nmode = "proxy"',
        "network.mode",
        'mode = "proxy" with enabled = false (the default)',
        False,  # enabled may come from the profile this one extends
    ),
    (
        "allow-in-full",
        ON + 'allow = ["pypi.org"]',
        "network.allow",
        'host patterns apply only with mode = "proxy", and here mode = "full" (the default)',
        False,
    ),
    (
        "deny-in-explicit-full",
        ON + 'mode = "full"\ndeny = ["x.org"]',
        "network.deny",
        'host patterns apply only with mode = "proxy", and here mode = "full",',
        True,
    ),
    (
        "allow-while-off",
        '[network]\nenabled = false\nallow = ["x.org"]',
        "network.allow",
        "and here enabled = false",
        True,
    ),
    (
        "allow-not-a-list",
        PROXY + 'allow = "pypi.org"',
        "network.allow",
        "must be a list of host",
        True,
    ),
    (
        "allow-not-a-string",
        PROXY + 'allow = ["pypi.org", 3]',
        "network.allow[1]",
        "must be a host pattern (a string), got 3",
        True,
    ),
    (
        "allow-url",
        PROXY + 'allow = ["https://pypi.org/simple"]',
        "network.allow[0]",
        "'https://pypi.org/simple': must be a host name, '*.suffix', '*' or an IP address",
        True,
    ),
    ("allow-port", PROXY + 'allow = ["pypi.org:443"]', "network.allow[0]", "'pypi.org:443'", True),
    ("allow-space", PROXY + 'allow = [" pypi.org"]', "network.allow[0]", "(no spaces)", True),
    ("allow-empty", PROXY + 'allow = [""]', "network.allow[0]", "''", True),
    ("allow-inner-star", PROXY + 'allow = ["py*.org"]', "network.allow[0]", "'*' may only", True),
    ("allow-star-dot", PROXY + 'allow = ["*."]', "network.allow[0]", "'*.' has no suffix", True),
    (
        "allow-bad-suffix",
        PROXY + 'allow = ["*.-x.org"]',
        "network.allow[0]",
        "'*.-x.org': the suffix is not a host name (bad label '-x')",
        True,
    ),
    (
        "deny-bad-label",
        PROXY + 'deny = ["a..b"]',
        "network.deny[0]",
        "'a..b' is not a host name",
        True,
    ),
    (
        "allow-duplicate",
        PROXY + 'allow = ["pypi.org", "PyPI.org."]',
        "network.allow[1]",
        "'PyPI.org.' is listed twice",
        False,  # the same host in other letters
    ),
    (
        "local-ports-not-a-list",
        ON + "local_ports = 5432",
        "network.local_ports",
        "must be a list",
        True,
    ),
    (
        "local-port-zero",
        ON + "local_ports = [0]",
        "network.local_ports[0]",
        "1..65535, got 0",
        True,
    ),
    (
        "local-port-too-big",
        ON + "local_ports = [80, 65536]",
        "network.local_ports[1]",
        "must be a port number 1..65535, got 65536",
        True,
    ),
    ("local-port-bool", ON + "local_ports = [true]", "network.local_ports[0]", "got true", True),
    (
        "local-port-string",
        ON + 'local_ports = ["5432"]',
        "network.local_ports[0]",
        'got "5432"',
        True,
    ),
    (
        "local-port-float",
        ON + "local_ports = [5432.0]",
        "network.local_ports[0]",
        "got 5432.0",
        False,  # JSON does not tell 5432.0 from 5432
    ),
    (
        "local-port-duplicate",
        ON + "local_ports = [5432, 5432]",
        "network.local_ports[1]",
        "5432 is listed twice",
        True,
    ),
    (
        "local-ports-while-off",
        "[network]\nenabled = false\nlocal_ports = [5432]",
        "network.local_ports",
        "local ports apply only to a network that is on, and here enabled = false: set",
        True,
    ),
]


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [case[1:4] for case in BAD_NETWORK],
    ids=[case[0] for case in BAD_NETWORK],
)
def test_bad_network_tables_name_the_file_and_the_key(
    tmp_path: Path, text: str, key: str, message: str
) -> None:
    """The message names the file and the key (a bad entry by its index), and nothing loads."""
    path = tmp_path / "p.toml"
    found = problems_of(tmp_path, text)
    assert any(
        source == str(path) and at == key and message in said for source, at, said in found
    ), found
    with pytest.raises(InvalidProfile) as caught:
        load(tmp_path, text)
    assert f"{path}: {key}: " in caught.value.message


@pytest.mark.parametrize(
    ("text", "key", "sees"),
    [(case[1], case[2], case[4]) for case in BAD_NETWORK],
    ids=[case[0] for case in BAD_NETWORK],
)
def test_the_schema_names_the_same_keys(text: str, key: str, sees: bool) -> None:
    """What one file's structure shows, the schema flags at the same key (or the table
    holding it); what needs the merged profile or the compiler's host rules, it leaves to
    `profile check`'s compiler."""
    keys = [problem.key for problem in schema_problems(tomllib.loads(text), "p.toml")]
    if sees:
        assert any(found == key or key.startswith((found + ".", found + "[")) for found in keys)
    else:
        assert keys == []


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    """One load lists them all, in the order of the keys."""
    text = (
        '[network]\nenabled = true\nmode = "proxy"\ncolour = 1\n'
        'allow = ["ok.org", "http://x", "ok.org"]\ndeny = [1]\nlocal_ports = [0, 22, 22]'
    )
    keys = [key for _, key, _ in problems_of(tmp_path, text)]
    assert keys == [
        "network.colour",
        "network.allow[1]",
        "network.allow[2]",
        "network.deny[0]",
        "network.local_ports[0]",
        "network.local_ports[2]",
    ]


def test_profile_check_keeps_the_compilers_words_for_network_keys(tmp_path: Path) -> None:
    """Where the schema and the compiler both object, `profile check` says it once, in the
    compiler's words: first what the file says on its own, then what does not fit."""
    path = tmp_path / "p.toml"
    path.write_text('[network]\nenabled = false\nmode = "proxy"\nlocal_ports = [0]\n')
    profile, problems = check_file(ProfileLibrary([shipped_directory(), tmp_path]), path)
    assert profile is None
    assert [(p.key, p.message.endswith("(schema)")) for p in problems] == [
        ("network.local_ports[0]", False),
        ("network.mode", False),
        ("network.local_ports", False),
    ]


# --- extends ---------------------------------------------------------------------------------


def test_a_child_narrows_a_proxied_parent(tmp_path: Path) -> None:
    """`allow` and `local_ports` replace the parent's; `deny` accumulates (a child cannot
    drop a deny by listing others)."""
    parent = (
        'extends = "workspace"\n[network]\nenabled = true\nmode = "proxy"\n'
        'allow = ["*.example.org", "pypi.org"]\ndeny = ["bad.example.org"]\nlocal_ports = [1]'
    )
    child = load(tmp_path, 'extends = "base"\n[network]\ndeny = ["worse.example.org"]', base=parent)
    assert child.network == NetworkPolicy(
        mode=NetworkAccess.PROXY,
        allow=("*.example.org", "pypi.org"),
        deny=("bad.example.org", "worse.example.org"),
        local_ports=(1,),
    )
    child = load(
        tmp_path,
        'extends = "base"\n[network]\nallow = ["pypi.org"]\nlocal_ports = []\n'
        'deny = ["bad.example.org"]',
        base=parent,
    )
    assert child.network.allow == ("pypi.org",) and child.network.local_ports == ()
    assert child.network.deny == ("bad.example.org",)  # listed again: still once


def test_a_child_that_turns_the_network_off_or_to_full_drops_what_meant_nothing(
    tmp_path: Path,
) -> None:
    """From the shipped `workspace-proxy`: `enabled = false` leaves no mode, patterns or
    ports behind; `mode = "full"` no patterns (its ports stay: they mean something there)."""
    parent = 'extends = "workspace-proxy"\n[network]\nlocal_ports = [5432]'
    off = load(tmp_path, 'extends = "mid"\n[network]\nenabled = false', mid=parent)
    assert off.network == NetworkPolicy() and off.permissions.network is NetworkMode.RESTRICTED
    full = load(tmp_path, 'extends = "mid"\n[network]\nmode = "full"', mid=parent)
    assert full.network == NetworkPolicy(mode=NetworkAccess.FULL, local_ports=(5432,))
    proxied = load(tmp_path, 'extends = "mid"', mid=parent)
    assert proxied.network.allow == REGISTRIES and proxied.network.local_ports == (5432,)


def test_what_a_child_adds_is_checked_against_what_it_inherits(tmp_path: Path) -> None:
    """A child's proxy mode over a parent whose network is off is the error the issue names;
    a child's patterns over a parent in full mode are meaningless; a child can turn a
    parent's network into a proxied one."""
    path = str(tmp_path / "p.toml")
    found = problems_of(tmp_path, 'extends = "read-only"\n[network]\nmode = "proxy"')
    assert found == [
        (
            path,
            "network.mode",
            'mode = "proxy" with enabled = false: a mode applies only to a network that is on'
            " (set enabled = true, or remove mode)",
        )
    ]
    found = problems_of(tmp_path, 'extends = "workspace-network"\n[network]\nallow = ["x.org"]')
    assert [(source, key) for source, key, _ in found] == [(path, "network.allow")]
    found = problems_of(
        tmp_path,
        'extends = "workspace-proxy"\n[network]\nmode = "full"\ndeny = ["x.org"]',
    )
    assert [(source, key) for source, key, _ in found] == [(path, "network.deny")]
    found = problems_of(
        tmp_path, 'extends = "workspace-proxy"\n[network]\nenabled = false\nlocal_ports = [1]'
    )
    assert [(source, key) for source, key, _ in found] == [(path, "network.local_ports")]
    proxied = load(
        tmp_path, 'extends = "workspace-network"\n[network]\nmode = "proxy"\nallow = ["x.org"]'
    )
    assert proxied.network == NetworkPolicy(mode=NetworkAccess.PROXY, allow=("x.org",))


def test_a_broken_parent_network_is_named_in_its_own_file(tmp_path: Path) -> None:
    """A parent's bad pattern is reported in the parent's file when it is loaded, and the
    child says its parent is invalid."""
    parent = 'extends = "workspace"\n[network]\nenabled = true\nmode = "proxy"\nallow = ["a b"]'
    library = library_with(tmp_path, base=parent, p='extends = "base"')
    for name in ("base", "p"):
        with pytest.raises(InvalidProfile) as caught:
            library.get(name)
        assert f"{tmp_path / 'base.toml'}: network.allow[0]: 'a b'" in caught.value.message
    assert f"{tmp_path / 'p.toml'}: extends: profile 'base' is invalid" in caught.value.message
    assert str(tmp_path / "p.toml") + ": network" not in caught.value.message


# --- the shipped profile ---------------------------------------------------------------------


def test_workspace_proxy_is_workspace_through_the_proxy() -> None:
    """The package registries and code hosts, nothing else; the filesystem of `workspace`."""
    library = default_library()
    proxied, workspace = library.get("workspace-proxy"), library.get("workspace")
    assert proxied.shipped and proxied.description
    assert proxied.network == NetworkPolicy(mode=NetworkAccess.PROXY, allow=REGISTRIES)
    assert proxied.permissions.network is NetworkMode.ENABLED
    assert proxied.permissions.type is ProfileType.MANAGED
    assert proxied.permissions.file_system == workspace.permissions.file_system
    assert proxied.limits == workspace.limits
    assert proxied.network.allows_host("github.com") == (True, True)
    assert proxied.network.allows_host("codeload.github.com") == (True, False)
    assert proxied.network.allows_host("example.com") == (False, False)


# --- profile explain -------------------------------------------------------------------------


class _Refusing:
    """A manager that refuses everything: explain's enforcement part is not under test."""

    def select(self, rules: RuleSet) -> Any:
        raise SandboxUnavailable("not under test")


def test_network_rules_as_json_and_text() -> None:
    """Each mode's rules, for scripts and for people."""
    proxied = NetworkPolicy(
        mode=NetworkAccess.PROXY,
        allow=("pypi.org", "*.x.org"),
        deny=("a.x.org",),
        local_ports=(5432,),
    )
    assert network_json(proxied) == {
        "mode": "proxy",
        "allow": ["pypi.org", "*.x.org"],
        "deny": ["a.x.org"],
        "local_ports": [5432],
        "local_binding": True,
    }
    lines = network_lines(network_json(proxied))
    assert lines[0].startswith("  mode: proxy (only through the executor's HTTP/SOCKS5 proxy")
    assert lines[1:] == [
        "  allow: pypi.org, *.x.org",
        "  deny: a.x.org",
        "  host loopback ports: 5432",
    ]
    assert network_lines(network_json(NetworkPolicy(mode=NetworkAccess.FULL))) == [
        "  mode: full (the host's network)",
        "  host loopback ports: none",
    ]
    assert network_lines(network_json(NetworkPolicy(mode=NetworkAccess.PROXY)))[1:3] == [
        "  allow: nothing",
        "  deny: nothing",
    ]
    assert network_lines(network_json(NetworkPolicy())) == ["  mode: none (no network at all)"]


def test_explain_applies_the_override_to_the_profiles_policy() -> None:
    """The report's policy is the profile's after `--network on|off` (the rules' on/off)."""
    proxied = default_library().get("workspace-proxy")
    for network, mode in [(NetworkMode.ENABLED, "proxy"), (NetworkMode.RESTRICTED, "none")]:
        rules = RuleSet(policy_cwd="/ws", filesystem_restricted=False, network=network)
        report = explain(proxied, rules, _Refusing())  # type: ignore[arg-type]
        assert report["network"] == network.value
        assert report["network_policy"]["mode"] == mode
        assert report["profile"]["network_mode"] == "proxy"
        assert f"network: {network.value}" in explain_lines(report)


@pytest.fixture
def ws() -> Iterator[Path]:
    """A workspace outside /tmp."""
    path = Path(tempfile.mkdtemp(prefix="executor-net-", dir="/var/tmp")).resolve()
    yield path
    rmtree(path, ignore_errors=True)


def test_profile_explain_shows_the_network_rules(ws: Path, tmp_path: Path) -> None:
    """`profile explain` of the shipped proxied profile and of a file in full mode with a
    local port: text and --json; `profile list --json` names each profile's mode."""
    result = executor("profile", "explain", "workspace-proxy", "--workspace", str(ws))
    assert result.returncode in (0, 1), result.stderr
    lines = result.stdout.splitlines()
    at = lines.index("network: enabled")
    assert lines[at + 1].startswith("  mode: proxy (only through the executor's")
    assert lines[at + 2] == f"  allow: {', '.join(REGISTRIES)}"
    assert lines[at + 3 : at + 5] == ["  deny: nothing", "  host loopback ports: none"]
    _, report = as_json("profile", "explain", "workspace-proxy", "--workspace", str(ws))
    assert report["network"] == "enabled"
    assert report["network_policy"] == {
        "mode": "proxy",
        "allow": list(REGISTRIES),
        "deny": [],
        "local_ports": [],
        "local_binding": True,
    }
    _, report = as_json(
        "profile", "explain", "workspace-proxy", "--workspace", str(ws), "--network", "off"
    )
    assert report["network"] == "restricted" and report["network_policy"]["mode"] == "none"

    site = tmp_path / "db.toml"
    site.write_text(
        'extends = "workspace"\n[network]\nenabled = true\nlocal_ports = [5432, 6379]\n'
    )
    result = executor("profile", "explain", str(site), "--workspace", str(ws))
    assert "  mode: full (the host's network)\n  host loopback ports: 5432, 6379\n" in (
        result.stdout
    )
    _, report = as_json("profile", "explain", str(site), "--workspace", str(ws))
    assert report["network_policy"]["local_ports"] == [5432, 6379]
    assert report["profile"]["network_mode"] == "full"

    _, listed = as_json("profile", "list", env={"EXECUTOR_PROFILES_DIR": ""})
    modes = {row["name"]: row["network_mode"] for row in listed["profiles"]}
    assert modes == {
        "danger-full-access": "full",
        "read-only": "none",
        "workspace": "none",
        "workspace-network": "full",
        "workspace-proxy": "proxy",
    }


def test_profile_check_names_a_bad_pattern(tmp_path: Path) -> None:
    """`profile check` exits 2 and names the file, the key and the entry."""
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'extends = "workspace"\n[network]\nenabled = false\nmode = "proxy"\n'
        'allow = ["pypi.org", "https://files.pythonhosted.org"]\n'
    )
    result = executor("profile", "check", str(bad))
    assert result.returncode == 2 and result.stdout == ""
    assert f'{bad}: network.mode: mode = "proxy" with enabled = false' in result.stderr
    assert (
        f"{bad}: network.allow[1]: 'https://files.pythonhosted.org': must be a host name"
        in result.stderr
    )
