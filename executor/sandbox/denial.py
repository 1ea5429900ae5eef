"""The one place that decides ``sandboxDenied`` for an exited process (pure).

It reproduces the reference's heuristic so clients see the same verdicts:

1. not sandboxed, or exit code 0 -> not denied;
2. the command's output (case-insensitive) contains a denial keyword -> denied;
3. exit code 2, 126 or 127 -> not denied;
4. exit code 159 (128 + SIGSYS) under a Linux sandbox -> denied;
5. otherwise -> not denied.

A difference, on purpose: only the command's own output is searched. The reference also
searched its own helper's panic text, so a sandboxed command that did not exist was "denied";
here such a command fails ``process/start`` instead and never exits.

``evidence`` (a denial observed by other means) counts as denied whatever the output says.
Today that is the executor's proxy refusing a connection while a command that then failed
ran (reason ``network_policy: refused HOST:PORT: why``); backends have no hook to hand over
evidence after exit, so every other verdict comes from the steps above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["KEYWORDS", "Verdict", "classify"]

#: Keyword -> reason code, checked in this order.
KEYWORDS: Final = (
    ("operation not permitted", "operation_not_permitted"),
    ("permission denied", "permission_denied"),
    ("read-only file system", "read_only_file_system"),
    ("seccomp", "policy_denied"),
    ("sandbox", "policy_denied"),
    ("landlock", "policy_denied"),
    ("failed to write file", "failed_to_write_file"),
)
_NOT_DENIED_CODES: Final = frozenset({2, 126, 127})
_SIGSYS_EXIT: Final = 128 + 31


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether an exit counts as a sandbox denial, and the reason code if so."""

    denied: bool
    reason: str | None = None


def classify(
    *,
    sandboxed: bool,
    exit_code: int,
    output: bytes,
    linux: bool = True,
    evidence: str | None = None,
) -> Verdict:
    """Classify one exit. ``evidence`` is a backend's own report of a denial, if any."""
    if not sandboxed:
        return Verdict(False)
    if evidence:
        return Verdict(True, evidence)
    if exit_code == 0:
        return Verdict(False)
    text = output.decode("utf-8", "replace").lower()
    for keyword, reason in KEYWORDS:
        if keyword in text:
            return Verdict(True, reason)
    if exit_code in _NOT_DENIED_CODES:
        return Verdict(False)
    if linux and exit_code == _SIGSYS_EXIT:
        return Verdict(True, "sigsys")
    return Verdict(False)
