"""The client's API against a real daemon: processes, stdin, terminals, signals, files,
sandbox profiles, stdio, tokens and the synchronous facade."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from pathlib import Path

import pytest

from executor.client import ClientError, ServerError, SessionFailed, connect
from executor.client.paths import sandbox_params
from executor.client.process import StdinClosed
from executor.client.sync import connect_sync
from tests.client.conftest import arun
from tests.support.daemon import RunningDaemon, executor_command
from tests.support.enforcement import skip_unless


def test_start_output_wait_and_info(daemon: RunningDaemon) -> None:
    async def main() -> None:
        async with connect(daemon.url) as env:
            assert env.info["platformOs"] == "linux"
            assert env.session_id and env.state == "connected"
            proc = await env.start(
                ["/bin/sh", "-c", "echo out; echo err >&2; exit 3"],
                cwd="/tmp",
                env={"PATH": "/usr/bin:/bin"},
            )
            assert proc.sandbox_type == "none"
            streams = {chunk.stream: chunk.data async for chunk in proc.output()}
            assert streams == {"stdout": b"out\n", "stderr": b"err\n"}
            result = await proc.wait()
            assert (result.exit_code, result.sandbox_denied) == (3, False)

    arun(main())


def test_without_env_the_command_gets_the_executors_core_variables(daemon: RunningDaemon) -> None:
    async def main() -> None:
        async with connect(daemon.url) as env:
            result = await env.run(["sh", "-c", 'echo "$PATH"'], cwd="/tmp")
            assert b"/bin" in result.stdout
            result = await env.run(["/usr/bin/env"], cwd="/tmp", env={"ONLY": "this"})
            assert result.stdout == b"ONLY=this\n"

    arun(main())


def test_stdin_writes_and_a_closed_stdin(daemon: RunningDaemon) -> None:
    async def main() -> None:
        async with connect(daemon.url) as env:
            proc = await env.start(["sh", "-c", "read x; echo got:$x"], cwd="/tmp", stdin=True)
            await proc.write(b"hello\n")
            assert (await proc.collect()).stdout == b"got:hello\n"
            closed = await env.start(["sleep", "5"], cwd="/tmp")
            with pytest.raises(StdinClosed):
                await closed.write(b"x")
            assert await closed.terminate() is True
            assert (await closed.wait()).exit_code == 137

    arun(main())


#: Says it is ready only once it waits: a ^C that reaches ``sh -c`` while it runs a builtin
#: (the ``echo``) is held by dash until its next child ends, and a ``sleep 30`` started
#: meanwhile would never see it.
WAITER = "import time; print('ready', flush=True); time.sleep(30)"


def test_a_terminal_echoes_and_an_interrupt_reaches_it(daemon: RunningDaemon) -> None:
    async def main() -> None:
        async with connect(daemon.url) as env:
            script = f'stty size; read x; echo got:$x; exec python3 -c "{WAITER}"'
            proc = await env.start(["sh", "-c", script], cwd="/tmp", tty=True)
            output = proc.output()
            seen = b""
            while b"24 80" not in seen:
                seen += (await anext(output)).data
            await proc.write(b"typed\n")
            while b"got:typed" not in seen or b"ready" not in seen:
                chunk = await anext(output)
                assert chunk.stream == "pty"
                seen += chunk.data
            await proc.signal("interrupt")
            result = await proc.wait()
            assert result.exit_code != 0
            async for _ in output:
                pass
            assert proc.closed

    arun(main())


def test_closing_stdin_ends_the_commands_input(daemon: RunningDaemon) -> None:
    async def main() -> None:
        async with connect(daemon.url) as env:
            proc = await env.start(["wc", "-c"], cwd="/tmp", stdin=True)
            await proc.write(b"twelve bytes")
            await proc.close_stdin()
            result = await proc.collect()
            assert (result.exit_code, result.stdout.strip()) == (0, b"12")

    arun(main())


def test_a_terminal_of_a_given_size_follows_a_resize(daemon: RunningDaemon) -> None:
    async def main() -> None:
        async with connect(daemon.url) as env:
            proc = await env.start(
                ["sh", "-c", "stty size; read x; stty size"], cwd="/tmp", tty=True, size=(30, 100)
            )
            output = proc.output()
            seen = b""
            while b"30 100" not in seen:
                seen += (await anext(output)).data
            await proc.resize(40, 120)
            await proc.write(b"\n")
            while b"40 120" not in seen:
                seen += (await anext(output)).data
            assert (await proc.wait()).exit_code == 0

    arun(main())


def test_server_errors_carry_code_and_method(daemon: RunningDaemon) -> None:
    async def main() -> None:
        async with connect(daemon.url) as env:
            with pytest.raises(ServerError) as caught:
                await env.start(["/no/such/program"], cwd="/tmp")
            assert caught.value.code == -32603 and caught.value.method == "process/start"
            assert caught.value.kind == "spawnNotFound"  # the error's data, as the server said
            assert caught.value.data == {"kind": "spawnNotFound"}
            with pytest.raises(ServerError) as unknown:
                await env.request("no/such/method", {})
            assert unknown.value.code == -32601 and unknown.value.kind is None
            proc = await env.start(["sleep", "5"], cwd="/tmp", process_id="same")
            with pytest.raises(ClientError, match="already in use"):
                await env.start(["true"], cwd="/tmp", process_id="same")
            await proc.terminate()

    arun(main())


def test_fs_roundtrip(daemon: RunningDaemon, tmp_path: Path) -> None:
    base = str(tmp_path)

    async def main() -> None:
        async with connect(daemon.url) as env:
            fs = env.fs
            await fs.create_directory(f"{base}/d/e")
            await fs.write_file(f"{base}/d/a.txt", b"alpha")
            assert await fs.read_file(f"{base}/d/a.txt") == b"alpha"
            meta = await fs.get_metadata(f"{base}/d/a.txt")
            assert (meta.is_file, meta.size) == (True, 5)
            names = sorted(entry.file_name for entry in await fs.read_directory(f"{base}/d"))
            assert names == ["a.txt", "e"]
            big = bytes(range(256)) * 9000  # 2.3 MB: three blocks
            assert await fs.write_stream(f"{base}/big", [big[:100], big[100:]]) == len(big)
            blocks = [block async for block in fs.read_stream(f"{base}/big")]
            assert len(blocks) == 3 and b"".join(blocks) == big
            await fs.copy(f"{base}/d", f"{base}/copy", recursive=True)
            assert await fs.read_file(f"{base}/copy/a.txt") == b"alpha"
            walked = await fs.walk(base)
            assert any(e["path"].endswith("/copy/e") for e in walked["entries"])
            assert await fs.canonicalize(f"{base}/d/../d/a.txt") == f"{base}/d/a.txt"
            await fs.remove(f"{base}/copy")
            assert not await fs.exists(f"{base}/copy")
            with pytest.raises(ServerError) as missing:
                await fs.read_file(f"{base}/nope")
            assert missing.value.code == -32004

    arun(main())


def test_text_that_is_not_unicode_is_refused_not_altered(
    daemon: RunningDaemon, tmp_path: Path
) -> None:
    """A file name that is not UTF-8 reaches exactly that file (paths travel as ``file:``
    URIs, percent-encoded). An argument with a lone surrogate cannot be sent as JSON text:
    the call fails with a ClientError naming the method instead of sending U+FFFD in its
    place, and the session goes on."""
    raw = bytes(tmp_path) + b"/\xff"
    with open(raw, "wb") as file:
        file.write(b"the odd one")
    (tmp_path / "\ufffd").write_bytes(b"not this one")
    odd = os.fsdecode(raw)

    async def main() -> None:
        async with connect(daemon.url) as env:
            assert await env.fs.read_file(odd) == b"the odd one"
            with pytest.raises(ClientError, match="cannot send process/start"):
                await env.start(["/bin/echo", odd])
            assert (await env.run(["/bin/echo", "still here"])).stdout == b"still here\n"

    arun(main())


def test_stdio_transport(tmp_path: Path) -> None:
    command = " ".join([*executor_command(), "serve", "--listen", "stdio", "--log-level", "error"])

    async def main() -> None:
        async with connect(f"stdio:{command}") as env:
            assert env.info["platformOs"] == "linux"
            result = await env.run(["echo", "over stdio"], cwd="/tmp")
            assert result.stdout == b"over stdio\n"
            await env.fs.write_file(f"{tmp_path}/s.txt", b"via pipes")
            assert await env.fs.read_file(f"{tmp_path}/s.txt") == b"via pipes"

    arun(main())


def test_a_bearer_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    authed = RunningDaemon(["--ws-auth", "capability-token", "--ws-token-file", str(token_file)])
    try:

        async def main() -> None:
            async with connect(authed.url, token="s3cret-token") as env:
                assert (await env.run(["true"], cwd="/tmp")).exit_code == 0
            with pytest.raises(ClientError, match="401"):
                await connect(authed.url, token="wrong")
            with pytest.raises(ClientError, match="401"):
                await connect(authed.url)

        arun(main())
    finally:
        authed.stop()


def linux_sandbox_available() -> bool:
    """Landlock, namespaces and seccomp all work here."""
    if not sys.platform.startswith("linux"):
        return False
    from executor_linux.probe import host_support

    support = host_support()
    return bool(support.landlock_abi and support.namespaces and support.seccomp)


@pytest.mark.enforcement
def test_a_profile_name_runs_sandboxed(daemon: RunningDaemon) -> None:
    skip_unless(linux_sandbox_available(), "Landlock, seccomp and namespaces are needed")
    # Not under /tmp: the workspace profile makes /tmp writable as a whole.
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="client-sandbox-") as top:
        base = Path(top)
        work = base / "work"
        work.mkdir()
        outside = base / "outside"

        async def main() -> None:
            async with connect(daemon.url) as env:
                script = f"echo x > {work}/inside && cat {work}/inside; echo y > {outside}"
                proc = await env.start(
                    ["/bin/sh", "-c", script],
                    cwd=str(work),
                    env={"PATH": "/usr/bin:/bin"},
                    sandbox="workspace",
                    workspace_roots=[str(work)],
                )
                assert proc.sandbox_type == "linuxSeccomp"
                result = await proc.collect()
                assert result.stdout == b"x\n"  # the workspace is writable
                assert result.exit_code != 0 and result.sandbox_denied  # the rest is not
                assert not outside.exists()
                readonly = await env.run(
                    ["/bin/sh", "-c", f"cat {work}/inside; echo z > {work}/inside"],
                    cwd=str(work),
                    env={"PATH": "/usr/bin:/bin"},
                    sandbox="read-only",
                )
                assert readonly.stdout == b"x\n" and readonly.sandbox_denied
                assert (work / "inside").read_text() == "x\n"

        arun(main())


def test_an_unknown_profile_is_a_client_error(daemon: RunningDaemon) -> None:
    async def main() -> None:
        async with connect(daemon.url) as env:
            with pytest.raises(ClientError, match="no-such-profile"):
                await env.start(["true"], sandbox="no-such-profile")

    arun(main())


def test_the_synchronous_facade(daemon: RunningDaemon, tmp_path: Path) -> None:
    with connect_sync(daemon.url) as env:
        assert env.state == "connected"
        result = env.run(["sh", "-c", "echo sync"], cwd="/tmp", timeout=10)
        assert (result.exit_code, result.stdout) == (0, b"sync\n")
        proc = env.start(["sh", "-c", "read x; echo $x; echo $x >&2"], cwd="/tmp", stdin=True)
        proc.write(b"line\n")
        assert [c.data for c in proc.output()] in ([b"line\n", b"line\n"], [b"line\nline\n"])
        assert proc.wait(timeout=10).exit_code == 0
        env.fs.write_file(f"{tmp_path}/f", b"sync fs")
        assert b"".join(env.fs.read_stream(f"{tmp_path}/f", block_size=3)) == b"sync fs"
        assert env.request("environment/status") == {"status": "ready"}


def test_stdio_loss_fails_at_once(tmp_path: Path) -> None:
    """A stdio session cannot be resumed (a new server is a new registry): when the server
    goes away, the session fails at once, not after the deadline."""
    pid_file = tmp_path / "pid"
    script = tmp_path / "server.sh"
    command = " ".join(executor_command())
    script.write_text(
        f"#!/bin/sh\necho $$ > {pid_file}\nexec {command} serve --listen stdio --log-level error\n"
    )
    script.chmod(0o755)

    async def main() -> None:
        env = await connect(f"stdio:{script}", recovery_deadline=30)
        proc = await env.start(["sleep", "30"], cwd="/tmp")
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        with pytest.raises(SessionFailed, match="cannot be resumed"):
            await proc.wait()
        assert env.state == "failed"
        await env.close()

    arun(main(), timeout=10)


@pytest.mark.enforcement
def test_a_proxy_mode_profile_runs_behind_the_executors_proxy(daemon: RunningDaemon) -> None:
    """The wire's permission profile only says "network enabled": a proxy-mode profile goes
    as networkProxy with its host patterns, never as the full network."""
    skip_unless(sys.platform.startswith("linux") and os.geteuid() == 0, "proxy mode needs root")
    probe = (
        "import os, urllib.request as u\n"
        "print(os.environ.get('HTTPS_PROXY', 'no proxy'))\n"
        "try:\n"
        "    u.urlopen('http://not-listed.invalid/', timeout=5)\n"
        "except Exception as exc:\n"
        "    print(getattr(exc, 'code', exc))\n"
    )

    async def main() -> None:
        async with connect(daemon.url) as env:
            with tempfile.TemporaryDirectory() as workspace:
                result = await env.run(
                    [sys.executable, "-I", "-c", probe],
                    cwd=workspace,
                    sandbox="workspace-proxy",
                    workspace_roots=[workspace],
                )
        lines = result.stdout.decode().splitlines()
        assert lines[0].startswith("http://127.0.0.1:")
        assert lines[1] == "403"

    arun(main())


def test_a_network_override_goes_into_the_wire_intent() -> None:
    """``network=`` overrides a profile's network as ``executor run --network`` does: off
    takes it away (a proxy too), on gives the full network and keeps a proxy a proxy."""
    off = sandbox_params("workspace-proxy", network=False)
    assert off["sandbox"]["permissions"]["network"] == "restricted"
    assert "networkProxy" not in off and "enforceManagedNetwork" not in off
    on = sandbox_params("workspace", network=True)
    assert on["sandbox"]["permissions"]["network"] == "enabled" and "networkProxy" not in on
    proxied = sandbox_params("workspace-proxy", network=True)
    assert proxied["sandbox"]["permissions"]["network"] == "enabled"
    assert proxied["networkProxy"]["proxy"]["domains"] and proxied["enforceManagedNetwork"]
    assert sandbox_params("workspace")["sandbox"]["permissions"]["network"] == "restricted"
    # The profile itself is left as it was.
    assert sandbox_params("workspace-network")["sandbox"]["permissions"]["network"] == "enabled"
    with pytest.raises(ClientError, match="profile name"):
        sandbox_params({"permissions": {}}, network=True)


def test_a_network_override_needs_a_profile(daemon: RunningDaemon) -> None:
    async def main() -> None:
        async with connect(daemon.url) as env:
            with pytest.raises(ClientError, match="sandbox="):
                await env.start(["true"], network=False)

    arun(main())
