"""Run one command through a real Codex client against an exec-server (run by hand).

    .venv/bin/python scripts/codex_check.py --daemon ws://127.0.0.1:8765 --cmd 'echo hi'
    .venv/bin/python scripts/codex_check.py --codex "$REF/node_modules/.bin/codex" \\
        --daemon ws://127.0.0.1:8765 --cmd 'touch /etc/x' --sandbox-mode workspace-write

Codex (``codex exec``, the npm package ``@openai/codex``) runs with a throwaway
``CODEX_HOME`` whose ``environments.toml`` points at ``--daemon`` only (``include_local =
false``: nothing can run on this machine by mistake) and whose model provider is a stand-in
served here: its first answer calls Codex's shell tool (``exec_command``, else
``shell_command`` or ``shell``) with ``--cmd`` (and ``--workdir``), its second ends the
turn. So no account and no network are needed. Printed: Codex's exit status and the end of
its output, then what Codex told the model the command did (the tool's output) — the
client's view of the daemon's answers, to compare two daemons (ours and the reference) on
the same command. Not part of the test suite: the suite neither ships nor downloads Codex.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

_FIRST_ANSWER_ID = "call_1"


class _StandIn(http.server.ThreadingHTTPServer):
    """The model API stand-in; ``requests`` keeps every request body Codex sent."""

    daemon_threads = True

    def __init__(self, cmd: str, workdir: str | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.cmd = cmd
        self.workdir = workdir
        self.requests: list[dict[str, Any]] = []


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _StandIn

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            request = json.loads(self.rfile.read(length))
        except ValueError:
            request = {}
        self.server.requests.append(request)
        answered = any(
            isinstance(item, dict) and item.get("type", "").endswith("call_output")
            for item in request.get("input", [])
        )
        item = _message() if answered else self._tool_call(request)
        number = len(self.server.requests)
        body = b"".join(
            (
                _event("response.created", {"response": {"id": f"resp_{number}"}}),
                _event("response.output_item.done", {"output_index": 0, "item": item}),
                _event(
                    "response.completed",
                    {"response": {"id": f"resp_{number}", "usage": _USAGE}},
                ),
            )
        )
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _tool_call(self, request: dict[str, Any]) -> dict[str, Any]:
        offered = {tool.get("name") or tool.get("type") for tool in request.get("tools", [])}
        cmd, workdir = self.server.cmd, self.server.workdir
        arguments: dict[str, object]
        if "exec_command" in offered:
            name, arguments = "exec_command", {"cmd": cmd}
        elif "shell_command" in offered:
            name, arguments = "shell_command", {"command": cmd}
        else:
            name, arguments = "shell", {"command": ["bash", "-lc", cmd]}
        if workdir is not None:
            arguments["workdir"] = workdir
        return {
            "type": "function_call",
            "id": "fc_1",
            "call_id": _FIRST_ANSWER_ID,
            "name": name,
            "arguments": json.dumps(arguments),
        }


_USAGE = {
    "input_tokens": 1,
    "input_tokens_details": None,
    "output_tokens": 1,
    "output_tokens_details": None,
    "total_tokens": 2,
}


def _message() -> dict[str, Any]:
    text = {"type": "output_text", "text": "done"}
    return {"type": "message", "role": "assistant", "id": "msg_1", "content": [text]}


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _codex_home(home: Path, model_url: str, daemon: str, sandbox_mode: str) -> None:
    (home / "config.toml").write_text(
        'model = "gpt-5"\nmodel_provider = "standin"\napproval_policy = "never"\n'
        f'sandbox_mode = "{sandbox_mode}"\n\n[model_providers.standin]\nname = "standin"\n'
        f'base_url = "{model_url}"\nwire_api = "responses"\nrequires_openai_auth = false\n'
    )
    (home / "environments.toml").write_text(
        'default = "devbox"\ninclude_local = false\n\n[[environments]]\nid = "devbox"\n'
        f"url = {json.dumps(daemon)}\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--codex", default=shutil.which("codex") or "codex", help="the codex CLI")
    parser.add_argument("--daemon", required=True, help="the exec-server's ws:// URL")
    parser.add_argument("--cmd", required=True, help="the command the stand-in model runs")
    parser.add_argument("--workdir", help="the tool call's workdir (default: Codex's own)")
    parser.add_argument("--cwd", help="where Codex runs (default: a new temporary directory)")
    parser.add_argument(
        "--sandbox-mode",
        default="workspace-write",
        choices=("read-only", "workspace-write", "danger-full-access"),
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for codex exec")
    args = parser.parse_args(argv)

    server = _StandIn(args.cmd, args.workdir)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="codex-check-") as scratch:
        home = Path(scratch) / "home"
        home.mkdir()
        cwd = Path(args.cwd) if args.cwd else Path(scratch) / "work"
        cwd.mkdir(exist_ok=True)
        model_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        _codex_home(home, model_url, args.daemon, args.sandbox_mode)
        try:
            ran = subprocess.run(
                [args.codex, "exec", "--skip-git-repo-check", "run the command"],
                cwd=cwd,
                env={**os.environ, "CODEX_HOME": str(home)},
                capture_output=True,
                text=True,
                timeout=args.timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            print(f"codex_check: {args.codex}: {exc}", file=sys.stderr)
            return 2
        finally:
            server.shutdown()
    print(f"codex exec exited {ran.returncode}")
    print("\n".join((ran.stdout + ran.stderr).splitlines()[-12:]))
    print("--- what Codex told the model the command did:")
    outputs = [
        item.get("output")
        for request in server.requests
        for item in request.get("input", [])
        if isinstance(item, dict)
        and item.get("call_id") == _FIRST_ANSWER_ID
        and item.get("type", "").endswith("call_output")
    ]
    for output in outputs:
        print(output if isinstance(output, str) else json.dumps(output))
    return 0 if outputs else 1


if __name__ == "__main__":
    sys.exit(main())
