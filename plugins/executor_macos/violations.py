"""Optional precise denial evidence from the macOS unified log (best effort).

The shared heuristic (``executor.sandbox.denial``) decides ``sandboxDenied`` from the command's
output. Seatbelt also reports every refusal to the unified log, one message per denial::

    Sandbox: touch(4242) deny(1) file-write-create /Users/u/outside.txt

``ViolationLog`` collects such messages while commands run, by reading
``log stream --style ndjson`` with a predicate that selects sandbox reports, and answers which
came from given pids. ``evidence()`` turns them into the ``evidence`` argument of
``denial.classify``. Nothing in the daemon calls this yet (it needs a place to hand over the
child's pids at exit); it never runs off macOS, and on macOS ``start()`` returns None whenever
``log`` cannot be started or does not confirm it is streaming. It is written from Apple's
documented ``log`` options and the message format above; this project has not exercised it
against a real macOS log.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import IO, Final

__all__ = [
    "LOG",
    "PREDICATE",
    "Violation",
    "ViolationLog",
    "evidence",
    "parse_log_line",
    "parse_message",
]

LOG: Final = "/usr/bin/log"
#: Sandbox reports come from the kernel (pid 0, sender image under .../Sandbox) or, on recent
#: macOS, from the sandbox reporting subsystem.
PREDICATE: Final = (
    '(subsystem == "com.apple.sandbox.reporting") OR '
    '((processID == 0) AND (senderImagePath CONTAINS "/Sandbox"))'
)
#: ``log stream`` prints this once it has applied the predicate and is streaming.
_READY_PREFIX: Final = b"Filtering the log data"
_MESSAGE: Final = re.compile(
    r"^Sandbox:\s*(?P<process>.+?)\((?P<pid>\d+)\)\s+deny\(\d+\)"
    r"\s+(?P<operation>\S+)(?:\s+(?P<target>.*))?$",
    re.DOTALL,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Violation:
    """One operation Seatbelt refused."""

    pid: int
    process: str
    #: The SBPL operation, e.g. ``file-write-create``, ``network-outbound``.
    operation: str
    #: What it was refused on (a path, an address); may be empty.
    target: str


def parse_message(message: str) -> Violation | None:
    """The violation a ``Sandbox: name(pid) deny(n) operation target`` message reports."""
    match = _MESSAGE.match(message.strip())
    if match is None:
        return None
    return Violation(
        pid=int(match["pid"]),
        process=match["process"],
        operation=match["operation"],
        target=(match["target"] or "").strip(),
    )


def parse_log_line(line: bytes) -> Violation | None:
    """The violation in one ``log stream --style ndjson`` line, if it holds one."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    message = record.get("eventMessage") if isinstance(record, dict) else None
    return parse_message(message) if isinstance(message, str) else None


def evidence(violations: Sequence[Violation]) -> str | None:
    """A short reason for ``denial.classify(evidence=...)``; None when nothing was refused."""
    if not violations:
        return None
    first = violations[0]
    more = f" (+{len(violations) - 1} more)" if len(violations) > 1 else ""
    return f"seatbelt denied {first.operation} {first.target}".rstrip() + more


class ViolationLog:
    """Sandbox violations seen since ``start()``, the newest ``limit`` of them."""

    def __init__(self, limit: int = 512) -> None:
        self._seen: deque[Violation] = deque(maxlen=limit)
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def feed(self, line: bytes) -> None:
        """Take one line of ``log stream`` output."""
        if line.startswith(_READY_PREFIX):
            self._ready.set()
            return
        violation = parse_log_line(line)
        if violation is not None:
            with self._lock:
                self._seen.append(violation)

    def for_pids(self, pids: Collection[int]) -> list[Violation]:
        """Violations of the processes ``pids``, each (operation, target) once, oldest first."""
        found: dict[tuple[str, str], Violation] = {}
        with self._lock:
            for violation in self._seen:
                if violation.pid in pids:
                    found.setdefault((violation.operation, violation.target), violation)
        return list(found.values())

    @classmethod
    def start(
        cls, *, command: Sequence[str] = (LOG,), ready_timeout: float = 2.0
    ) -> ViolationLog | None:
        """Start streaming (``command`` is the ``log`` binary); None if it does not come up."""
        log = cls()
        argv = [*command, "stream", "--style", "ndjson", "--predicate", PREDICATE]
        try:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        except OSError:
            return None
        assert process.stdout is not None
        log._process = process
        log._reader = threading.Thread(
            target=log._read, args=(process.stdout,), name="seatbelt-log", daemon=True
        )
        log._reader.start()
        if not log._ready.wait(ready_timeout):
            log.close()
            return None
        return log

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            self.feed(line)

    def close(self) -> None:
        """Stop streaming; what was collected stays readable."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._reader is not None:
            self._reader.join(timeout=2.0)
        if process.stdout is not None:
            process.stdout.close()
