"""Materialized rule sets reused between launches while the host still answers the same.

``materialize`` is pure given its inputs and a host: everything it learns about the
filesystem comes through ``HostView`` (``hostview.py``). So the memo records every question
a materialization asked the host and the answer, and on the next request with the same inputs
asks them again, in the same order: when every answer is unchanged, a fresh materialization
would have asked exactly these questions (each one follows from the inputs and the answers
before it) and reached exactly this rule set, so it is returned instead. One changed answer
(a symlink swapped in, a directory renamed or created, a ``.git`` file rewritten) and the
rules are materialized afresh. Asking again is most of the host's cost but little of
materialization's: the draft, the protections and the rule set are not rebuilt. The real host
answers them all with one ``lstat`` per path where that tells exactly what asking each would
(``LocalHost.answers_again``).

Not memoized: a materialization that scanned for deny-glob matches (its scans run under a
clock deadline, an input that never repeats), one that raised, and one during which the host
answered one question two ways (it changed meanwhile).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from executor.protocol.intent import SandboxIntent
from executor.sandbox.globscan import GlobScan, ScanLimits
from executor.sandbox.hostview import HostView
from executor.sandbox.identity import ByIdentity
from executor.sandbox.materialize import materialize
from executor.sandbox.purpose import Purpose
from executor.sandbox.rules import PathKind, RuleSet

__all__ = ["MaterializeMemo"]

#: One question to the host: the method's name, its arguments, and the answer.
Question = tuple[str, tuple[Any, ...], Any]


class _RecordingHost:
    """A ``HostView`` that passes every question to ``host`` and writes it down."""

    def __init__(self, host: HostView) -> None:
        self.minimal_paths = host.minimal_paths
        self.hidden_paths = host.hidden_paths
        self.cwd = host.cwd
        self.home = host.home
        self._host = host
        self.asked: list[Question] = []
        self.scanned = False

    def _ask(self, name: str, *args: Any) -> Any:
        answer = getattr(self._host, name)(*args)
        self.asked.append((name, args, answer))
        return answer

    def kind(self, path: str) -> PathKind:
        answer: PathKind = self._ask("kind", path)
        return answer

    def realpath(self, path: str) -> str:
        answer: str = self._ask("realpath", path)
        return answer

    def is_symlink(self, path: str) -> bool:
        answer: bool = self._ask("is_symlink", path)
        return answer

    def is_shared_directory(self, path: str) -> bool:
        answer: bool = self._ask("is_shared_directory", path)
        return answer

    def gitdir_pointer(self, path: str) -> str | None:
        answer: str | None = self._ask("gitdir_pointer", path)
        return answer

    def glob_matches(self, base: str, regex: str, limits: ScanLimits) -> GlobScan:
        self.scanned = True
        return self._host.glob_matches(base, regex, limits)


def _consistent(asked: list[Question]) -> bool:
    """Whether every question asked twice got the same answer both times. If not, the host
    changed while it was asked, and the rules follow neither moment: a fresh materialization
    now could not reach them, so they must not be served again."""
    first: dict[tuple[str, tuple[Any, ...]], Any] = {}
    return all(first.setdefault((name, args), answer) == answer for name, args, answer in asked)


def _asked_once(asked: list[Question]) -> tuple[Question, ...]:
    """Each question once, in the order first asked (``asked`` is ``_consistent``)."""
    first: dict[tuple[str, tuple[Any, ...]], Any] = {}
    for name, args, answer in asked:
        first.setdefault((name, args), answer)
    return tuple((name, args, answer) for (name, args), answer in first.items())


def _still_answers(host: HostView, questions: tuple[Question, ...]) -> bool:
    """Whether ``host`` gives every recorded answer again (a question asked twice was
    recorded once: any one moment's answers are ones a fresh materialization could have
    got). A host that can tell this itself more cheaply than asking each question (the
    real one: ``LocalHost.answers_again``) is asked so, else each question is asked."""
    answers_again: Callable[[tuple[Question, ...]], bool] | None = getattr(
        host, "answers_again", None
    )
    if answers_again is not None:
        return answers_again(questions)
    return all(getattr(host, name)(*args) == answer for name, args, answer in questions)


class _Hashed:
    """An intent in a memo key, hashed once. Hashing an intent walks every entry through
    dataclass and enum ``__hash__`` methods; ``parse_sandbox`` hands out the same intent
    object for a sandbox sent again, so its wrapper (and hash) is found by identity. Equal
    to a wrapper of an equal intent, like the intent itself."""

    __slots__ = ("_hash", "intent")

    def __init__(self, intent: SandboxIntent) -> None:
        self.intent = intent
        self._hash = hash(intent)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Hashed) and (
            other.intent is self.intent or other.intent == self.intent
        )


class MaterializeMemo:
    """``materialize`` for process launches, reusing a recent result while it still holds.

    Keyed on every input: the intent, the purpose, the process's cwd, its environment (the
    ``TMPDIR`` it names becomes ``:tmpdir``), and the host object with its fixed facts. Holds
    at most ``size`` results (least recently used dropped first).
    """

    def __init__(self, size: int = 32) -> None:
        self._size = size
        self._entries: OrderedDict[Hashable, tuple[RuleSet | None, tuple[Question, ...]]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()
        #: Each recent intent's ``_Hashed``, found by the intent's identity.
        self._hashed: ByIdentity[SandboxIntent, _Hashed] = ByIdentity(4 * size)

    def materialize(
        self,
        intent: SandboxIntent,
        host: HostView,
        *,
        purpose: Purpose = Purpose.PROCESS,
        process_cwd: str | None = None,
        child_env: Mapping[str, str] | None = None,
    ) -> RuleSet | None:
        """What ``materialize(intent, host, ...)`` returns now."""
        env = child_env or {}
        key: Hashable = (
            self._hashed.get(intent, None, lambda: _Hashed(intent)),
            purpose,
            process_cwd,
            tuple(sorted(env.items())),
            id(host),
            host.minimal_paths,
            host.hidden_paths,
            host.cwd,
            host.home,
        )
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is not None and _still_answers(host, entry[1]):
            return entry[0]
        recording = _RecordingHost(host)
        rules = materialize(
            intent, recording, purpose=purpose, process_cwd=process_cwd, child_env=env
        )
        with self._lock:
            if recording.scanned or not _consistent(recording.asked):
                self._entries.pop(key, None)
            else:
                self._entries[key] = (rules, _asked_once(recording.asked))
                self._entries.move_to_end(key)
                while len(self._entries) > self._size:
                    self._entries.popitem(last=False)
        return rules
