"""The seccomp filter's binary search decides exactly what libseccomp's linear chain decides.

Both programs of every filter variant run in a classic-BPF interpreter (``cbpf.py``) over
every system call number 0..1099 of every architecture libseccomp knows (the native one
passes the arch check, the others must be killed alike), the x32 numbers (bit 30 set) and
the edges of the 32-bit range. A number whose run read no argument in either program has
an argument-independent decision there, so one run settles it. For the others, each
argument word takes every constant either program compares it with or masks it by, their
neighbours and the constant with the bits outside its mask set: that covers the cases the
policy names (socket families and types, clone's namespace flags, the denied ioctls, "this
process" for the scheduling setters, utimensat's times), each word alone and every two
together.
"""

from __future__ import annotations

import itertools
from functools import cache

import pytest
from executor_linux import seccomp_policy

from tests.executor_linux.cbpf import SeccompData, decode, run
from tests.support.enforcement import skip_unless

Program = list[tuple[int, int, int, int]]

#: (network_restricted, lock_metadata, shared_pids, deny_listen): every variant.
VARIANTS = list(itertools.product((False, True), repeat=4))
_ARGS_START = 16  # offsetof(struct seccomp_data, args)
_WORD = 0xFFFF_FFFF
_X32_BIT = 0x4000_0000
_NUMBERS = (
    *range(1100),
    *range(_X32_BIT, _X32_BIT + 1100),
    _X32_BIT - 1,
    0x7FFF_FFFF,
    -1,
    -2,
    -0x8000_0000,
)
_LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
_ALU, _JMP, _AND = 0x04, 0x05, 0x50


def _programs(variant: tuple[bool, ...]) -> tuple[Program, Program]:
    """(linear, binary search) for one variant."""
    linear = seccomp_policy.compile_filter(*variant, linear=True)
    return decode(linear), decode(seccomp_policy.compile_filter(*variant))


def _architectures() -> list[int]:
    arch = seccomp_policy._import_pyseccomp().Arch
    values = {value for name, value in vars(arch).items() if name.isupper()}
    return sorted(values | {0, _WORD})


def _compared_words(programs: tuple[Program, ...]) -> dict[int, set[int]]:
    """Per argument word (its offset): the constants compared with it or masking it, their
    neighbours, and each constant with every bit outside its mask set."""
    found: dict[int, set[int]] = {}
    for program in programs:
        offset, masks = -1, [_WORD]
        for code, _jt, _jf, k in program:
            if code == _LOAD_WORD:
                offset, masks = k, [_WORD]
                continue
            if code & 0x07 not in (_ALU, _JMP) or offset < _ARGS_START:
                continue
            if code & 0xF0 == _AND:
                masks.append(k)
            values = found.setdefault(offset, {0, 1, _WORD, 0x8000_0000})
            values |= {k, (k - 1) & _WORD, (k + 1) & _WORD}
            values |= {k | (~mask & _WORD) for mask in masks}
    return found


def _argument_words(data: SeccompData, words: dict[int, int]) -> SeccompData:
    """``data`` with these 32-bit argument words (by offset) set, the others zero."""
    args = [0] * 6
    for offset, word in words.items():
        index, high = divmod(offset - _ARGS_START, 8)
        args[index] |= word << (32 if high else 0)
    return SeccompData(data.nr, data.arch, tuple(args))


class _Comparison:
    """Runs both programs on each case; keeps the cases they disagree on."""

    def __init__(self, linear: Program, tree: Program) -> None:
        self.programs = (linear, tree)
        self.mismatches: list[str] = []

    def offsets_read(self, data: SeccompData) -> set[int]:
        """Compare the programs on ``data``; the argument words either of them read."""
        old, new = (run(program, data) for program in self.programs)
        if old.value != new.value:
            self.mismatches.append(
                f"arch {data.arch:#x} nr {data.nr} args {data.args}: "
                f"{old.value:#x} != {new.value:#x}"
            )
        return {offset for offset in old.offsets | new.offsets if offset >= _ARGS_START}

    def arguments(self, data: SeccompData, words: dict[int, set[int]]) -> None:
        """Every compared value of every argument word the call's rules read, alone and
        against every other such word's: no rule of the policy looks at more than two."""
        read: set[int] = set()
        for offset, values in words.items():
            for value in values:
                read |= self.offsets_read(_argument_words(data, {offset: value}))
        for first, second in itertools.combinations(sorted(read & words.keys()), 2):
            for one, other in itertools.product(words[first], words[second]):
                self.offsets_read(_argument_words(data, {first: one, second: other}))


@cache
def _mismatches(linear: bytes, tree: bytes) -> tuple[str, ...]:
    """Where the two programs differ (computed once per pair, not once per launcher)."""
    comparison = _Comparison(decode(linear), decode(tree))
    words = _compared_words(comparison.programs)
    for arch, nr in itertools.product(_architectures(), _NUMBERS):
        data = SeccompData(nr, arch)
        if comparison.offsets_read(data):
            comparison.arguments(data, words)
    return tuple(comparison.mismatches[:10])


@pytest.fixture(autouse=True)
def _needs_libseccomp() -> None:
    skip_unless(seccomp_policy.available() is None, f"no filter: {seccomp_policy.available()}")


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "".join("01"[x] for x in v))
def test_binary_search_decides_as_the_chain(variant: tuple[bool, ...]) -> None:
    linear = seccomp_policy.compile_filter(*variant, linear=True)
    assert linear != seccomp_policy.compile_filter(*variant)
    assert _mismatches(linear, seccomp_policy.compile_filter(*variant)) == ()


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "".join("01"[x] for x in v))
def test_the_search_is_shorter_than_the_chain(variant: tuple[bool, ...]) -> None:
    """What loading costs: the kernel runs the program for every number of the architecture."""
    linear, tree = _programs(variant)
    native = tree[1][3]  # the arch check: load the arch, compare it with the native one
    steps = [
        (run(linear, SeccompData(nr, native)).steps, run(tree, SeccompData(nr, native)).steps)
        for nr in range(500)
    ]
    assert sum(new for _old, new in steps) * 2 < sum(old for old, _new in steps)
    assert max(new for _old, new in steps) < 48
