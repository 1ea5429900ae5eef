"""The core's glob semantics (``rules.glob_to_regex``, ``rules.glob_class``): what a deny glob
means on every backend. The macOS renderer translates the same reading (its tests compare)."""

from __future__ import annotations

import re
import warnings

import pytest

from executor.protocol.intent import Access
from executor.sandbox.rules import GlobClass, PathRule, RuleSet, glob_class, glob_to_regex

GLOBS = [
    # A class spans a "/" written inside it, but never matches one: "[/[0-9]" is {[, 0-9}
    # (the first example hypothesis found: the macOS renderer read it as any one character).
    ("/fz/*[/[0-9]*[", "/fz/*[/child", False),
    ("/fz/*[/[0-9]*[", "/fz/a[x[", True),
    ("/fz/*[/[0-9]*[", "/fz/a7[", True),
    ("/fz/*[/[0-9]*[", "/fz/a7[/below", True),
    ("/fz/*[/[0-9]*[", "/fz/a/x[", False),
    # A class of nothing but "/" matches no character at all: the glob names nothing.
    ("/fz/a[/]b", "/fz/a/b", False),
    ("/fz/a[/]b", "/fz/axb", False),
    ("/fz/[/-/]", "/fz/x", False),
    # A range through "/" keeps the rest of the range.
    ("/fz/[.-0]", "/fz/.", True),
    ("/fz/[.-0]", "/fz/0", True),
    ("/fz/a[.-0]b", "/fz/a/b", False),
    # A negated class never matches "/" either, listed or not.
    ("/fz/a[!x]b", "/fz/a/b", False),
    ("/fz/a[!/]b", "/fz/a/b", False),
    ("/fz/a[!/]b", "/fz/a.b", True),
    ("/fz/a[^.]", "/fz/a.", False),
    ("/fz/a[^.]", "/fz/ab", True),
    # Punctuation members mean themselves (and nothing else).
    ("/fz/[._]env", "/fz/.env", True),
    ("/fz/[._]env", "/fz/_env", True),
    ("/fz/[._]env", "/fz/xenv", False),
    ("/fz/[]a]", "/fz/]", True),
    ("/fz/[]a]", "/fz/b", False),
    ("/fz/[!]a]", "/fz/b", True),
    ("/fz/[!]a]", "/fz/]", False),
    ("/fz/[a-]", "/fz/-", True),
    ("/fz/[a-]", "/fz/b", False),
    ("/fz/[\\]", "/fz/\\", True),
    ("/fz/[\\]]", "/fz/]", False),  # "[\\]" then a literal "]": backslash escapes nothing
    ("/fz/[\\]]", "/fz/\\]", True),
    ("/fz/[+--]", "/fz/,", True),  # a range ending in "-" (re would warn about "--")
    ("/fz/[+--]", "/fz/.", False),
    ("/fz/[a-c-e]", "/fz/-", True),
    ("/fz/[a-c-e]", "/fz/d", False),
    ("/fz/[\n]", "/fz/\n", True),
    # An impossible class is any one character of a component (deny more, never less).
    ("/fz/[9-0]", "/fz/x", True),
    ("/fz/a[9-0]b", "/fz/a/b", False),
    # An unclosed "[" is an ordinary character.
    ("/fz/a[b", "/fz/a[b", True),
    ("/fz/a[b", "/fz/ab", False),
    ("/fz/[!]", "/fz/[!]", True),
    # A trailing "/" (git: directories only) denies the path and what is below it.
    ("/fz/*/", "/fz/dir", True),
    ("/fz/*/", "/fz/dir/below", True),
    ("/fz/**/secrets/", "/fz/a/secrets", True),
    ("/fz/**/secrets/", "/fz/secrets/key", True),
    ("/fz/**/secrets/", "/fz/secretsx", False),
    ("/", "/anything/at/all", True),
    ("/", "/", True),
]


def core_denies(pattern: str, path: str) -> bool:
    return RuleSet(filesystem_restricted=True, deny_globs=(pattern,)).denied_by_glob(path)


@pytest.mark.parametrize(("pattern", "path", "denied"), GLOBS)
def test_glob_semantics(pattern: str, path: str, denied: bool) -> None:
    """Each glob denies exactly what it names, and re reads its regex without a warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        regex = re.compile(glob_to_regex(pattern))
    assert (regex.match(path) is not None) is denied
    assert core_denies(pattern, path) is denied


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("[/[0-9]", GlobClass(negated=False, ranges=(("0", "9"), ("[", "[")))),
        ("[/]", GlobClass(negated=False, ranges=())),
        ("[!a]", GlobClass(negated=True, ranges=(("/", "/"), ("a", "a")))),
        ("[^.-0]", GlobClass(negated=True, ranges=((".", "0"),))),
        ("[9-0]", GlobClass(negated=True, ranges=(("/", "/"),))),
        ("[]a-cb]", GlobClass(negated=False, ranges=(("]", "]"), ("a", "c")))),
        ("[a-]", GlobClass(negated=False, ranges=(("-", "-"), ("a", "a")))),
    ],
)
def test_glob_class_reads_the_character_set(pattern: str, expected: GlobClass) -> None:
    """Classes are read into sorted, merged ranges; "/" only ever as an exclusion."""
    assert glob_class(pattern, 0) == (expected, len(pattern))


def test_unclosed_class_is_not_a_class() -> None:
    assert glob_class("[ab", 0) is None
    assert glob_class("[]", 0) is None
    assert glob_class("[!]", 0) is None


def test_glob_class_matches_one_character_never_a_slash() -> None:
    klass, _end = glob_class("[!a]", 0) or (None, 0)
    assert klass is not None
    assert klass.matches("b") and not klass.matches("a") and not klass.matches("/")
    plain, _end = glob_class("[/a]", 0) or (None, 0)
    assert plain is not None
    assert plain.matches("a") and not plain.matches("/")


def test_trailing_slash_glob_is_enforced_through_effective_access() -> None:
    """`**/secrets/` denies the directory on every backend that asks the rule set."""
    rules = RuleSet(
        filesystem_restricted=True,
        rules=(PathRule("/", Access.READ),),
        deny_globs=("/ws/**/secrets/",),
    )
    assert rules.effective("/ws/a/secrets/key") is Access.DENY
    assert rules.effective("/ws/a/secrets") is Access.DENY
    assert rules.effective("/ws/a/public") is Access.READ
