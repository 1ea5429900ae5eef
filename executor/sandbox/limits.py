"""Resource limits of sandboxed commands: the typed value, its text forms, the defaults (pure).

A ``ResourceLimits`` caps one sandboxed command (its whole process tree where the backend can
count a tree, each process otherwise); ``None`` means no limit. Profiles set them in a
``[limits]`` table and ``executor serve --limit NAME=VALUE`` sets the daemon's; both read the
same text forms (``parse_limit``):

* ``processes``, ``open_files``: a positive integer;
* ``memory``, ``file_size``: bytes, as an integer or ``"512MiB"``, ``"4GiB"``, ``"2G"``
  (``K``/``M``/``G``/``T`` and ``KiB``… are powers of 1024, ``KB``… of 1000); ``memory`` also
  takes a share of this host's physical memory, ``"50%"``;
* ``cpu_time``: seconds, as an integer or ``"90s"``, ``"10m"``, ``"2h"``;
* ``"unlimited"`` for any of them: no limit.

The defaults (``DEFAULT_LIMITS_TEXT``, applied by ``default_limits``) stop a fork bomb and a
memory hog while a parallel build still fits; docs/sandbox.md ("Resource limits") says why
each value, and why file size and CPU time are not capped by default.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Final

__all__ = [
    "DEFAULT_LIMITS_TEXT",
    "LIMIT_NAMES",
    "ResourceLimits",
    "default_limits",
    "format_size",
    "parse_assignment",
    "parse_limit",
    "parse_limits",
]

#: Every limit, in the order reports list them.
LIMIT_NAMES: Final = ("processes", "memory", "open_files", "file_size", "cpu_time")
_SIZES: Final = frozenset({"memory", "file_size"})
#: The daemon's defaults, in the form a profile's ``[limits]`` table writes them.
DEFAULT_LIMITS_TEXT: Final[Mapping[str, str | int]] = {
    "processes": 2048,
    "memory": "50%",
    "open_files": 65536,
}
_UNITS: Final = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 10**3,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 10**6,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 10**9,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 10**12,
}
_SECONDS: Final = {"": 1, "s": 1, "m": 60, "h": 3600}
_NUMBER: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
_PERCENT: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceLimits:
    """Caps for one sandboxed command; ``None`` = no limit.

    ``processes`` counts tasks (threads too, as the kernel does); ``memory`` and ``file_size``
    are bytes; ``cpu_time`` is seconds of CPU per process (all of its threads together).
    """

    processes: int | None = None
    memory: int | None = None
    open_files: int | None = None
    file_size: int | None = None
    cpu_time: int | None = None

    def __post_init__(self) -> None:
        for name, value in self.items():
            if type(value) is not int or value <= 0:
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")

    def items(self) -> Iterator[tuple[str, int]]:
        """``(name, value)`` of every limit that is set, in ``LIMIT_NAMES`` order."""
        for name in LIMIT_NAMES:
            value = getattr(self, name)
            if value is not None:
                yield name, value

    def replace(self, **changes: int | None) -> ResourceLimits:
        """A copy with ``changes`` applied (``None`` removes a limit)."""
        return dataclasses.replace(self, **changes)

    def describe(self, name: str) -> str:
        """One limit's value as people write it (``memory=4GiB``)."""
        value = getattr(self, name)
        if value is None:
            return f"{name}=unlimited"
        if name in _SIZES:
            return f"{name}={format_size(value)}"
        if name == "cpu_time":
            return f"{name}={value}s"
        return f"{name}={value}"

    def summary(self) -> str:
        """Every limit that is set, or ``none``."""
        return ", ".join(self.describe(name) for name, _ in self.items()) or "none"


def format_size(size: int) -> str:
    """``size`` bytes in the largest binary unit that divides it exactly."""
    for unit, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


@cache
def physical_memory() -> int:
    """Bytes of physical memory on this host."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def parse_limit(name: str, value: object) -> int | None:
    """One limit from its text form (see the module docstring); ``ValueError`` says why not."""
    if name not in LIMIT_NAMES:
        raise ValueError(f"unknown limit (known: {', '.join(LIMIT_NAMES)})")
    if isinstance(value, str) and value.strip().lower() == "unlimited":
        return None
    if type(value) is int:
        if value <= 0:
            raise ValueError(f"must be positive, got {value}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"must be an integer or a string, got {value!r}")
    if name == "memory" and (share := _PERCENT.match(value)):
        percent = float(share.group(1))
        if not 0 < percent <= 100:
            raise ValueError(f"a share of physical memory must be in (0, 100], got {value!r}")
        mib = int(physical_memory() * percent / 100) >> 20
        return max(mib, 1) << 20  # whole MiB: reports stay readable
    return _parse_amount(name, value)


def _parse_amount(name: str, value: str) -> int:
    match = _NUMBER.match(value.lower())
    units = _UNITS if name in _SIZES else _SECONDS if name == "cpu_time" else {"": 1}
    if match is None or match.group(2) not in units:
        raise ValueError(f"{_expected(name)}, got {value!r}")
    amount = float(match.group(1)) * units[match.group(2)]
    if amount != int(amount) or amount < 1:
        raise ValueError(f"{_expected(name)} (a whole, positive amount), got {value!r}")
    return int(amount)


def _expected(name: str) -> str:
    if name in _SIZES:
        extra = ', or a share of physical memory like "50%"' if name == "memory" else ""
        return f'expected bytes: an integer or a size like "512MiB" or "4GiB"{extra}'
    if name == "cpu_time":
        return 'expected seconds: an integer or a duration like "90s", "10m" or "2h"'
    return "expected a positive integer"


def parse_limits(table: Mapping[str, object]) -> dict[str, int | None]:
    """Every entry of a ``[limits]`` table; ``KeyError`` names an unknown key, ``ValueError``
    a bad value (its message starts with the key)."""
    parsed: dict[str, int | None] = {}
    for name, value in table.items():
        if name not in LIMIT_NAMES:
            raise KeyError(name)
        try:
            parsed[name] = parse_limit(name, value)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return parsed


def parse_assignment(text: str) -> tuple[str, int | None]:
    """``NAME=VALUE`` (the ``--limit`` option) as a name and a parsed value."""
    name, sep, value = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep or not name:
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, parse_limit(name, value.strip())
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


@cache
def default_limits() -> ResourceLimits:
    """The daemon's defaults on this host (``DEFAULT_LIMITS_TEXT``, shares resolved)."""
    values = {name: parse_limit(name, value) for name, value in DEFAULT_LIMITS_TEXT.items()}
    return ResourceLimits(**values)
