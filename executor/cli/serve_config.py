"""``executor serve --config FILE``: serve's options from a TOML file.

Each key is an option's long name without the leading ``--`` (``session-ttl = 80``); a
repeatable option takes a list, a switch ``true`` or ``false``. The file's values become
the parser's defaults, after each went through the option's own ``type`` and ``choices``,
so a value means what it means on the command line, and an option given on the command
line still wins (a repeatable one replaces the file's whole list).
"""

from __future__ import annotations

import argparse
import difflib
import tomllib
from collections.abc import Sequence

from executor.cli.serve_options import CONFIG_VALUE_TYPES
from executor.errors import ConfigError

__all__ = ["config_keys", "parse_with_config", "read_config"]

#: Options a file cannot set: --config itself (files do not include files) and --help.
_NOT_IN_FILE = frozenset({"config", "help"})

_TOML_TYPE_NAMES = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "a table",
}


def config_keys(serve: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every key a config file may hold, with the option it sets, in ``--help`` order."""
    keys: dict[str, argparse.Action] = {}
    for action in serve._actions:
        long_names = [name for name in action.option_strings if name.startswith("--")]
        if long_names and long_names[0][2:] not in _NOT_IN_FILE:
            keys[long_names[0][2:]] = action
    return keys


def read_config(path: str, serve: argparse.ArgumentParser) -> dict[str, object]:
    """The file's values, each checked and converted as its option would be, by ``dest``.

    Raises ``ConfigError`` naming the file (and the key) for a file that cannot be read,
    is not TOML, or holds an unknown key or a value its option would refuse.
    """
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    keys = config_keys(serve)
    values: dict[str, object] = {}
    for key, value in document.items():
        action = keys.get(key)
        if action is None:
            raise ConfigError(f"{path}: unknown key {key!r}{_suggestion(key, keys)}")
        try:
            values[action.dest] = _convert(action, value)
        except ValueError as exc:
            raise ConfigError(f"{path}: {key}: {exc}") from None
    return values


def parse_with_config(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed again with the values of serve's ``--config`` file as defaults.

    Options given on the command line are left out of the defaults: for a repeatable one,
    argparse would otherwise add the command line's items to the file's list.
    """
    argv = list(argv)
    args = parser.parse_args(argv)
    if args.command != "serve" or args.config is None:
        return args
    serve = _subparser(parser, "serve")
    values = read_config(args.config, serve)
    given = _given(serve, argv[argv.index("serve") + 1 :])
    serve.set_defaults(**{dest: value for dest, value in values.items() if dest not in given})
    return parser.parse_args(argv)


def _convert(action: argparse.Action, value: object) -> object:
    if isinstance(action, argparse._StoreConstAction) and isinstance(action.const, bool):
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, found {_describe(value)}")
        return action.const if value else not action.const
    if isinstance(action, argparse._AppendAction):
        if not isinstance(value, list):
            raise ValueError(
                f"expected a list (the option is repeatable), found {_describe(value)}"
            )
        return [_scalar(action, item) for item in value]
    if type(action) is argparse._StoreAction and action.nargs is None:
        return _scalar(action, value)
    raise ValueError("this option cannot be set in a config file")


def _scalar(action: argparse.Action, value: object) -> object:
    """One value, as the option's ``type`` and ``choices`` take it from the command line."""
    kinds = CONFIG_VALUE_TYPES.get(action.type, (str,)) if callable(action.type) else (str,)
    if isinstance(value, bool) or not isinstance(value, kinds):
        expected = _TOML_TYPE_NAMES[float] if float in kinds else _TOML_TYPE_NAMES[kinds[0]]
        raise ValueError(f"expected {expected}, found {_describe(value)}")
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(repr(choice) for choice in action.choices)
        raise ValueError(f"invalid choice {value!r} (choose from {choices})")
    if not callable(action.type):
        return value
    try:
        return action.type(str(value))
    except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from None


def _describe(value: object) -> str:
    name = _TOML_TYPE_NAMES.get(type(value), type(value).__name__)
    if isinstance(value, list | dict):
        return name
    return f"{name} ({value!r})"


def _suggestion(key: str, keys: dict[str, argparse.Action]) -> str:
    close = difflib.get_close_matches(key.replace("_", "-"), keys, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return " (keys are serve's long options without the leading --; see executor serve --help)"


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]  # type: ignore[no-any-return]
    raise LookupError(name)


def _given(serve: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The ``dest`` of every option ``argv`` gives.

    argparse fills in a default only for what the namespace lacks, so a namespace that
    already holds None for every option comes back with values only where one was given.
    """
    blank = argparse.Namespace(**{action.dest: None for action in serve._actions})
    parsed = serve.parse_args(list(argv), namespace=blank)
    return {dest for dest, value in vars(parsed).items() if value is not None}
