"""The one sandboxDenied classifier (sandbox.md §4), with our documented differences."""

from __future__ import annotations

import pytest

from executor.sandbox.denial import classify

# The reference's verified matrix (sandbox.md §4), sandboxed unless noted.
MATRIX = [
    ("exit1-silent", True, 1, "", False),
    ("permission-denied", True, 1, "ls: cannot open: Permission denied", True),
    ("sandbox-word-stdout", True, 1, "sandbox said no", True),
    ("keyword-but-success", True, 0, "Operation not permitted", False),
    ("keyword-exit2", True, 2, "sh: 1: cannot create x: Permission denied", True),
    ("keyword-exit127", True, 127, "Read-only file system", True),
    ("exit126-silent", True, 126, "", False),
    ("exit127-silent", True, 127, "", False),
    ("exit2-silent", True, 2, "", False),
    ("sigsys", True, 159, "", True),
    ("sigkill", True, 137, "", False),
    ("keyword-then-sigterm", True, 143, "Operation not permitted", True),
    ("keyword-then-terminate", True, 137, "permission denied", True),
    ("keyword-then-interrupt", True, 130, "landlock", True),
    ("seccomp-word", True, 1, "seccomp", True),
    ("failed-to-write", True, 1, "error: Failed to write file", True),
    ("unsandboxed", False, 1, "Permission denied", False),
    ("unsandboxed-sigsys", False, 159, "", False),
]


@pytest.mark.parametrize(
    ("sandboxed", "code", "output", "denied"), [m[1:] for m in MATRIX], ids=[m[0] for m in MATRIX]
)
def test_classify_exit(sandboxed: bool, code: int, output: str, denied: bool) -> None:
    """A sandboxed exit counts as denied only on evidence of a denial."""
    assert classify(sandboxed=sandboxed, exit_code=code, output=output.encode()).denied is denied


def test_sigsys_counts_only_under_a_linux_sandbox() -> None:
    """159 (128 + SIGSYS) is the seccomp kill on Linux; elsewhere it is just a code."""
    assert not classify(sandboxed=True, exit_code=159, output=b"", linux=False).denied


def test_backend_evidence_wins_over_the_heuristic() -> None:
    """Ours: a backend that observed a denial says so, even with exit 0 and no keyword."""
    verdict = classify(sandboxed=True, exit_code=0, output=b"", evidence="seccomp_kill")
    assert verdict.denied and verdict.reason == "seccomp_kill"


def test_reason_names_the_keyword() -> None:
    """The reason codes of the reference are reported."""
    assert (
        classify(sandboxed=True, exit_code=1, output=b"x: Read-only file system").reason
        == "read_only_file_system"
    )
    assert classify(sandboxed=True, exit_code=159, output=b"").reason == "sigsys"


def test_non_utf8_output_is_classified() -> None:
    """Bytes that are not UTF-8 do not break classification."""
    assert classify(sandboxed=True, exit_code=1, output=b"\xff\xfePermission denied").denied
