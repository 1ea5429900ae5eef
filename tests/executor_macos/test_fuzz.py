"""Fuzzing the renderer: hostile paths never change the policy's shape, and it means the rules.

Paths are built from components holding quotes, backslashes, parentheses, semicolons,
newlines, regex metacharacters and non-ASCII text. For each rule set the tests check that the
policy text parses as balanced SBPL, names no path (only generated parameter names and the
fixed vocabulary of the resource files), depends only on the rules' structure, that every
``-D`` value round-trips exactly, and that the SBPL model of the profile grants exactly what
the rule set grants. Deny-glob regexes are checked against the core's glob semantics. Network
settings (a proxy route, loopback isolation, their ports) vary too: the only literals they add
are ``localhost:<port>`` for the ports given, and the model of the profile lets a command
connect to exactly those loopback ports.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import replace
from importlib import resources

import pytest
from executor_macos.profile import render_profile
from executor_macos.sbpl import glob_to_ere
from hypothesis import example, given, settings
from hypothesis import strategies as st

from executor.errors import SandboxUnavailable
from executor.protocol.intent import Access, NetworkMode
from executor.sandbox import NetworkRoute
from executor.sandbox.rules import PathKind, PathRule, RuleOrigin, RuleSet, glob_to_regex
from tests.executor_macos.seatbelt_model import Model, Socket, ere_search
from tests.executor_macos.sexpr import literals, params_used, parse, split_define
from tests.sandbox.test_rules import GLOBS

HOSTILE = "\"\\()[]{}*?^$.|+;#'` \t\n\ré∂\u00a0😀-=_~"
#: Characters of one path component: the hostile ones above, and anything printable.
CHARACTER = st.one_of(
    st.sampled_from(HOSTILE),
    st.characters(codec="utf-8", exclude_characters="/\x00"),
)
COMPONENT = st.text(alphabet=CHARACTER, min_size=1, max_size=6).filter(
    lambda c: c not in (".", "..")
)
#: Without a newline: the core's glob matcher reads ``.`` without DOTALL, so newlines would
#: make it (not the renderer) deny less; see the report on ``rules.glob_to_regex``.
PLAIN_COMPONENT = COMPONENT.filter(lambda c: "\n" not in c)
BASE = "/fz"


def _vocabulary() -> set[str]:
    """Every string literal of the resource files."""
    found: set[str] = set()
    package = resources.files("executor_macos")
    for item in package.iterdir():
        if item.name.endswith(".sbpl"):
            found |= literals(parse(item.read_text(encoding="utf-8")))
    return found


VOCABULARY = _vocabulary()
PORTS = st.lists(st.integers(1, 65535), max_size=4)


@st.composite
def networks(draw: st.DrawFn) -> dict[str, object]:
    """The network fields of a rule set: off, on, on with loopback isolation, or proxied."""
    mode = draw(st.sampled_from(["restricted", "enabled", "isolated", "proxy"]))
    local_ports = tuple(draw(PORTS))
    fields: dict[str, object] = {
        "network": NetworkMode.RESTRICTED if mode == "restricted" else NetworkMode.ENABLED,
        "local_ports": local_ports,
    }
    if mode == "isolated":
        fields["isolate_loopback"] = True
    elif mode == "proxy":
        route_ports = tuple(draw(PORTS))
        fields["route"] = NetworkRoute(ports=route_ports, local_binding=draw(st.booleans()))
    return fields


def loopback_ports(rules: RuleSet) -> set[int]:
    """The host loopback ports a command under ``rules`` may connect to (all: None)."""
    if rules.network is NetworkMode.RESTRICTED:
        return set()
    if rules.route is not None:
        return {*rules.route.ports, *rules.local_ports}
    return set(rules.local_ports)


@st.composite
def rule_sets(
    draw: st.DrawFn, component: st.SearchStrategy[str] = COMPONENT, globs: bool = True
) -> RuleSet:
    """Rule sets below ``/fz`` (plus an optional rule at "/") with hostile component names."""
    names = draw(st.lists(component, min_size=1, max_size=4, unique=True))
    parts = draw(
        st.lists(
            st.lists(st.sampled_from(names), min_size=1, max_size=3).map(tuple),
            max_size=7,
            unique=True,
        )
    )
    rules: list[PathRule] = []
    top = draw(st.sampled_from([None, Access.READ, Access.WRITE]))
    if top is not None:
        rules.append(PathRule("/", top))
    base = draw(st.sampled_from([None, Access.READ, Access.WRITE, Access.DENY]))
    if base is not None:
        rules.append(PathRule(BASE, base))
    for part in parts:
        rules.append(PathRule(BASE + "/" + "/".join(part), draw(st.sampled_from(list(Access)))))
    rules.sort(key=lambda rule: (0 if rule.path == "/" else rule.path.count("/"), rule.path))
    patterns: list[str] = []
    if globs:
        for _ in range(draw(st.integers(0, 2))):
            head, tail = draw(st.sampled_from(names)), draw(st.sampled_from(names))
            shape = draw(
                st.sampled_from(["{h}/**/*{t}", "{h}/*{t}", "**/{t}", "{h}/?{t}", "{h}/[0-9]{t}"])
            )
            patterns.append(BASE + "/" + shape.format(h=head, t=tail))
    return RuleSet(
        filesystem_restricted=True,
        rules=tuple(rules),
        deny_globs=tuple(patterns),
        **draw(networks()),  # type: ignore[arg-type]
    )


@settings(max_examples=300, deadline=None)
@given(rule_sets())
def test_policy_is_well_formed_and_names_no_path(rules: RuleSet) -> None:
    """The text parses, holds only known literals, and every -D value round-trips exactly."""
    profile = render_profile(rules)
    forms = parse(profile.text)
    names = {name for name, _value in profile.params}
    ports = {f"localhost:{port}" for port in loopback_ports(rules)}
    assert literals(forms) <= VOCABULARY | names | ports
    assert set(params_used(forms)) == names
    arguments = profile.arguments()
    assert arguments[:2] == ("-p", profile.text)
    assert tuple(split_define(argument) for argument in arguments[2:]) == profile.params
    stated = {
        value for name, value in profile.params if re.fullmatch(r"(READ|WRITE|DENY)_\d+", name)
    }
    assert stated <= {rule.path for rule in rules.rules}


def _skeleton(text: str) -> str:
    return re.sub(r'"([A-Z]+)_\d+', r'"\1_N', text)


@settings(max_examples=200, deadline=None)
@given(rule_sets(globs=False))
def test_policy_text_depends_only_on_structure(rules: RuleSet) -> None:
    """Renaming every path component changes parameter values, never the policy's shape."""
    names = sorted({part for rule in rules.rules for part in rule.path.split("/")[2:]})
    mapping = {name: f"n{index}" for index, name in enumerate(names)}

    def rename(path: str) -> str:
        pieces = path.split("/")
        return "/".join(pieces[:2] + [mapping[piece] for piece in pieces[2:]])

    renamed = replace(
        rules,
        rules=tuple(PathRule(rename(r.path), r.access, r.origin, r.kind) for r in rules.rules),
    )
    assert _skeleton(render_profile(rules).text) == _skeleton(render_profile(renamed).text)


def core_glob_denies(pattern: str, path: str) -> bool:
    """The core's glob semantics (``rules.glob_to_regex``), read with ``.`` matching newlines."""
    with warnings.catch_warnings():
        # The core passes some classes (``[[``) through to ``re``, which warns about them.
        warnings.simplefilter("ignore", FutureWarning)
        return re.fullmatch(glob_to_regex(pattern), path, re.DOTALL) is not None


def _probes(rules: RuleSet) -> set[str]:
    probes = {BASE + "/zz", "/elsewhere"}
    for rule in rules.rules:
        probes |= {rule.path, rule.path.rstrip("/") + "/child"}
    for pattern in rules.deny_globs:
        probes.add(
            pattern.replace("**/", "").replace("*", "x").replace("?", "q").replace("[0-9]", "7")
        )
    return probes


def _found(globs: tuple[str, ...], *paths: str) -> RuleSet:
    """A rule set of the shape hypothesis found: readable paths below /fz and deny globs."""
    rules = tuple(
        PathRule(path, Access.READ, RuleOrigin.ENTRY, PathKind.DIRECTORY) for path in paths
    )
    return RuleSet(
        filesystem_restricted=True, rules=rules, deny_globs=globs, network=NetworkMode.RESTRICTED
    )


@pytest.mark.parametrize("deny_wins", [False, True], ids=["last-match-wins", "deny-wins"])
@settings(max_examples=300, deadline=None)
@given(rules=rule_sets(component=PLAIN_COMPONENT))
# The class "[/[0-9]" spans the "/" of the pattern: it is {"[", 0-9}, and "/fz/*[/child" is not
# denied; the renderer used to read any class with punctuation as any one character.
@example(rules=_found(("/fz/*[/[0-9]*[",), "/fz/*["))
# Siblings: a class of only "/" (matches nothing), a negated and a punctuation class, a
# leading "]", a backslash member, a trailing "-", a reversed range (any one character).
@example(rules=_found(("/fz/a[/]b",), "/fz/axb", "/fz/a"))
@example(rules=_found(("/fz/a[!.]", "/fz/[._]b"), "/fz/a.", "/fz/ab", "/fz/xb", "/fz/.b"))
@example(rules=_found(("/fz/[]x]", "/fz/[\\]"), "/fz/]", "/fz/y", "/fz/\\", "/fz/x"))
@example(rules=_found(("/fz/[a-]", "/fz/[9-0]z"), "/fz/-", "/fz/b", "/fz/!z", "/fz/z"))
# A trailing "/" denies the directory (the core used to deny no normalized path).
@example(rules=_found(("/fz/*/",), "/fz/a", "/fz/a/b"))
def test_profile_means_what_the_rules_say(deny_wins: bool, rules: RuleSet) -> None:
    """Read through the SBPL model (either precedence), the profile grants exactly the rules."""
    profile = render_profile(rules)
    seen = Model(profile.text, dict(profile.params), deny_wins=deny_wins)
    for path in _probes(rules):
        denied = any(core_glob_denies(pattern, path) for pattern in rules.deny_globs)
        expected = Access.DENY if denied else rules.access_of(path)
        assert seen.allows("file-read-data", path) is (expected is not Access.DENY), path
        assert seen.allows("file-write-data", path) is (expected is Access.WRITE), path


@settings(max_examples=300, deadline=None)
@given(networks(), st.lists(st.integers(1, 65535), min_size=1, max_size=4))
def test_network_means_what_the_rules_say(fields: dict[str, object], probes: list[int]) -> None:
    """Through the model: the host loopback ports a command may connect to are exactly the
    route's and ``local_ports`` (proxy), ``local_ports`` (isolated), all (on) or none (off);
    the internet is reachable only with the network on and no route; IPv6 forms of the
    loopback are never a way around the list."""
    rules = RuleSet(filesystem_restricted=False, **fields)  # type: ignore[arg-type]
    seen = Model(render_profile(rules).text, {})
    mode_on = rules.network is NetworkMode.ENABLED
    everything = mode_on and rules.route is None and not rules.isolate_loopback
    listed = loopback_ports(rules)
    for port in {*probes, *listed}:
        expected = everything or port in listed
        for address in ("127.0.0.1", "::1"):
            assert seen.allows("network-outbound", Socket(address, port)) is expected, address
        mapped = seen.allows("network-outbound", Socket("::ffff:127.0.0.1", port))
        assert mapped is everything
    internet = seen.allows("network-outbound", Socket("93.184.216.34", 443))
    assert internet is (mode_on and rules.route is None)
    host_socket = seen.allows("network-outbound", Socket("/private/tmp/tmux-501/default"))
    assert host_socket is everything


# --- deny-glob regexes ----------------------------------------------------------------------

GLOB_CHARS = 'ab/*?[]!^-.\\()|+{}$\n"é09'
PATH_CHARS = 'ab/.\\()|+{}$\n"é09[]!^-'


def emitted_regexes(pattern: str) -> list[str]:
    """The regex parameters the renderer emits for a deny glob ``pattern``."""
    rules = RuleSet(
        filesystem_restricted=True, rules=(PathRule("/", Access.READ),), deny_globs=(pattern,)
    )
    return [value for name, value in render_profile(rules).params if name.startswith("GLOB_")]


def renderer_denies(pattern: str, path: str) -> bool:
    """Whether the emitted regexes deny ``path`` (POSIX reading, via ``ere_search``)."""
    return any(ere_search(regex, path) for regex in emitted_regexes(pattern))


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=GLOB_CHARS, max_size=10), st.text(alphabet=PATH_CHARS, max_size=10))
@example("*[/[0-9]*[", "*[/child")
@example("a[/]b", "a/b")
@example("[!.]", ".")
def test_glob_regex_denies_exactly_what_the_core_denies(pattern: str, path: str) -> None:
    """The emitted regexes deny what the core's glob denies, classes and trailing "/" included."""
    pattern, path = f"{BASE}/{pattern}", f"{BASE}/{path}"
    assert renderer_denies(pattern, path) == core_glob_denies(pattern, path)


@pytest.mark.parametrize(("pattern", "path", "denied"), GLOBS)
def test_glob_regex_examples(pattern: str, path: str, denied: bool) -> None:
    """The core's worked examples (tests/sandbox/test_rules.py) read the same on macOS."""
    assert core_glob_denies(pattern, path) is denied
    assert renderer_denies(pattern, path) is denied


@pytest.mark.parametrize(
    ("pattern", "regex"),
    [
        ("/fz/*[/[0-9]*[", r"^/fz/[^/]*([0-9]|\[)[^/]*\["),
        ("/fz/a[/]b", None),  # no character matches: the glob is not emitted at all
        ("/fz/[._]env", r"^/fz/(\.|_)env"),
        ("/fz/[!.]*", "^/fz/[^./][^/]*"),
        ("/fz/[!]\\.[a-z/-]", "^/fz/[^]./\\\\a-z[-]"),
        ("/fz/[-^]", r"^/fz/(-|\^)"),
        ("/fz/[a-zé]", "^/fz/([a-z]|é)"),
        ("/fz/[à-ÿ]", "^/fz/[à-ÿ]"),
        ("/fz/[9-0]", "^/fz/[^/]"),
        ("/fz/**/secrets/", "^/fz/([^/]*/)*secrets"),
    ],
)
def test_glob_class_spelling(pattern: str, regex: str | None) -> None:
    """Classes become forms POSIX and Python read alike: ASCII punctuation as escaped
    alternatives, negated classes as one bracket with "]" first, "[" late and "-" last."""
    assert glob_to_ere(pattern) == regex
    assert emitted_regexes(pattern) == ([] if regex is None else [regex + "$", regex + "/"])


LITERAL = st.text(alphabet=st.sampled_from('ab.\\()|+{}$\n"é09]^-!'), min_size=1, max_size=4)
SEGMENT = st.text(alphabet=st.sampled_from('ab.\\$\n"é'), max_size=3)


@st.composite
def glob_and_match(draw: st.DrawFn) -> tuple[str, str]:
    """A glob built from pieces, and a path each piece was instantiated for."""
    pattern, path = [BASE, "/"], [BASE, "/"]
    previous = ""
    for _ in range(draw(st.integers(1, 5))):
        # Two stars in a row would read as one "**" (which may need a "/"), so never adjacent.
        kinds = (
            ["literal", "question"]
            if previous in ("star", "globstar")
            else ["literal", "star", "question", "globstar"]
        )
        kind = previous = draw(st.sampled_from(kinds))
        if kind == "literal":
            text = draw(LITERAL)
            pattern.append(text)
            path.append(text)
        elif kind == "star":
            pattern.append("*")
            path.append(draw(SEGMENT))
        elif kind == "question":
            pattern.append("?")
            path.append(draw(SEGMENT.filter(lambda s: len(s) == 1)))
        else:
            pattern.append("**/")
            path.append(
                "".join(
                    f"{segment}/" for segment in draw(st.lists(SEGMENT.filter(bool), max_size=2))
                )
            )
    below = draw(st.sampled_from(["", "/inside", "/a/b"]))
    return "".join(pattern), "".join(path) + below


@settings(max_examples=500, deadline=None)
@given(glob_and_match())
def test_glob_regex_denies_what_the_glob_names(pair: tuple[str, str]) -> None:
    """A path the glob names (or anything below it) is denied, escapes notwithstanding."""
    pattern, path = pair
    assert renderer_denies(pattern, path)


@given(COMPONENT, st.integers(0x80, 0xFF))
def test_undecodable_bytes_are_refused(component: str, byte: int) -> None:
    """A path carrying a byte that is not UTF-8 is refused, and the message shows the byte."""
    path = f"{BASE}/{component}{chr(0xDC00 + byte)}"
    rules = RuleSet(
        filesystem_restricted=True, rules=(PathRule("/", Access.READ), PathRule(path, Access.WRITE))
    )
    with pytest.raises(SandboxUnavailable) as caught:
        render_profile(rules)
    assert f"\\x{byte:02x}" in caught.value.message
