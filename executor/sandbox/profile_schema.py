"""The JSON Schema of a profile file (``profile.schema.json``) and structural validation by it.

The schema is the structure of one file, as editors and other tools see it: the keys, their
types and allowed values. ``executor profile check`` validates against it, then compiles the
profile (``executor.sandbox.profiles``), which also knows what a schema cannot: what
``extends`` names, cycles, the host. Both report every problem; where both find one at the
same key, the compiler's wording is kept (``merge_problems``).

``jsonschema`` is imported only when a file is validated: loading profiles to run a command
does not need it.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Final

from executor.sandbox.profile_parse import Problem
from executor.sandbox.profiles import Profile, ProfileLibrary, read_file

__all__ = ["SCHEMA_FILE", "check_file", "merge_problems", "schema", "schema_problems"]

SCHEMA_FILE: Final = "profile.schema.json"
_BARE_KEY: Final = re.compile(r"^[A-Za-z0-9_-]+$")


@cache
def _schema_text() -> str:
    return resources.files("executor.sandbox").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


def schema() -> dict[str, Any]:
    """The schema, parsed (a fresh copy)."""
    loaded: dict[str, Any] = json.loads(_schema_text())
    return loaded


def _key(path: list[str | int]) -> str:
    """A key path as the compiler writes it: ``limits.memory``, ``filesystem."~/.ssh"``."""
    out = ""
    for depth, part in enumerate(path):
        if isinstance(part, int):
            out += f"[{part}]"
        elif depth == 0:
            out = part
        elif path[0] == "filesystem" or not _BARE_KEY.match(part):
            out += f'."{part}"'
        else:
            out += f".{part}"
    return out


def _subschema(error: Any) -> dict[str, Any]:
    """The part of the schema an error broke (every part of ours is an object)."""
    return error.schema if isinstance(error.schema, dict) else {}


def _extra_keys(error: Any) -> list[str]:
    """The keys an ``additionalProperties: false`` error is about (not named in its path)."""
    instance, known = error.instance, _subschema(error).get("properties", {})
    patterns = [re.compile(p) for p in _subschema(error).get("patternProperties", {})]
    return [
        key
        for key in instance
        if key not in known and not any(pattern.search(key) for pattern in patterns)
    ]


def schema_problems(data: dict[str, Any], source: str) -> list[Problem]:
    """Every place where ``data`` (one parsed profile file) breaks the schema."""
    import jsonschema

    loaded = schema()
    validator = jsonschema.validators.validator_for(loaded)(loaded)  # by its "$schema"
    problems: list[Problem] = []
    errors: list[Any] = list(validator.iter_errors(data))
    for error in sorted(errors, key=lambda e: list(map(str, e.path))):
        path: list[str | int] = list(error.absolute_path)
        if error.validator == "additionalProperties" and (
            _subschema(error).get("additionalProperties") is False
        ):
            problems += [
                Problem(source, _key([*path, key]), "not allowed here (schema)")
                for key in _extra_keys(error)
            ]
        elif "propertyNames" in error.absolute_schema_path:
            # A key itself is wrong: name it, and say what keys must be.
            message = _subschema(error).get("description") or error.message
            problems.append(Problem(source, _key([*path, error.instance]), f"{message} (schema)"))
        else:
            problems.append(Problem(source, _key(path), f"{_message(error)} (schema)"))
    return problems


def _message(error: Any) -> str:
    """jsonschema's message, or what the value should have been where the schema says."""
    description = _subschema(error).get("description")
    if error.validator in ("anyOf", "oneOf", "not", "pattern") and description:
        return f"expected {description}, got {error.instance!r}"
    return str(error.message)


def _related(a: str, b: str) -> bool:
    """``a`` and ``b`` are the same key, or one lies inside the other."""
    if a == b or not a or not b:
        return a == b
    return b.startswith((a + ".", a + "[")) or a.startswith((b + ".", b + "["))


def merge_problems(structural: list[Problem], compiled: list[Problem]) -> list[Problem]:
    """The compiler's problems, then the schema's at keys the compiler said nothing about."""
    sources = {problem.source for problem in structural}
    keys = [problem.key for problem in compiled if problem.source in sources]
    extra = [
        problem for problem in structural if not any(_related(problem.key, key) for key in keys)
    ]
    return [*compiled, *extra]


def check_file(library: ProfileLibrary, path: Path) -> tuple[Profile | None, list[Problem]]:
    """``executor profile check``: the schema's and the compiler's problems with ``path``, and
    the profile when there are none."""
    raw, _ = read_file(path)
    structural = schema_problems(raw.data, str(path)) if raw is not None else []
    profile, compiled = library.check(path)
    problems = merge_problems(structural, compiled)
    return (profile if not problems else None), problems
