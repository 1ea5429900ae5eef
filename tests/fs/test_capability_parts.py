"""The pure parts of capability discovery, checked against answers of the reference (v0.171.0):
how it spells a root's URI, how it reads a manifest's declarations, how it words bad UTF-8."""

from __future__ import annotations

import pytest

from executor.fs.capability_reads import utf8_problem
from executor.fs.plugin_declarations import Declarations, read_declarations
from executor.protocol.capability_messages import child_uri, echo_uri

MANIFEST = "file:///p/.codex-plugin/plugin.json"


@pytest.mark.parametrize(
    ("sent", "shown"),
    [
        ("file:///t/d", "file:///t/d"),
        ("file:///t/d/", "file:///t/d/"),
        ("file:///t/d/.", "file:///t/d/"),
        ("file:///t/d/%2e", "file:///t/d/"),
        ("file:///t/d/../d", "file:///t/d"),
        ("file:///t/d/x/..", "file:///t/d/"),
        ("file:///t/d/%2E%2e/e", "file:///t/e"),
        ("file:///t/./d", "file:///t/d"),
        ("file:///t//d", "file:///t//d"),
        ("file:///t/d//", "file:///t/d//"),
        ("file:////t/d", "file:///t/d"),
        ("file://localhost/t/d", "file:///t/d"),
        ("FILE://LOCALHOST/t/d", "file:///t/d"),
        ("file:/t/d", "file:///t/d"),
        ("file:///t/%41", "file:///t/%41"),
        ("file:///t/%c3%a9", "file:///t/%c3%a9"),
        ("file:///t/é", "file:///t/%C3%A9"),
        ("file:///t/a b", "file:///t/a%20b"),
        ('file:///t/a"b{c}`', "file:///t/a%22b%7Bc%7D%60"),
        ("file:///t/a[b]^c|d", "file:///t/a[b]^c|d"),
        ("file:///t/x\\y", "file:///t/x/y"),
        ("FILE://OtherHost/a/../b", "file://otherhost/b"),
        ("file:///C:/x", "file:///C:/x"),
    ],
)
def test_root_uris_are_spelled_as_the_reference_spells_them(sent: str, shown: str) -> None:
    """WHATWG serialization: what the reference echoes as a root's ``path``."""
    assert echo_uri(sent) == shown


def test_children_extend_the_roots_spelling() -> None:
    """A trailing slash is not doubled; an empty segment is kept."""
    assert child_uri("file:///t/d", "/SKILL.md") == "file:///t/d/SKILL.md"
    assert child_uri("file:///t/d/", "/SKILL.md") == "file:///t/d/SKILL.md"
    assert child_uri("file:///t/d//", "/s") == "file:///t/d//s"
    assert child_uri("file:///", "/s") == "file:///s"


def _depth(count: int, value: str = "[]") -> str:
    return "[" * (count - 1) + value + "]" * (count - 1)


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        ('{"mcpServers":"./m.json","apps":"./a.json"}', Declarations("m.json", False, "a.json")),
        ('{"mcpServers":{"x":{}},"apps":{}}', Declarations(None, True, None)),
        ('{"mcpServers":null,"apps":5}', Declarations()),
        ('["./m.json"]', Declarations("m.json")),
        ('[null, "./a.json"]', Declarations(apps_config="a.json")),
        ('[{"a":1}]', Declarations(mcp_inline=True)),
        ('["./m.json", null, 3]', Declarations()),
        ("[]", Declarations()),
        ("null", Declarations()),
        ('"./m.json"', Declarations()),
        ("{not json", Declarations()),
        ('{"mcpServers":"./m.json"} x', Declarations()),
        ('\ufeff{"mcpServers":"./m.json"}', Declarations()),
        (' \n{"mcpServers":"./m.json"}\n ', Declarations("m.json")),
        ('{"mcpServers":"./m\tjson"}', Declarations()),
        ('{"mcpServers":"./m\\u002ejson"}', Declarations("m.json")),
        ('{"mcpServers":"./m.json","x":NaN}', Declarations()),
        ('{"mcpServers":"./m.json","x":1e400,"y":"\\ud800"}', Declarations("m.json")),
        ('{"mcpServers":"./m\\ud800.json"}', Declarations()),
        ('{"mcpServers":[1e400],"apps":"./a.json"}', Declarations(apps_config="a.json")),
        ('{"apps":"./a.json","apps":"./a.json"}', Declarations()),
        ('{"x":1,"x":2,"apps":"./a.json"}', Declarations(apps_config="a.json")),
        ('{"mcpServers":{"a":1,"a":2}}', Declarations(mcp_inline=True)),
        ('{"mcpServers":"./x/./m.json/"}', Declarations("x/m.json")),
        ('{"mcpServers":"./."}', Declarations(".")),
        (
            '{"mcpServers":' + _depth(126) + ',"apps":"./a.json"}',
            Declarations(None, False, "a.json"),
        ),
        ('{"mcpServers":' + _depth(127) + ',"apps":"./a.json"}', Declarations()),
        ('{"mcpServers":"./m.json","x":' + _depth(300) + "}", Declarations("m.json")),
    ],
)
def test_declarations_are_read_as_serde_reads_them(manifest: str, expected: Declarations) -> None:
    """Which manifests lead to which files (no warnings for any of these)."""
    warnings: list[str] = []
    assert read_declarations(manifest, MANIFEST, warnings) == expected
    assert warnings == []


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("m.json", "path must start with `./`"),
        ("/etc/hostname", "path must start with `./`"),
        ("./", "path must remain below the capability root"),
        ("./../m.json", "path must remain below the capability root"),
        ("./a/../m.json", "path must remain below the capability root"),
        ("./a\\\\..\\\\m.json", "path must remain below the capability root"),
        (".//etc/hostname", "path must remain below the capability root"),
        ("./a\\u0000b", "path must remain below the capability root"),
    ],
)
def test_declared_paths_must_stay_below_the_root(value: str, reason: str) -> None:
    """A rejected path is ignored with the reference's warning, naming the manifest."""
    warnings: list[str] = []
    declared = read_declarations(f'{{"apps":"{value}"}}', MANIFEST, warnings)
    assert declared == Declarations()
    assert warnings == [f"ignoring apps in {MANIFEST}: {reason}"]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"ab\xff", "invalid utf-8 sequence of 1 bytes from index 2"),
        (b"ab\xe2\x82", "incomplete utf-8 byte sequence from index 2"),
        (b"ab\xe2\x82x", "invalid utf-8 sequence of 2 bytes from index 2"),
        (b"\xed\xa0\x80", "invalid utf-8 sequence of 1 bytes from index 0"),
        (b"\xf0\x90\x80", "incomplete utf-8 byte sequence from index 0"),
        (b"\xf0\x90\x80x", "invalid utf-8 sequence of 3 bytes from index 0"),
        (b"\xc0\x80", "invalid utf-8 sequence of 1 bytes from index 0"),
        (b"\xf4\x90\x80\x80", "invalid utf-8 sequence of 1 bytes from index 0"),
        (b"a\xe2", "incomplete utf-8 byte sequence from index 1"),
        (b"\xef\xbb\xbf{} ok\x00", None),
    ],
)
def test_utf8_problems_are_worded_as_rust_words_them(data: bytes, problem: str | None) -> None:
    """``String::from_utf8``'s error text, as the reference's warnings show it."""
    assert utf8_problem(data) == problem
