"""environmentConfig/read (protocol.md §5.3; docs/environment-config.md) against real files.

One daemon on loopback serves the module. Its ``CODEX_HOME``, ``HOME`` and system directory
(``EXECUTOR_CODEX_SYSTEM_DIR``, standing in for ``/etc/codex``) are directories of the test;
each test writes the files it needs there and in a project tree of its own. Expected answers
are those the reference (Codex exec-server 0.171.0) gave for the same files.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from executor.environment_config.toml_read import MAX_CONFIG_BYTES
from executor.protocol.paths import to_uri
from tests.support.client import RpcError, WsClient
from tests.support.daemon import RunningDaemon

METHOD = "environmentConfig/read"
EMPTY = {"layers": [], "cloudInsertionIndex": 0}


class Host:
    """The daemon's configuration directories, emptied before each test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.system = root / "etc-codex"
        self.codex_home = root / "codex-home"
        self.home = root / "home"
        for directory in (self.system, self.codex_home, self.home):
            directory.mkdir()

    def env(self) -> dict[str, str]:
        return {
            "CODEX_HOME": str(self.codex_home),
            "HOME": str(self.home),
            "EXECUTOR_CODEX_SYSTEM_DIR": str(self.system),
        }

    def reset(self) -> None:
        for directory in (self.system, self.codex_home):
            for entry in directory.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Host:
    return Host(tmp_path_factory.mktemp("config-host").resolve())


@pytest.fixture(scope="module")
def daemon(host: Host) -> Iterator[RunningDaemon]:
    running = RunningDaemon(env=host.env())
    yield running
    running.stop()


@pytest.fixture
def client(host: Host, daemon: RunningDaemon) -> Iterator[WsClient]:
    host.reset()
    connection = daemon.session()
    yield connection
    connection.close()


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def trust(*directories: Path) -> str:
    return "".join(f'[projects."{d}"]\ntrust_level = "trusted"\n' for d in directories)


def read(
    client: WsClient,
    cwd: Path | str,
    config: list[list[str]] | None = None,
    requirements: list[list[str]] | None = None,
) -> Any:
    return client.request(
        METHOD,
        {
            "cwd": cwd if isinstance(cwd, str) else to_uri(str(cwd)),
            "configPaths": config if config is not None else [["mcp_servers"]],
            "requirementsPaths": requirements if requirements is not None else [],
        },
    )


def layer(source: str, base_dir: Path, toml: str) -> dict[str, str]:
    return {"source": source, "baseDir": to_uri(str(base_dir)), "toml": toml}


def error_of(client: WsClient, params: dict[str, Any]) -> tuple[int, str]:
    with pytest.raises(RpcError) as caught:
        client.request(METHOD, params)
    return caught.value.code, caught.value.message


def test_the_real_clients_call_with_nothing_configured(host: Host, client: WsClient) -> None:
    """The exact answer to the call every Codex session makes, on a host with no config."""
    workspace = host.root / "plain-workspace"
    workspace.mkdir(exist_ok=True)
    answer = read(client, workspace, [["mcp_servers"]], [["mcp_servers"]])
    assert answer == {
        "userHomeDir": to_uri(str(host.home)),
        "codexHomeDir": to_uri(str(host.codex_home)),
        "hostname": socket.gethostname(),
        "config": EMPTY,
        "requirements": EMPTY,
    }
    assert list(answer) == ["userHomeDir", "codexHomeDir", "hostname", "config", "requirements"]


def test_capability_is_advertised(client: WsClient) -> None:
    """The client only asks when ``environmentConfigRead`` is true."""
    capabilities = client.request("environment/info")["capabilities"]
    assert capabilities["environmentConfigRead"] is True


def test_layers_come_in_the_reference_order(host: Host, client: WsClient) -> None:
    """system, user, trusted project layers root-first, legacy managed; then requirements."""
    repo = host.root / "order" / "repo"
    cwd = repo / "sub" / "ws"
    cwd.mkdir(parents=True, exist_ok=True)
    write(repo / ".git", "gitdir: elsewhere\n")  # a .git file marks the project root
    write(repo / ".codex/config.toml", 'model = "root"\n[mcp_servers.proj]\nurl = "http://p"\n')
    write(repo / "sub/.codex/config.toml", '[mcp_servers.sub]\ncommand = "sub"\n')
    write(cwd / ".codex/config.toml", '[mcp_servers.ws]\ncommand = "ws"\nargs = ["a", "b"]\n')
    write(
        host.codex_home / "config.toml",
        'model = "user"\n[mcp_servers.zeta]\ncommand = "z"\n[mcp_servers.alpha]\n'
        'url = "http://a"\nenv = { B = "1", A = "2" }\n' + trust(repo),
    )
    write(host.system / "config.toml", '[mcp_servers.sys]\ncommand = "sys"\n')
    write(host.system / "requirements.toml", '[mcp_servers.req]\nidentity = { command = "x" }\n')
    write(
        host.system / "managed_config.toml",
        'approval_policy = "never"\nsandbox_mode = "workspace-write"\n'
        '[mcp_servers.managed]\ncommand = "m"\n',
    )
    answer = read(
        client,
        cwd,
        [["mcp_servers"]],
        [["mcp_servers"], ["allowed_sandbox_modes"], ["allowed_approval_policies"]],
    )
    system, user = host.system / "config.toml", host.codex_home / "config.toml"
    managed = host.system / "managed_config.toml"
    assert answer["config"] == {
        "layers": [
            layer(f"system ({system})", host.system, '[mcp_servers.sys]\ncommand = "sys"\n'),
            layer(
                f"user ({user})",
                host.codex_home,
                '[mcp_servers.zeta]\ncommand = "z"\n\n[mcp_servers.alpha]\nurl = "http://a"\n\n'
                '[mcp_servers.alpha.env]\nB = "1"\nA = "2"\n',
            ),
            layer(
                f"project ({repo / '.codex/config.toml'})",
                repo / ".codex",
                '[mcp_servers.proj]\nurl = "http://p"\n',
            ),
            layer(
                f"project ({repo / 'sub/.codex/config.toml'})",
                repo / "sub/.codex",
                '[mcp_servers.sub]\ncommand = "sub"\n',
            ),
            layer(
                f"project ({cwd / '.codex/config.toml'})",
                cwd / ".codex",
                '[mcp_servers.ws]\ncommand = "ws"\nargs = ["a", "b"]\n',
            ),
            layer(
                f"legacy managed_config.toml ({managed})",
                host.system,
                '[mcp_servers.managed]\ncommand = "m"\n',
            ),
        ],
        "cloudInsertionIndex": 1,
    }
    assert answer["requirements"] == {
        "layers": [
            layer(
                str(host.system / "requirements.toml"),
                host.system,
                '[mcp_servers.req.identity]\ncommand = "x"\n',
            ),
            layer(
                str(managed),
                host.system,
                'allowed_approval_policies = ["never"]\n'
                'allowed_sandbox_modes = ["read-only", "workspace-write"]\n',
            ),
        ],
        "cloudInsertionIndex": 1,
    }


def test_key_paths_select_like_the_reference(host: Host, client: WsClient) -> None:
    """Document order; whole tables; scalar ancestors kept; empty tables kept; empty layers go."""
    write(
        host.codex_home / "config.toml",
        "b = 2\na = 5\nlist = [1, 2]\n[t]\nx = 1\ny = 2\n[t.deep]\nz = 3\n[empty]\n",
    )
    workspace = host.root / "select"
    workspace.mkdir(exist_ok=True)

    def toml(*paths: list[str]) -> str | None:
        layers = read(client, workspace, list(paths))["config"]["layers"]
        return layers[0]["toml"] if layers else None

    assert toml(["a"], ["b"]) == "b = 2\na = 5\n"  # the file's order, not the request's
    assert toml(["t"]) == "[t]\nx = 1\ny = 2\n\n[t.deep]\nz = 3\n"
    assert toml(["t", "y"], ["t", "deep", "z"]) == "[t]\ny = 2\n\n[t.deep]\nz = 3\n"
    assert toml(["t", "y"], ["t"]) == toml(["t"])  # the shorter path wins
    assert toml(["a", "b", "c"]) == "a = 5\n"  # a scalar on the way is kept whole
    assert toml(["list", "0"]) == "list = [1, 2]\n"
    assert toml(["t", "missing"]) == "[t]\n"  # the table stays, empty
    assert toml(["empty"]) == "[empty]\n"
    assert toml(["missing"]) is None  # nothing selected: no layer at all


def test_trust_decides_which_project_layers_count(host: Host, client: WsClient) -> None:
    """Untrusted directories are left out; the project root's trust covers its subdirectories."""
    repo = host.root / "trust" / "repo"
    cwd = repo / "ws"
    write(repo / ".git/HEAD", "ref: refs/heads/main\n")
    write(repo / ".codex/config.toml", 'model = "root"\n')
    write(cwd / ".codex/config.toml", "model = = broken\n")  # untrusted: a parse error is ignored
    untrusted = f'[projects."{cwd}"]\ntrust_level = "untrusted"\n'
    write(host.codex_home / "config.toml", trust(repo) + untrusted)

    def sources() -> list[str]:
        layers = read(client, cwd, [["model"]])["config"]["layers"]
        return [entry["source"] for entry in layers]

    assert sources() == [f"project ({repo / '.codex/config.toml'})"]
    write(cwd / ".codex/config.toml", 'model = "ws"\n')
    write(host.codex_home / "config.toml", trust(repo))
    assert sources() == [
        f"project ({repo / '.codex/config.toml'})",
        f"project ({cwd / '.codex/config.toml'})",
    ]
    write(host.codex_home / "config.toml", 'model = "user"\n')
    assert sources() == [f"user ({host.codex_home / 'config.toml'})"]


def test_an_empty_git_directory_is_no_project_root(host: Host, client: WsClient) -> None:
    """As in the reference: ``.git`` must hold ``HEAD`` to mark the root; markers can be set."""
    repo = host.root / "markers" / "repo"
    cwd = repo / "ws"
    (repo / ".git").mkdir(parents=True, exist_ok=True)
    write(repo / ".codex/config.toml", 'model = "root"\n')
    cwd.mkdir(exist_ok=True)
    write(host.codex_home / "config.toml", trust(repo))
    assert read(client, cwd, [["model"]])["config"]["layers"] == []
    write(host.codex_home / "config.toml", 'project_root_markers = [".hg"]\n' + trust(repo))
    (repo / ".hg").mkdir(exist_ok=True)
    assert len(read(client, cwd, [["model"]])["config"]["layers"]) == 1


def test_a_linked_worktree_is_trusted_through_its_main_checkout(
    host: Host, client: WsClient
) -> None:
    """A consistent worktree record leads to the main checkout; hooks come from there."""
    main, worktree = host.root / "wt" / "main", host.root / "wt" / "feature"
    admin = main / ".git/worktrees/feature"
    write(main / ".git/HEAD", "ref: refs/heads/main\n")
    write(admin / "HEAD", "ref: refs/heads/feature\n")
    write(admin / "commondir", "../..\n")
    write(admin / "gitdir", f"{worktree / '.git'}\n")
    write(worktree / ".git", f"gitdir: {admin}\n")
    write(main / ".codex/config.toml", '[hooks]\nfrom = "main"\n')
    write(worktree / ".codex/config.toml", 'model = "wt"\n[hooks]\nfrom = "wt"\n')
    write(host.codex_home / "config.toml", trust(main))
    answer = read(client, worktree, [["model"], ["hooks"]])
    assert answer["config"]["layers"] == [
        layer(
            f"project ({worktree / '.codex/config.toml'})", worktree / ".codex", 'model = "wt"\n'
        ),
        layer(
            f"project ({main / '.codex/config.toml'})", main / ".codex", '[hooks]\nfrom = "main"\n'
        ),
    ]
    (admin / "commondir").unlink()  # an inconsistent record: no main checkout, no trust
    assert read(client, worktree, [["model"], ["hooks"]])["config"]["layers"] == []


def test_parameter_errors_and_their_order(host: Host, client: WsClient) -> None:
    """Malformed URI, then the key paths, then a URI of another host; all -32602."""
    bad: list[tuple[dict[str, Any], str]] = [
        ({"cwd": "file:///", "configPaths": [], "requirementsPaths": []},
         "at least one config or requirements path is required"),
        ({"cwd": "file:///", "configPaths": [["a"]], "requirementsPaths": [[]]},
         "TOML paths must contain at least one key segment"),
        ({"cwd": "relative", "configPaths": [], "requirementsPaths": []},
         "invalid URI: relative URL without a base"),
        ({"cwd": "http://x/y", "configPaths": [["a"]], "requirementsPaths": []},
         "unsupported path URI scheme `http`"),
        ({"cwd": "file://elsewhere/x", "configPaths": [], "requirementsPaths": []},
         "at least one config or requirements path is required"),
        ({"cwd": "file://elsewhere/x", "configPaths": [["a"]], "requirementsPaths": []},
         "'file://elsewhere/x' is invalid on 'linux'"),
    ]  # fmt: skip
    for params, message in bad:
        assert error_of(client, params) == (-32602, message), params
    assert error_of(client, {"cwd": "file:///"})[0] == -32602  # fields are required
    # A cwd that does not exist is not an error; neither is `file:name` (it is `/name`).
    assert read(client, "file:///no/such/dir")["config"] == EMPTY
    assert read(client, "file:ws")["config"] == EMPTY


def test_file_errors_name_the_file_and_leave_the_connection_usable(
    host: Host, client: WsClient
) -> None:
    """Each kind of file fails in the reference's framing; the next request still works."""
    user, requirements = host.codex_home / "config.toml", host.system / "requirements.toml"
    workspace = host.root / "errors"
    workspace.mkdir(exist_ok=True)
    params = {"cwd": to_uri(str(workspace)), "configPaths": [["a"]], "requirementsPaths": []}
    prefix = "failed to load executor-local config: "
    cases: list[tuple[Path, str | bytes, str]] = [
        (user, "x = 1\ny = = 2\n", f"{user}:2:5: "),
        (user, b'a = "\xff"\n', f"Failed to read config file {user}: "
                                "invalid utf-8 sequence of 1 bytes from index 5"),
        (user, "a = " + "[" * 81 + "]" * 81 + "\n",
         f"{user}:1:85: cannot recurse further; max recursion depth met"),
        (user, "[" + ".".join(["k"] * 81) + "]\n", f"{user}:1:1: recursion limit"),
        (user, "a = 99999999999999999999\n", f"{user}:1:5: invalid type: integer "
                                             "`99999999999999999999` as i128"),
        (requirements, "x = 1\ny = = 2\n", f"failed to parse requirements layer {requirements}: "
                                           "TOML parse error at line 2, column 5\n  |\n"
                                           "2 | y = = 2\n  |     ^\n"),
    ]  # fmt: skip
    for path, text, expected in cases:
        host.reset()
        write(path, text)
        code, message = error_of(client, params)
        assert code == -32603
        assert message.startswith(prefix + expected), message
    host.reset()
    (host.codex_home / "config.toml").mkdir()
    assert error_of(client, params) == (
        -32603,
        f"{prefix}Failed to read config file {user}: path `{user}` is not a file",
    )
    host.reset()
    write(user, "a = 1\n")
    assert read(client, workspace, [["a"]])["config"]["layers"][0]["toml"] == "a = 1\n"


def test_a_fifo_or_an_oversized_file_is_refused_without_blocking(
    host: Host, client: WsClient
) -> None:
    """Nothing but a regular file is opened, and none over the size limit is read."""
    user = host.codex_home / "config.toml"
    workspace = host.root / "limits"
    workspace.mkdir(exist_ok=True)
    params = {"cwd": to_uri(str(workspace)), "configPaths": [["a"]], "requirementsPaths": []}
    os.mkfifo(user)
    assert error_of(client, params)[1].endswith(f"path `{user}` is not a file")
    user.unlink()
    with user.open("wb") as handle:
        handle.truncate(MAX_CONFIG_BYTES + 1)
    code, message = error_of(client, params)
    assert code == -32603
    assert f"file is larger than {MAX_CONFIG_BYTES} bytes" in message


def test_codex_home_must_be_a_directory(host: Host, client: WsClient) -> None:
    """CODEX_HOME is checked on every read, with the reference's messages."""
    moved = host.root / "codex-home-moved"
    host.codex_home.rename(moved)
    try:
        params = {"cwd": "file:///", "configPaths": [["a"]], "requirementsPaths": []}
        assert error_of(client, params) == (
            -32603,
            f'failed to find Codex home: CODEX_HOME points to "{host.codex_home}", '
            "but that path does not exist",
        )
        host.codex_home.write_text("")
        assert error_of(client, params)[1].endswith("but that path is not a directory")
        host.codex_home.unlink()
    finally:
        moved.rename(host.codex_home)


def test_without_codex_home_the_home_directory_is_used(
    daemon_factory: type[RunningDaemon], tmp_path: Path
) -> None:
    """No CODEX_HOME: ``$HOME/.codex``, reported even when it does not exist."""
    home = tmp_path.resolve() / "home"
    write(home / ".codex/config.toml", 'model = "from-home"\n')
    system = tmp_path / "etc"
    system.mkdir()
    daemon = daemon_factory(
        env={"HOME": str(home), "EXECUTOR_CODEX_SYSTEM_DIR": str(system)}, unset=["CODEX_HOME"]
    )
    with daemon.session() as client:
        answer = read(client, "file:///", [["model"]])
    assert answer["codexHomeDir"] == to_uri(str(home / ".codex"))
    assert answer["config"]["layers"][0]["toml"] == 'model = "from-home"\n'


def test_before_initialize_the_method_is_refused(daemon: RunningDaemon) -> None:
    """The handshake gate names the method's family, as the reference does."""
    with daemon.client() as client:
        params = {"cwd": "file:///", "configPaths": [], "requirementsPaths": []}
        assert error_of(client, params) == (
            -32600,
            "client must call initialize before using environment config methods",
        )
