"""The TOML text environmentConfig/read returns, byte for byte as the reference writes it.

Every expected text below is what Codex exec-server 0.171.0 returned for the same input
(a user config.toml selected by the key paths shown); see docs/environment-config.md.
"""

from __future__ import annotations

import pytest

from executor.environment_config.selection import Selector
from executor.environment_config.toml_read import TomlError, parse
from executor.environment_config.toml_text import dumps

A = [["a"]]

RENDERED = [
    # strings: the first form that needs no escapes
    ('a = "plain"\n', A, 'a = "plain"\n'),
    ('a = "with \\"quote\\""\n', A, "a = 'with \"quote\"'\n"),
    ('a = "back\\\\slash"\n', A, "a = 'back\\slash'\n"),
    ('a = "line1\\nline2"\n', A, 'a = """\nline1\nline2"""\n'),
    ('a = "tab\\there"\n', A, 'a = "tab\\there"\n'),
    ('a = "ctl\\u0001x\\u007f"\n', A, 'a = "ctl\\u0001x\\u007F"\n'),
    ('a = "both \' and \\""\n', A, 'a = """both \' and """"\n'),
    ('a = """\nmulti\nline "q" \\\\ end"""\n', A, "a = '''\nmulti\nline \"q\" \\ end'''\n"),
    ('a = "cr\\r\\nx"\n', A, 'a = """\ncr\\r\nx"""\n'),
    ('a = "has \\"\\"\\" dq\\nand \'\'\' sq"\n', A, 'a = """\nhas ""\\" dq\nand \'\'\' sq"""\n'),
    ('a = "x\\"\\"\\"y\\nz\\\\"\n', A, "a = '''\nx\"\"\"y\nz\\'''\n"),
    ('a = "it\'s"\n', A, 'a = "it\'s"\n'),
    # numbers, booleans, datetimes
    ("a = 0x1F\n", A, "a = 31\n"),
    ("a = 1e-7\n", A, "a = 0.0000001\n"),
    ("a = 1e16\n", A, "a = 10000000000000000.0\n"),
    ("a = -0.0\n", A, "a = -0.0\n"),
    ("a = -nan\n", A, "a = nan\n"),
    ("a = -inf\n", A, "a = -inf\n"),
    ("a = 1979-05-27 07:32:00.5+01:00\n", A, "a = 1979-05-27T07:32:00.5+01:00\n"),
    ("a = 1979-05-27T07:32:00Z\n", A, "a = 1979-05-27T07:32:00Z\n"),
    ("a = 07:32:00\n", A, "a = 07:32:00\n"),
    # arrays and tables
    ("a = [[1, 2], []]\n", A, "a = [[1, 2], []]\n"),
    ("a = [{x = 1}, {y = 2}]\n", A, "[[a]]\nx = 1\n\n[[a]]\ny = 2\n"),
    ("a = [{x = 1}, 5, {y = {z = 2}}, {}]\n", A, "a = [{ x = 1 }, 5, { y = { z = 2 } }, {}]\n"),
    ("a = {}\n", A, "[a]\n"),
    ("[a]\n[a.x]\n[a.y]\nv = 1\n", A, "[a.x]\n\n[a.y]\nv = 1\n"),
    ("a.b.c = 1\na.x = 2\n", A, "[a]\nx = 2\n\n[a.b]\nc = 1\n"),
    (
        '[a]\nt1 = {p = 1}\nat2 = [{q = 1}, {q = 2}]\nt3 = {r = 1}\ns = "last"\n',
        A,
        '[a]\ns = "last"\n\n[a.t1]\np = 1\n\n'
        "[[a.at2]]\nq = 1\n\n[[a.at2]]\nq = 2\n\n[a.t3]\nr = 1\n",
    ),
    ("[[a]]\n[[a.b]]\nc = 1\n[[a]]\n", A, "[[a]]\n\n[[a.b]]\nc = 1\n\n[[a]]\n"),
    # keys
    (
        '[a]\n"key with space" = 1\n"" = 2\n"quote\\"k" = 3\n\'lit\' = 4\n"tab\\tk" = 5\n',
        A,
        '[a]\n"key with space" = 1\n"" = 2\n\'quote"k\' = 3\nlit = 4\n"tab\\tk" = 5\n',
    ),
    ('[a."weird key".b]\nc = 1\n', A, '[a."weird key".b]\nc = 1\n'),
    ("\ufeffa = 1\n", A, "a = 1\n"),
]


@pytest.mark.parametrize(("source", "paths", "expected"), RENDERED)
def test_rendering_matches_the_reference(
    source: str, paths: list[list[str]], expected: str
) -> None:
    selected = Selector.of(paths).select(parse(source))
    assert selected is not None
    assert dumps(selected) == expected


LIMITS = [
    ("a = " + "[" * 80 + "]" * 80 + "\n", None),
    (
        "a = " + "[" * 81 + "]" * 81 + "\n",
        (1, 85, "cannot recurse further; max recursion depth met"),
    ),
    ("a = " + "[" * 5000 + "]" * 5000 + "\n", (1, 85, "cannot recurse further")),
    ("x = 1\n# c\na = [\n" + "[\n" * 85 + "]" * 86 + "\n", (83, 1, "cannot recurse further")),
    ("a = " + "[{b = " * 40 + "[1]" + "}]" * 40 + "\n", (1, 245, "cannot recurse further")),
    ("[" + ".".join(["k"] * 80) + "]\n", None),
    ("[" + ".".join(["k"] * 81) + "]\n", (None, 1, "recursion limit")),
    ("a = { " + ".".join(["k"] * 81) + " = 1 }\n", (None, 1, "recursion limit")),
    ("a = 9223372036854775807\nb = -9223372036854775808\n", None),
    ("a = 1\nb = 0x8000000000000000\n", (2, 5, "invalid type: integer `9223372036854775808`")),
    ('s = "[[[[ 99999999999999999999"\n', None),
]


@pytest.mark.parametrize(("source", "error"), LIMITS)
def test_the_reference_parsers_limits(
    source: str, error: tuple[int | None, int, str] | None
) -> None:
    if error is None:
        parse(source)
        return
    with pytest.raises(TomlError) as caught:
        parse(source)
    line, column, message = error
    assert (caught.value.line, caught.value.column) == (line, column)
    assert caught.value.message.startswith(message)


def test_syntax_errors_carry_a_position_for_the_snippet() -> None:
    with pytest.raises(TomlError) as caught:
        parse("".join(f"p{i} = {i}\n" for i in range(11)) + "x = = 1\n")
    snippet = caught.value.snippet()
    assert snippet.startswith("TOML parse error at line 12, column 5\n   |\n12 | x = = 1\n")
    assert snippet.split("\n")[3] == "   |     ^"
