"""``windowsSandboxLevel: "mxc"`` on a filesystem call, as the reference answers it.

The level names a Windows sandbox this executor does not have. ``process/start`` refuses it
outright (``parse_process_sandbox``). A filesystem call is refused only when it would need
the sandbox: the reference (v0.169 and v0.171, Linux) prepares its filesystem sandbox only
for an operation the permissions restrict — a read when reads are restricted anywhere
(``:minimal``, a denied path, a deny glob), a change when the permissions do not grant write
everywhere — and that preparation is what fails; an operation the permissions leave
unrestricted runs, the level ignored. Observed (a throwaway directory, both daemons):
``:root`` read allows ``fs/readFile`` and refuses ``fs/writeFile`` (even inside a writable
workspace root); ``:root`` write allows both; any deny entry refuses both. The refusal is
``-32600``, and capability discovery makes it that root's ``error``.
"""

from __future__ import annotations

from typing import Final

from executor.errors import InvalidRequest
from executor.protocol.intent import Access
from executor.sandbox.rules import RuleOrigin, RuleSet

__all__ = ["MXC_FS_REFUSAL", "check_mxc"]

MXC_FS_REFUSAL: Final = (
    "failed to prepare fs sandbox: failed to prepare MXC sandbox: "
    "native MXC is unavailable on this executor"
)


def check_mxc(rules: RuleSet | None, *, writes: bool) -> None:
    """Refuse a call (``writes``: one that changes something) under ``"mxc"`` if the rules
    restrict it; ``rules`` None: the sandbox is ``disabled``."""
    if rules is None or not rules.filesystem_restricted:
        return
    if writes or _reads_restricted(rules):
        raise InvalidRequest(MXC_FS_REFUSAL)


def _reads_restricted(rules: RuleSet) -> bool:
    """Whether the permissions deny reading anything (the executor's own hidden state does
    not count: the reference has none)."""
    if rules.deny_globs or rules.access_of("/") is Access.DENY:
        return True
    return any(
        rule.access is Access.DENY and rule.origin is not RuleOrigin.EXECUTOR_STATE
        for rule in rules.rules
    )
