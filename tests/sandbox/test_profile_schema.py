"""The profile schema (executor/sandbox/profile.schema.json): a valid JSON Schema that every
shipped profile and every example in docs/profiles.md and the README satisfies, that rejects
what the compiler rejects, and that ``profile check`` combines with the compiler."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import jsonschema
import pytest

from executor.sandbox.profile_schema import check_file, schema, schema_problems
from executor.sandbox.profiles import ProfileLibrary, default_library, shipped_directory
from tests.sandbox.test_profiles import BAD

ROOT = Path(__file__).resolve().parents[2]
#: A ```toml block whose first line is a comment naming its file: ``# name.toml``.
_BLOCK = re.compile(r"```toml\n# (?:[\w./-]*/)?([\w-]+)\.toml\b[^\n]*\n(.*?)```", re.DOTALL)


def examples(document: Path) -> dict[str, str]:
    """Each example profile of ``document``, by file name."""
    text = document.read_text(encoding="utf-8")
    found = {name: body for name, body in _BLOCK.findall(text)}
    assert len(found) == text.count("```toml"), f"a toml block of {document} names no file"
    return found


def test_the_schema_is_a_valid_json_schema() -> None:
    """Draft 7, which TOML editors' language servers read; the copy shipped as package data."""
    assert schema()["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema())
    assert (ROOT / "executor/sandbox/profile.schema.json").is_file()
    assert '"executor.sandbox" = ["profile.schema.json"]' in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize("path", sorted(shipped_directory().glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_profile_satisfies_the_schema_and_loads(path: Path) -> None:
    """No problem from either side."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    assert schema_problems(data, str(path)) == []
    profile, problems = check_file(default_library(), path)
    assert problems == [] and profile is not None and profile.shipped


@pytest.mark.parametrize("document", ["docs/profiles.md", "README.md"])
def test_every_documented_example_satisfies_the_schema_and_loads(
    document: str, tmp_path: Path
) -> None:
    """The examples are written out as files side by side (they may extend each other) and
    each one is checked as `executor profile check` would."""
    found = examples(ROOT / document)
    assert found, f"{document} has no example profile"
    for name, body in found.items():
        (tmp_path / f"{name}.toml").write_text(body, encoding="utf-8")
    library = ProfileLibrary([shipped_directory(), tmp_path])
    for name in found:
        path = tmp_path / f"{name}.toml"
        assert schema_problems(tomllib.loads(found[name]), str(path)) == [], name
        profile, problems = check_file(library, path)
        assert problems == [] and profile is not None, name


SCHEMA_CANNOT_KNOW = {"bad-toml", "unknown-parent"}  # not TOML at all; another file's name


@pytest.mark.parametrize(
    "text",
    [case[1] for case in BAD if case[0] not in SCHEMA_CANNOT_KNOW],
    ids=[case[0] for case in BAD if case[0] not in SCHEMA_CANNOT_KNOW],
)
def test_the_schema_rejects_what_the_compiler_rejects(text: str) -> None:
    """Every structural mistake the compiler names, the schema names at the same key."""
    problems = schema_problems(tomllib.loads(text), "bad.toml")
    assert problems, text
    assert all(problem.message.endswith("(schema)") for problem in problems)


def test_check_keeps_the_compilers_wording_and_adds_what_only_the_schema_sees(
    tmp_path: Path,
) -> None:
    """A key both flag is reported once, in the compiler's words; a table a disabled profile
    ignores is still checked by the schema."""
    path = tmp_path / "mixed.toml"
    path.write_text(
        'type = "disabled"\ncolour = 1\n[filesystem]\n"relative" = "read"\n', encoding="utf-8"
    )
    profile, problems = check_file(ProfileLibrary([shipped_directory()]), path)
    assert profile is None
    assert [(problem.key, problem.message) for problem in problems] == [
        ("colour", problems[0].message),
        ('filesystem."relative"', "not allowed here (schema)"),
    ]
    assert problems[0].message.startswith("unknown key (known: ")


def test_key_paths_match_the_compilers() -> None:
    """Nested keys are written as the compiler writes them, so both can be compared."""
    text = (
        '[filesystem.":workspace_roots"]\n"../up" = "write"\n"**/*.env" = "read"\n'
        '[limits]\nmemory = "lots"\n'
    )
    keys = [problem.key for problem in schema_problems(tomllib.loads(text), "f.toml")]
    assert keys == [
        'filesystem.":workspace_roots"."../up"',
        'filesystem.":workspace_roots"."**/*.env"',
        "limits.memory",
    ]
