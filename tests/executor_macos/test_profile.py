"""What rendered profiles mean: checked against the rule set through the SBPL model.

``seatbelt_model`` evaluates a profile the way SBPL is documented to work (last matching rule
decides); these tests check that, read that way, each profile grants exactly what the rule set
grants, covers both spellings of ``/tmp``-like paths, and refuses paths it cannot carry.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from executor_macos.profile import SeatbeltProfile, render_profile

from executor.errors import SandboxUnavailable
from executor.protocol.intent import Access, NetworkMode
from executor.sandbox import NetworkRoute
from executor.sandbox.rules import PathKind, PathRule, RuleOrigin, RuleSet
from tests.executor_macos.fakehost import FakeMacHost
from tests.executor_macos.seatbelt_model import Model, Socket
from tests.executor_macos.sexpr import parse
from tests.executor_macos.test_golden import DATABASE_PORT, PROXY_PORT, rendered

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


# --- network ------------------------------------------------------------------------------

OUT, BIND, IN = "network-outbound", "network-bind", "network-inbound"
INTERNET = Socket("93.184.216.34", 443)
INTERNET6 = Socket("2001:db8::1", 443)
#: A host loopback service that no profile lists (this daemon, a dev database).
HOST_SERVICE = Socket("127.0.0.1", 8080)
#: The same service by its other spellings: IPv6 loopback and the IPv4-mapped form.
HOST_SERVICE_V6 = Socket("::1", 8080)
HOST_SERVICE_MAPPED = Socket("::ffff:127.0.0.1", 8080)
PROXY = Socket("127.0.0.1", PROXY_PORT)
DATABASE = Socket("127.0.0.1", DATABASE_PORT)
DATABASE_V6 = Socket("::1", DATABASE_PORT)
#: Host Unix sockets: tmux's (in writable /tmp), Docker's, and the system resolver's.
TMUX = Socket("/private/tmp/tmux-501/default")
DOCKER = Socket("/private/var/run/docker.sock")
RESOLVER = Socket("/private/var/run/mDNSResponder")
RESOLVER_ALIAS = Socket("/var/run/mDNSResponder")
LISTEN = Socket("127.0.0.1", 3000, side="local")
LISTEN_V6 = Socket("::1", 3000, side="local")
LISTEN_ANY = Socket("0.0.0.0", 3000, side="local")
ACCEPT_LAN = Socket("192.168.1.20", 3000, side="local")

# (case, operation, socket, allowed)
NETWORK_MEANING = [
    # network off: nothing, Unix sockets included.
    ("workspace", OUT, INTERNET, False),
    ("workspace", OUT, HOST_SERVICE, False),
    ("workspace", OUT, TMUX, False),
    ("workspace", OUT, RESOLVER, False),
    ("workspace", BIND, LISTEN, False),
    # network on: everything, the host's loopback and Unix sockets included (the hole that
    # loopback isolation closes).
    ("workspace-network", OUT, INTERNET, True),
    ("workspace-network", OUT, INTERNET6, True),
    ("workspace-network", OUT, HOST_SERVICE, True),
    ("workspace-network", OUT, TMUX, True),
    ("workspace-network", OUT, DOCKER, True),
    ("workspace-network", BIND, LISTEN_ANY, True),
    # proxy: the proxy's port and the listed local port, by either loopback spelling; nothing
    # else, no resolver, no Unix socket; listening on loopback only.
    ("workspace-proxy", OUT, PROXY, True),
    ("workspace-proxy", OUT, Socket("::1", PROXY_PORT), True),
    ("workspace-proxy", OUT, DATABASE, True),
    ("workspace-proxy", OUT, DATABASE_V6, True),
    ("workspace-proxy", OUT, HOST_SERVICE, False),
    ("workspace-proxy", OUT, HOST_SERVICE_V6, False),
    ("workspace-proxy", OUT, HOST_SERVICE_MAPPED, False),
    ("workspace-proxy", OUT, INTERNET, False),
    ("workspace-proxy", OUT, INTERNET6, False),
    ("workspace-proxy", OUT, Socket("8.8.8.8", 53), False),
    ("workspace-proxy", OUT, RESOLVER, False),
    ("workspace-proxy", OUT, TMUX, False),
    ("workspace-proxy", OUT, DOCKER, False),
    ("workspace-proxy", OUT, Socket("127.0.0.1", 3000), False),
    ("workspace-proxy", BIND, LISTEN, True),
    ("workspace-proxy", BIND, LISTEN_V6, True),
    ("workspace-proxy", IN, LISTEN, True),
    ("workspace-proxy", BIND, LISTEN_ANY, False),
    ("workspace-proxy", IN, ACCEPT_LAN, False),
    ("workspace-proxy", BIND, Socket("/Users/dev/ws/app.sock", side="local"), False),
    ("workspace-proxy-no-binding", OUT, PROXY, True),
    ("workspace-proxy-no-binding", OUT, DATABASE, False),
    ("workspace-proxy-no-binding", BIND, LISTEN, False),
    ("workspace-proxy-no-binding", IN, LISTEN, False),
    # loopback isolated: the internet over IPv4; the host's loopback only at local_ports;
    # IPv6 refused (its IPv4-mapped forms would reach the loopback); the resolver's Unix
    # socket and no other.
    ("workspace-isolated", OUT, INTERNET, True),
    ("workspace-isolated", OUT, Socket("8.8.8.8", 53), True),
    ("workspace-isolated", OUT, HOST_SERVICE, False),
    ("workspace-isolated", OUT, Socket("127.1.2.3", 8080), False),
    ("workspace-isolated", OUT, HOST_SERVICE_V6, False),
    ("workspace-isolated", OUT, HOST_SERVICE_MAPPED, False),
    ("workspace-isolated", OUT, Socket("::ffff:0.0.0.0", 8080), False),
    ("workspace-isolated", OUT, INTERNET6, False),
    ("workspace-isolated", OUT, DATABASE, True),
    ("workspace-isolated", OUT, DATABASE_V6, True),
    ("workspace-isolated", OUT, RESOLVER, True),
    ("workspace-isolated", OUT, RESOLVER_ALIAS, True),
    ("workspace-isolated", OUT, TMUX, False),
    ("workspace-isolated", OUT, DOCKER, False),
    ("workspace-isolated", OUT, Socket("/Users/dev/ws/app.sock"), False),
    ("workspace-isolated", BIND, LISTEN_ANY, True),
    ("workspace-isolated", IN, ACCEPT_LAN, True),
]


@pytest.mark.parametrize(
    ("case", "operation", "socket", "allowed"),
    NETWORK_MEANING,
    ids=[f"{case}-{op}-{sock.address}:{sock.port}" for case, op, sock, _ in NETWORK_MEANING],
)
def test_golden_network_meaning(case: str, operation: str, socket: Socket, allowed: bool) -> None:
    """Each golden profile's network rules allow exactly what its mode says.

    Read with the last matching rule deciding: the network sections rely on it (a deny
    follows the allow it narrows, and the listed ports are allowed again after the denies).
    """
    assert model(rendered(case)).allows(operation, socket) is allowed


def network_rules(**fields: object) -> RuleSet:
    """A readable disk with network on and ``fields`` (route, isolation, local ports)."""
    base = rule_set(PathRule("/", Access.READ), network=NetworkMode.ENABLED)
    return replace(base, **fields)  # type: ignore[arg-type]


def network_section(profile: SeatbeltProfile) -> str:
    """The text from the network section to the end."""
    return profile.text[profile.text.index("; executor: network") :]


@pytest.mark.parametrize(
    "port",
    [0, 65536, -1, True, "80", '80") (allow default', 80.0],
    ids=["zero", "too-big", "negative", "bool", "str", "injection", "float"],
)
@pytest.mark.parametrize("mode", ["proxy", "isolated"])
def test_refuses_what_is_not_a_port(port: object, mode: str) -> None:
    """Ports are written into the text, so anything but an int in 1..65535 is refused."""
    fields: dict[str, object] = {"local_ports": (port,)}
    if mode == "proxy":
        fields = {"route": NetworkRoute(ports=(port,))}  # type: ignore[arg-type]
    else:
        fields["isolate_loopback"] = True
    with pytest.raises(SandboxUnavailable, match="not a TCP port"):
        render_profile(network_rules(**fields))


def test_proxy_route_without_ports_fails_closed() -> None:
    """A route with no port (the daemon never builds one) leaves no way out at all."""
    profile = render_profile(network_rules(route=NetworkRoute(ports=(), local_binding=False)))
    seen = model(profile)
    for socket in (PROXY, INTERNET, HOST_SERVICE, RESOLVER, TMUX):
        assert not seen.allows(OUT, socket), socket
    assert "(remote ip" not in profile.text
    assert not re.search(r"\(allow network-outbound\)", profile.text)


def test_ports_are_stated_once_in_order() -> None:
    """The route's ports then local_ports, each once."""
    rules = network_rules(route=NetworkRoute(ports=(3128, 5432, 3128)), local_ports=(6379, 5432))
    stated = re.findall(r'\(remote ip "localhost:(\d+)"\)', render_profile(rules).text)
    assert stated == ["3128", "5432", "6379"]


def test_isolated_local_ports_listed_once() -> None:
    """Isolation re-allows each local port once; without ports no loopback port is allowed."""
    text = render_profile(network_rules(isolate_loopback=True, local_ports=(5432, 5432))).text
    assert re.findall(r'\(remote ip "localhost:(\d+)"\)', text) == ["5432"]
    bare = render_profile(network_rules(isolate_loopback=True))
    assert "localhost:5432" not in bare.text
    assert not model(bare).allows(OUT, DATABASE)


@pytest.mark.parametrize(
    ("fields", "mode"),
    [
        ({"network": NetworkMode.RESTRICTED, "route": NetworkRoute(ports=(1,))}, "restricted"),
        ({"network": NetworkMode.RESTRICTED, "isolate_loopback": True}, "restricted"),
        ({"route": NetworkRoute(ports=(1,)), "isolate_loopback": True}, "proxy"),
        ({"isolate_loopback": True}, "isolated"),
        ({"local_ports": (5432,)}, "enabled"),
    ],
    ids=[
        "restricted-over-proxy",
        "restricted-over-isolation",
        "proxy-over-isolation",
        "isolated",
        "local-ports-alone",
    ],
)
def test_network_mode_precedence(fields: dict[str, object], mode: str) -> None:
    """No network beats a route, a route beats isolation (as ``RuleSet.needs`` reads them)."""
    headers = {
        "restricted": "; executor: network restricted",
        "proxy": "; executor: network through the executor's proxy only",
        "isolated": "; executor: network enabled, this host's loopback isolated",
        "enabled": "; executor: network enabled. Any connection",
    }
    text = render_profile(network_rules(**fields)).text
    for name, header in headers.items():
        assert (header in text) is (name == mode), name


def test_isolation_rule_order_is_the_measured_one() -> None:
    """The order the loopback denial was measured to need: IPv4 allowed, its loopback denied,
    IPv6 denied right after, and only then the listed ports and the resolver allowed again."""
    text = network_section(
        render_profile(network_rules(isolate_loopback=True, local_ports=(5432,)))
    )
    rules = [line for line in text.splitlines() if line.startswith("(")]
    allow_ip4 = rules.index('(allow network-outbound (remote ip4 "*:*"))')
    assert rules[allow_ip4 + 1] == '(deny network-outbound (remote ip4 "localhost:*"))'
    assert rules[allow_ip4 + 2] == '(deny network-outbound (remote ip6 "*:*"))'
    assert text.index('(remote ip "localhost:5432")') > text.index("(remote ip6")
    assert text.index("mDNSResponder") > text.index("(remote ip6")
    assert "(allow network-outbound)" not in text


@pytest.mark.parametrize(
    "fields",
    [
        {"route": NetworkRoute(ports=(3128,))},
        {"route": NetworkRoute(ports=(3128,), local_binding=False)},
        {"isolate_loopback": True, "local_ports": (5432,)},
    ],
    ids=["proxy", "proxy-no-binding", "isolated"],
)
def test_managed_network_keeps_tls_and_trust_services(fields: dict[str, object]) -> None:
    """HTTPS through the proxy still verifies certificates here: the trust services stay."""
    enabled = network_section(render_profile(network_rules()))
    services = enabled[enabled.index("; Name resolution, network configuration") :]
    assert network_section(render_profile(network_rules(**fields))).endswith(services)
    for name in ("com.apple.trustd.agent", "com.apple.SecurityServer", "com.apple.ocspd"):
        assert f'(global-name "{name}")' in services


def test_proxy_allows_no_general_network_operation() -> None:
    """In proxy mode every network-* allow is filtered: none is unconditional."""
    text = network_section(render_profile(network_rules(route=NetworkRoute(ports=(3128,)))))
    assert not re.search(r"\(allow network-[a-z]+\)", text)
    assert not re.search(r"\(allow network\*", text)
    assert "(allow system-socket)" not in text
