"""Denial evidence from the unified log: message parsing, collection by pid, the stream.

The stream is driven by a fake ``log`` (a Python script printing what ``log stream --style
ndjson`` prints); the real one exists only on macOS and is not exercised by this project's CI.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from executor_macos.violations import (
    PREDICATE,
    Violation,
    ViolationLog,
    evidence,
    parse_log_line,
    parse_message,
)

from executor.sandbox.denial import classify

MESSAGES = [
    (
        "Sandbox: touch(4242) deny(1) file-write-create /Users/u/outside.txt",
        Violation(
            pid=4242, process="touch", operation="file-write-create", target="/Users/u/outside.txt"
        ),
    ),
    (
        "Sandbox: Python(17) deny(1) network-outbound 127.0.0.1:8080",
        Violation(pid=17, process="Python", operation="network-outbound", target="127.0.0.1:8080"),
    ),
    (
        "Sandbox: my tool (v2)(99) deny(3) file-read-data /Users/u/a b/c (1).txt",
        Violation(
            pid=99,
            process="my tool (v2)",
            operation="file-read-data",
            target="/Users/u/a b/c (1).txt",
        ),
    ),
    (
        "Sandbox: bash(5) deny(1) process-info-pidinfo",
        Violation(pid=5, process="bash", operation="process-info-pidinfo", target=""),
    ),
    ("Sandbox: bash(5) allow file-read-data /x", None),
    ("kernel: something else entirely", None),
]


@pytest.mark.parametrize(
    ("message", "expected"),
    MESSAGES,
    ids=["write", "network", "spaces-and-parens", "no-target", "allow", "other"],
)
def test_parse_message(message: str, expected: Violation | None) -> None:
    """Sandbox denial messages are split into pid, process, operation and target."""
    assert parse_message(message) == expected


def ndjson(message: str, pid: int = 0) -> bytes:
    """One ``log stream --style ndjson`` line."""
    return json.dumps({"eventMessage": message, "processID": pid, "subsystem": ""}).encode() + b"\n"


@pytest.mark.parametrize(
    ("line", "found"),
    [
        (ndjson(MESSAGES[0][0]), True),
        (b"Filtering the log data using ...\n", False),
        (b"{not json\n", False),
        (b"[1, 2]\n", False),
        (json.dumps({"eventMessage": 3}).encode(), False),
    ],
    ids=["denial", "banner", "broken-json", "not-an-object", "message-not-text"],
)
def test_parse_log_line(line: bytes, found: bool) -> None:
    """Only JSON records with a sandbox denial message yield a violation."""
    assert (parse_log_line(line) is not None) is found


def test_collects_by_pid_once_per_operation_and_target() -> None:
    """Violations are filtered by pid and deduplicated, oldest first."""
    log = ViolationLog()
    for message in (
        "Sandbox: a(1) deny(1) file-read-data /x",
        "Sandbox: a(1) deny(1) file-read-data /x",
        "Sandbox: b(2) deny(1) file-write-create /y",
        "Sandbox: c(3) deny(1) network-outbound 1.2.3.4:80",
    ):
        log.feed(ndjson(message))
    assert [v.target for v in log.for_pids({1, 2})] == ["/x", "/y"]
    assert log.for_pids({9}) == []


def test_collection_is_bounded() -> None:
    """Only the newest ``limit`` violations are kept."""
    log = ViolationLog(limit=2)
    for n in range(5):
        log.feed(ndjson(f"Sandbox: a(1) deny(1) file-read-data /f{n}"))
    assert [v.target for v in log.for_pids({1})] == ["/f3", "/f4"]


def test_evidence_feeds_the_shared_classifier() -> None:
    """Evidence marks an exit as denied even when the output says nothing."""
    found = [
        Violation(pid=1, process="sh", operation="file-write-create", target="/out"),
        Violation(pid=1, process="sh", operation="file-read-data", target="/secret"),
    ]
    reason = evidence(found)
    assert reason == "seatbelt denied file-write-create /out (+1 more)"
    assert evidence([]) is None
    verdict = classify(sandboxed=True, exit_code=1, output=b"", linux=False, evidence=reason)
    assert verdict.denied


def fake_log(tmp_path: Path, lines: list[bytes], *, banner: bool = True) -> Path:
    """A stand-in for /usr/bin/log that prints ``lines`` and then waits to be stopped."""
    script = tmp_path / "log"
    body = [
        f"#!{sys.executable}",
        "import sys, time",
        "assert sys.argv[1:5] == ['stream', '--style', 'ndjson', '--predicate'], sys.argv",
        f"assert sys.argv[5] == {PREDICATE!r}",
    ]
    if banner:
        body.append("sys.stdout.write('Filtering the log data using \"...\"\\n')")
    body += [f"sys.stdout.buffer.write({line!r})" for line in lines]
    body += ["sys.stdout.flush()", "time.sleep(30)" if banner else "pass"]
    script.write_text("\n".join(body) + "\n")
    script.chmod(0o755)
    return script


def test_stream_collects_violations(tmp_path: Path) -> None:
    """start() waits for the banner, then violations arrive from the stream until close()."""
    script = fake_log(tmp_path, [ndjson("Sandbox: touch(77) deny(1) file-write-create /o")])
    log = ViolationLog.start(command=(str(script),), ready_timeout=10.0)
    assert log is not None
    try:
        deadline = time.monotonic() + 10.0
        while not log.for_pids({77}) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.for_pids({77}) == [
            Violation(pid=77, process="touch", operation="file-write-create", target="/o")
        ]
    finally:
        log.close()
    log.close()


def test_stream_that_never_confirms_is_dropped(tmp_path: Path) -> None:
    """Without the banner (log refused us, not macOS, ...) there is no evidence source."""
    script = fake_log(tmp_path, [], banner=False)
    assert ViolationLog.start(command=(str(script),), ready_timeout=0.5) is None


def test_stream_without_log_binary(tmp_path: Path) -> None:
    """No log binary: no evidence source, no error."""
    assert ViolationLog.start(command=(str(tmp_path / "missing"),)) is None
