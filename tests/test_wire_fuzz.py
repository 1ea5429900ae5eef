"""A seeded wire fuzzer: every method, mutated strings, types and sizes; one answer per request.

For each JSON backend (orjson and the standard library) a daemon gets ``MESSAGES`` messages
on one connection, round-robin over every method in ``executor.protocol.methods``, each a
valid request with mutations: strings grown with NUL, non-characters, separators, percent
escapes, lone surrogates or hundreds of kilobytes; values swapped for other types, huge or
nested ones; fields dropped or added; ids and methods changed; requests turned into
notifications; and, at the byte level, truncation, invalid UTF-8, trailing garbage, batches.

An oracle (``tests/support/wire_oracle.py``, not the daemon's code) says what each message
must get: exactly one answer with its id, one out-of-band answer (id ``-1``: malformed,
unknown notification), or none (``initialized``). Out-of-band answers come in message order;
those for lone surrogates must name the field. Nothing may be an internal error, and the
daemon must log no traceback. Meanwhile a canary session on the same daemon runs commands,
writes to stdin and reads a file, and must keep working. Everything is drawn from
``random.Random(SEED)``: a failure reproduces. Paths stay inside the test's directory and
programs are harmless (a guard redraws any message that would name another), so the fuzz
cannot touch the host.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import random
import shutil
import socket
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.protocol import methods
from executor.protocol.paths import parse_path_uri
from tests.support.client import WsClient, output_of
from tests.support.daemon import RunningDaemon
from tests.support.json_backends import BACKENDS, daemon_env
from tests.support.wire_oracle import Expect, expectation

SEED = 20260613
#: Messages per backend (two backends: twice as many in all).
MESSAGES = 1500
#: The canary session does its round every this many fuzz messages.
CANARY_EVERY = 150

ALL_METHODS = sorted(
    value
    for name, value in vars(methods).items()
    if name.isupper() and isinstance(value, str) and not name.startswith("_")
)
#: Programs a fuzzed ``process/start`` may run: all end by themselves within a second.
PROGRAMS = [["/bin/echo", "hi"], ["/bin/true"], ["/bin/sleep", "0.3"], ["/no/such/program"], [""]]
ALLOWED_PROGRAMS = {argv[0] for argv in PROGRAMS}

EDGE_TEXT = [
    "\x00",
    "\ufffe",
    "\uffff",
    "\ufdd0",
    "\U0010ffff",
    "\u2028",
    "\ufeff",
    "\u202e",
    "e\u0301",
    "\U0001f600",
    "\r\n",
    '"',
    "\\",
    " ",
    "%FF",
    "%00",
    "%ED%A0%80",
    "%C0%AF",
]
LONE_SURROGATES = ["\ud800", "\udbff", "\udc00", "\udfff", "\udc00\ud800"]
#: Replacement strings: no digit, '/', ':', '%' or '\\', so never a path, URL or number.
SAFE_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_-. äßπ中\u00a0"
OTHER_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -7,
    1.5,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63) - 1,
    "",
    "x",
    [],
    {},
    [None],
    {"a": []},
]
ALLOWED_CODES = {-32600, -32601, -32602, -32603, -32004, -32010}


# --- the generator ----------------------------------------------------------------------------


class Generator:
    """Seeded messages for every method, with their expectations."""

    def __init__(self, rng: random.Random, root: Path, http_port: int) -> None:
        self.rng = rng
        self.root = root
        self.http_port = http_port
        self.count = 0

    def _uri(self, name: str) -> str:
        return f"file://{self.root}/{name}"

    def template(self, method: str) -> dict[str, Any] | None:
        """Valid params for ``method`` (None: the method takes none)."""
        r = self.rng
        pid = r.choice(["p0", "p1", "p2", "p3"])
        handle = r.choice(["h0", "h1"])
        table: dict[str, dict[str, Any] | None] = {
            methods.INITIALIZE: {"clientName": "fuzz"},
            methods.INITIALIZED: {},
            methods.ENVIRONMENT_INFO: None,
            methods.ENVIRONMENT_STATUS: None,
            methods.ENVIRONMENT_CONFIG_READ: {
                "cwd": self._uri("sub"),
                "configPaths": [["mcp_servers"], ["model"]],
                "requirementsPaths": [["mcp_servers"]],
            },
            methods.PROCESS_START: {
                "processId": pid,
                "argv": list(r.choice(PROGRAMS)),
                "cwd": self._uri("sub"),
                "env": {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                "tty": r.random() < 0.3,
                "pipeStdin": r.random() < 0.5,
            },
            methods.PROCESS_READ: {
                "processId": pid,
                "afterSeq": r.choice([0, 1, 5]),
                "maxBytes": r.choice([None, 1, 65536]),
                "waitMs": r.choice([0, 5, 50]),
            },
            methods.PROCESS_WRITE: {
                "processId": pid,
                "chunk": r.choice(["aGkK", "", "AAAA"]),
                "writeId": f"w{self.count}",
            },
            methods.PROCESS_SIGNAL: {"processId": pid, "signal": "interrupt"},
            methods.PROCESS_TERMINATE: {"processId": pid},
            methods.PROCESS_RESIZE_PTY: {"processId": pid, "size": {"rows": 30, "cols": 90}},
            methods.PROCESS_OUTPUT: {"processId": pid, "seq": 1, "stream": "stdout", "chunk": ""},
            methods.PROCESS_EXITED: {"processId": pid, "seq": 2, "exitCode": 0},
            methods.PROCESS_CLOSED: {"processId": pid},
            methods.FS_READ_FILE: {"path": self._uri("file.txt")},
            methods.FS_WRITE_FILE: {"path": self._uri("out.txt"), "dataBase64": "aGk="},
            methods.FS_CREATE_DIRECTORY: {"path": self._uri("newdir"), "recursive": True},
            methods.FS_GET_METADATA: {"path": self._uri("file.txt")},
            methods.FS_READ_DIRECTORY: {"path": self._uri("sub")},
            methods.FS_WALK: {
                "path": self._uri("sub"),
                "options": {
                    "maxDepth": 3,
                    "maxDirectories": 20,
                    "maxEntries": 100,
                    "followDirectorySymlinks": False,
                },
            },
            methods.FS_REMOVE: {"path": self._uri("victim"), "recursive": True, "force": True},
            methods.FS_COPY: {
                "sourcePath": self._uri("file.txt"),
                "destinationPath": self._uri("copy.txt"),
                "recursive": False,
            },
            methods.FS_CANONICALIZE: {"path": self._uri("file.txt")},
            methods.FS_OPEN: {"handleId": handle, "path": self._uri("file.txt"), "mode": "read"},
            methods.FS_READ_BLOCK: {"handleId": handle, "offset": 0, "len": 16},
            methods.FS_WRITE_BLOCK: {"handleId": handle, "offset": 0, "chunk": "aGk="},
            methods.FS_CLOSE: {"handleId": handle},
            methods.FS_WATCH_MISSING: {
                "watchId": self.count,
                "missing": [self._uri("nothere"), self._uri("sub/x/y")],
                "present": r.choice([None, self._uri("file.txt")]),
            },
            methods.FS_MISSING_CHANGED: {"watchId": 1},
            methods.CAPABILITY_ROOTS_DISCOVER: {
                "roots": [{"id": f"r{self.count}", "path": self._uri("sub")}]
            },
            methods.HTTP_REQUEST: {
                "method": "GET",
                "url": f"http://127.0.0.1:{self.http_port}/x",
                "requestId": f"r{self.count}",
                "headers": [{"name": "x-fuzz", "value": "1"}],
                "timeoutMs": 2000,
            },
            methods.HTTP_BODY_DELTA: {"requestId": "r", "seq": 1, "deltaBase64": "", "done": True},
        }
        return table[method]

    # --- mutations --------------------------------------------------------------------------

    def _safe_text(self) -> str:
        return "".join(self.rng.choices(SAFE_ALPHABET, k=self.rng.randint(1, 12)))

    def _other_value(self) -> Any:
        r = self.rng.random()
        if r < 0.04:
            nested: Any = []
            for _ in range(self.rng.randint(10, 200)):
                nested = [nested]
            return nested
        if r < 0.06:
            return list(range(self.rng.choice([1000, 20000])))
        if r < 0.08:
            return {f"k{n}": n for n in range(2000)}
        # A copy: a shared [None] or {"a": []} mutated later could come to contain itself.
        return copy.deepcopy(self.rng.choice(OTHER_VALUES))

    def _mutate_text(self, text: str) -> str:
        """Grow a string (never shorten it: a path stays below the test's directory)."""
        r = self.rng.random()
        if r < 0.45:
            return text + "".join(self.rng.choices(EDGE_TEXT, k=self.rng.randint(1, 3)))
        if r < 0.6:
            at = self.rng.randint(0, len(text))
            return text[:at] + self.rng.choice(LONE_SURROGATES) + text[at:]
        if r < 0.75:
            size = self.rng.choice([5_000, 70_000, 400_000])
            return text + self.rng.choice(["A", "é", "\U0001f600", "\x00"]) * size
        if r < 0.85:
            return ""
        return self._safe_text()

    def _leaves(self, value: Any, trail: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
        """Paths (key/index tuples) of every value inside ``value``."""
        if isinstance(value, dict):
            for key, child in value.items():
                yield (*trail, key)
                yield from self._leaves(child, (*trail, key))
        elif isinstance(value, list) and len(value) < 50:
            for index, child in enumerate(value):
                yield (*trail, index)
                yield from self._leaves(child, (*trail, index))

    @staticmethod
    def _get(root: Any, trail: tuple[Any, ...]) -> Any:
        for step in trail:
            root = root[step]
        return root

    def _mutate_value(self, message: dict[str, Any]) -> str:
        """One mutation of the request object; returns its name."""
        r = self.rng
        leaves = list(self._leaves(message))
        strings = [t for t in leaves if isinstance(self._get(message, t), str)]
        choice = r.random()
        if choice < 0.35 and strings:
            trail = r.choice(strings)
            if trail == ("id",):
                self._get(message, trail[:-1])[trail[-1]] += r.choice(EDGE_TEXT)
                return "id-text"
            self._get(message, trail[:-1])[trail[-1]] = self._mutate_text(self._get(message, trail))
            return "text"
        params = message.get("params")
        if choice < 0.55 and leaves:
            trail = r.choice([t for t in leaves if t[0] == "params"] or leaves)
            if trail[0] in ("id", "method"):
                trail = ("params",)
            self._get(message, trail[:-1])[trail[-1]] = self._other_value()
            return "type"
        if choice < 0.62 and isinstance(params, dict) and params:
            del params[r.choice(list(params))]
            return "drop"
        if choice < 0.7 and isinstance(params, dict):
            key = r.choice([self._safe_text(), "sandbox", "x\x00y", "k" * 70_000, "\ud800k"])
            params[key] = self._other_value()
            return "extra"
        if choice < 0.75:
            message["x-" + self._safe_text()] = self._other_value()
            return "top-extra"
        if choice < 0.82:
            message["id"] = r.choice([None, 1.5, True, [], {}, 2**63, -(2**63) - 1, "\udc00"])
            return "bad-id"
        if choice < 0.87:
            odd = [0, 2**63 - 1, -(2**63), f"f{self.count}{r.choice(EDGE_TEXT)}"]
            message["id"] = r.choice(odd)
            return "odd-id"
        if choice < 0.92:
            message.pop("id", None)
            return "notification"
        method = message["method"] if isinstance(message["method"], str) else "m"
        message["method"] = r.choice(
            [method + r.choice(EDGE_TEXT + LONE_SURROGATES), None, 7, ["m"], ""]
        )
        return "method"

    def _corrupt(self, text: str) -> bytes:
        data = text.encode()
        r = self.rng.random()
        if r < 0.3:
            return data[: self.rng.randint(0, len(data) - 1)]
        if r < 0.6:
            at = self.rng.randint(0, len(data))
            bad = self.rng.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\x80", b"\xf4\x90"])
            return data[:at] + bad + data[at:]
        if r < 0.8:
            return data + self.rng.choice([b"x", b"\n{}", b",", b"}"])
        return b"[" + data + b"]"

    # --- messages ---------------------------------------------------------------------------

    def _harmless(self, message: Any, method: str) -> bool:
        """No path outside the test's directory, no program but the allowed ones."""
        for text in _strings(message):
            if "file:" in text.lower():
                try:
                    path = parse_path_uri(text)
                except Exception:
                    continue
                if os.path.commonpath([path, str(self.root)]) != str(self.root):
                    return False
        params = message.get("params") if isinstance(message, dict) else None
        if method == methods.PROCESS_START and isinstance(params, dict):
            argv = params.get("argv")
            if isinstance(argv, list) and argv and isinstance(argv[0], str):
                program = argv[0]
                try:
                    runnable = shutil.which(program) is not None or "/" in program
                except (ValueError, OSError):
                    runnable = False
                if program not in ALLOWED_PROGRAMS and runnable:
                    return False
        return True

    def next(self) -> tuple[str | bytes, Expect]:
        """The next message (str: a text frame, bytes: a binary frame) and its expectation."""
        method = ALL_METHODS[self.count % len(ALL_METHODS)]
        self.count += 1
        while True:
            message: dict[str, Any] = {"id": f"f{self.count}", "method": method}
            params = self.template(method)
            if params is not None or self.rng.random() < 0.5:
                message["params"] = params
            if method == methods.INITIALIZED:
                del message["id"]
            names = []
            if self.rng.random() < 0.85:
                for _ in range(1 if self.rng.random() < 0.8 else self.rng.randint(2, 4)):
                    names.append(self._mutate_value(message))
            if self._harmless(message, method):
                break
        text = json.dumps(message)  # lone surrogates go out as \\u escapes, as a client's would
        what = f"#{self.count} {method} {'+'.join(names) or 'valid'}"
        if self.rng.random() < 0.08:
            return self._corrupt(text), Expect("oob", what=what + "+bytes")
        expect = expectation(message)
        expect.what = what
        return (text.encode() if self.rng.random() < 0.15 else text), expect


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, child in value.items():
            yield key
            yield from _strings(child)
    elif isinstance(value, list):
        for child in value:
            yield from _strings(child)


# --- the run ----------------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def fuzzed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[RunningDaemon, Path]]:
    """A daemon (per JSON backend) whose paths and programs the fuzz may use."""
    root = tmp_path / "root"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "file.txt").write_text("fuzz file\n")
    (root / "victim").mkdir()
    # Directories that a fuzzed "file.txt%FF" names: errors echo their non-UTF-8 names.
    for suffix in (b"\xff", b"\xed\xa0\x80", b"\xc0\xaf"):
        (root / os.fsdecode(b"file.txt" + suffix)).mkdir()
    daemon = RunningDaemon(
        [
            "--log-level",
            "warning",
            "--max-processes",
            "64",
            "--process-retention",
            "1",
            "--http-allow-host",
            "127.0.0.1",
        ],
        env=daemon_env(request.param, tmp_path),
        cwd=str(tmp_path),
    )
    try:
        yield daemon, tmp_path
    finally:
        daemon.stop()


class Canary:
    """A second session on the fuzzed daemon doing real work now and then."""

    def __init__(self, daemon: RunningDaemon, home: Path) -> None:
        self.client = daemon.session("canary")
        self.file = home / "canary.txt"
        self.file.write_text("canary data\n")
        self.rounds = 0

    def round(self) -> None:
        """A command, a stdin round trip and a file read, all as expected."""
        self.rounds += 1
        n = self.rounds
        client = self.client
        assert client.request("environment/status") == {"status": "ready"}
        _result, events = client.run(f"echo-{n}", ["/bin/echo", f"canary {n}"])
        assert output_of(events) == f"canary {n}\n".encode()
        assert events[-1]["method"] == "process/closed"
        client.request(
            "process/start",
            {
                "processId": f"head-{n}",
                "argv": ["head", "-n", "1"],
                "cwd": "file:///tmp",
                "env": {"PATH": "/usr/bin:/bin"},
                "tty": False,
                "pipeStdin": True,
            },
        )
        chunk = base64.b64encode(f"ping {n}\n".encode()).decode()
        write = {"processId": f"head-{n}", "chunk": chunk, "writeId": f"c{n}"}
        assert client.request("process/write", write) == {"status": "accepted"}
        assert output_of(client.process_events(f"head-{n}")) == f"ping {n}\n".encode()
        data = client.request("fs/readFile", {"path": f"file://{self.file}"})["dataBase64"]
        assert base64.b64decode(data) == b"canary data\n"


def _closed_port() -> int:
    """A loopback port nothing listens on (connections to it are refused at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _answers(client: WsClient) -> list[dict[str, Any]]:
    return [m for m in list(client.inbox.arrivals) if "method" not in m]


def test_every_request_gets_exactly_one_answer(fuzzed: tuple[RunningDaemon, Path]) -> None:
    """MESSAGES seeded hostile messages on one connection; a canary session keeps working."""
    daemon, home = fuzzed
    generator = Generator(random.Random(SEED), home / "root", _closed_port())
    canary = Canary(daemon, home)
    fuzz = daemon.session("fuzz")
    baseline = len(_answers(fuzz))
    expects: list[Expect] = []
    started = time.monotonic()
    try:
        for index in range(MESSAGES):
            payload, expect = generator.next()
            fuzz.send_raw(payload)
            expects.append(expect)
            if index % CANARY_EVERY == CANARY_EVERY - 1:
                canary.round()
        wanted = sum(expect.kind != "none" for expect in expects)
        fuzz.inbox.wait(lambda: len(_answers(fuzz)) - baseline >= wanted, 30, f"{wanted} answers")
        canary.round()
        done = fuzz.call("environment/status")  # after every inline answer
        assert done["result"] == {"status": "ready"}
    finally:
        fuzz.close()
        canary.client.close()
    answers = [answer for answer in _answers(fuzz)[baseline:] if answer is not done]
    _check(expects, answers)
    assert time.monotonic() - started < 50
    with daemon.session() as fresh:
        assert fresh.request("environment/status") == {"status": "ready"}
    log = daemon.log()
    assert "Traceback" not in log and "internal error" not in log, log[-5000:]


def _check(expects: list[Expect], answers: list[dict[str, Any]]) -> None:
    by_id = Counter(json.dumps(a["id"]) for a in answers if a["id"] != -1)
    wanted_ids = Counter(json.dumps(e.request_id) for e in expects if e.kind == "id")
    missing = wanted_ids - by_id
    extra = by_id - wanted_ids
    described = {json.dumps(e.request_id): e.what for e in expects if e.kind == "id"}
    assert not missing, [described[key] for key in list(missing)[:10]]
    assert not extra, list(extra)[:10]
    oob = [a for a in answers if a["id"] == -1]
    wanted_oob = [e for e in expects if e.kind == "oob"]
    assert len(oob) == len(wanted_oob), (len(oob), len(wanted_oob))
    # Out-of-band answers are sent inline, in message order: pair them up.
    for expect, answer in zip(wanted_oob, oob, strict=True):
        if expect.surrogate_path is not None:
            message = answer["error"]["message"]
            assert "lone surrogate" in message, (expect.what, message)
            assert expect.surrogate_path[:100] in message, (expect.what, message)
    for answer in answers:
        error = answer.get("error")
        if error is not None:
            assert error["code"] in ALLOWED_CODES, answer
            assert not error["message"].startswith("internal error"), answer


def test_the_fuzzer_covers_every_method_and_mutation() -> None:
    """Every method in executor.protocol.methods has a template, and the mix is as designed."""
    generator = Generator(random.Random(SEED), Path("/nonexistent-root"), 9)
    kinds: Counter[str] = Counter()
    surrogates = 0
    for _ in range(MESSAGES):
        _payload, expect = generator.next()
        kinds[expect.kind] += 1
        surrogates += expect.surrogate_path is not None
    assert set(ALL_METHODS) >= {methods.PROCESS_WRITE, methods.FS_READ_FILE, methods.HTTP_REQUEST}
    assert kinds["id"] > MESSAGES // 2 and kinds["oob"] > MESSAGES // 10
    assert surrogates > MESSAGES // 20
