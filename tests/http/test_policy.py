"""Operator policy for http/request: disabling, valueEnvVar allow-list, host allow-list."""

from __future__ import annotations

import json

import pytest

from tests.http.helpers import LOOPBACK, body, request
from tests.http.servers import HttpServer
from tests.support.client import RpcError
from tests.support.daemon import RunningDaemon

ENV = {"name": "X-Token", "value": "Bearer ", "valueEnvVar": "HTTP_TEST_TOKEN"}


def _capability(daemon: RunningDaemon) -> bool:
    with daemon.session() as client:
        flag: bool = client.request("environment/info")["capabilities"]["httpHeaderEnvVars"]
    return flag


def test_value_env_var_refused_by_default(
    daemon_factory: type[RunningDaemon], server: HttpServer
) -> None:
    """Without --http-header-env-var, valueEnvVar is refused and the capability is false."""
    daemon = daemon_factory(LOOPBACK, env={"HTTP_TEST_TOKEN": "secret"})
    assert _capability(daemon) is False
    with daemon.session() as client, pytest.raises(RpcError) as error:
        request(client, server.url("/echo"), headers=[ENV])
    assert (error.value.code, error.value.message) == (
        -32602,
        "http/request header X-Token: valueEnvVar is not allowed on this executor",
    )
    assert server.recorder.requests == []


def test_value_env_var_allowed_by_flag(
    daemon_factory: type[RunningDaemon], server: HttpServer
) -> None:
    """An allowed variable is appended to the value; other names are still refused."""
    daemon = daemon_factory(
        [*LOOPBACK, "--http-header-env-var", "HTTP_TEST_TOKEN"],
        env={"HTTP_TEST_TOKEN": "secret", "OTHER_SECRET": "x"},
    )
    assert _capability(daemon) is True
    with daemon.session() as client:
        echo = json.loads(body(request(client, server.url("/echo"), headers=[ENV])))
        assert ["x-token", "Bearer secret"] in echo["headers"]
        other = {**ENV, "valueEnvVar": "OTHER_SECRET"}
        with pytest.raises(RpcError) as error:
            request(client, server.url("/echo"), headers=[other])
    assert error.value.message.endswith("valueEnvVar is not allowed on this executor")


def test_value_env_var_allowed_but_unset(
    daemon_factory: type[RunningDaemon], server: HttpServer
) -> None:
    """An allowed variable that is unset gets the reference's error."""
    daemon = daemon_factory(
        [*LOOPBACK, "--http-header-env-var", "HTTP_TEST_TOKEN"], unset=["HTTP_TEST_TOKEN"]
    )
    with daemon.session() as client, pytest.raises(RpcError) as error:
        request(client, server.url("/echo"), headers=[ENV])
    assert (error.value.code, error.value.message) == (
        -32602,
        "http/request header X-Token requires executor environment variable HTTP_TEST_TOKEN",
    )


def test_disabled(daemon_factory: type[RunningDaemon], server: HttpServer) -> None:
    """--http-requests off refuses every request and advertises nothing."""
    daemon = daemon_factory([*LOOPBACK, "--http-requests", "off", "--http-header-env-var", "HOME"])
    assert _capability(daemon) is False
    with daemon.session() as client, pytest.raises(RpcError) as error:
        request(client, server.url("/echo"))
    assert (error.value.code, error.value.message) == (
        -32602,
        "http/request is disabled on this executor",
    )
    assert server.recorder.requests == []


def test_host_allow_list_by_name(daemon_factory: type[RunningDaemon], server: HttpServer) -> None:
    """Only hosts whose name is listed are reached, redirect hops included."""
    daemon = daemon_factory(
        [*LOOPBACK, "--http-allow-host", "localhost", "--http-allow-host", "*.x"]
    )
    with daemon.session() as client:
        assert request(client, server.url("/echo", host="localhost"))["status"] == 200
        with pytest.raises(RpcError) as error:
            request(client, server.url("/echo"))
        assert (error.value.code, error.value.message) == (
            -32602,
            "http/request to 127.0.0.1 is not allowed on this executor",
        )
        hop = server.url("/echo")
        with pytest.raises(RpcError) as error:
            request(client, server.url(f"/redirect/302?to={hop}", host="localhost"))
        assert error.value.message == "http/request to 127.0.0.1 is not allowed on this executor"
    assert [seen.path for seen in server.recorder.requests] == ["/echo", f"/redirect/302?to={hop}"]


def test_host_allow_list_by_address(
    daemon_factory: type[RunningDaemon], server: HttpServer
) -> None:
    """An address entry matches the address connected to, whatever name led there; a name
    that resolves elsewhere is refused before anything is sent."""
    listed = daemon_factory(["--http-allow-host", "127.0.0.1/32"])  # no --http-allow-private
    with listed.session() as client:
        assert request(client, server.url("/echo", host="localhost"))["status"] == 200
        assert request(client, server.url("/echo"))["status"] == 200
    other = daemon_factory([*LOOPBACK, "--http-allow-host", "127.0.0.2"])
    with other.session() as client:
        with pytest.raises(RpcError) as error:
            request(client, server.url("/echo", host="localhost"))
        assert error.value.code == -32602
        assert error.value.message.startswith(
            "http/request to localhost is not allowed on this executor: "
        )
        assert error.value.message.endswith(" is not an allowed address")
        with pytest.raises(RpcError) as error:
            request(client, server.url("/echo"))
        assert error.value.message == "http/request to 127.0.0.1 is not allowed on this executor"
    assert len(server.recorder.requests) == 2


def test_env_var_headers_do_not_follow_a_cross_origin_redirect(
    daemon_factory: type[RunningDaemon], server: HttpServer
) -> None:
    """A header filled from the executor's environment goes to the origin asked for, and
    not on to another one a redirect names; a plain header does."""
    daemon = daemon_factory(
        [*LOOPBACK, "--http-header-env-var", "HTTP_TEST_TOKEN"], env={"HTTP_TEST_TOKEN": "secret"}
    )
    headers = [ENV, {"name": "X-Plain", "value": "kept"}]
    with daemon.session() as client:
        same = server.url("/echo")
        echo = json.loads(
            body(request(client, server.url(f"/redirect/307?to={same}"), headers=headers))
        )
        assert ["x-token", "Bearer secret"] in echo["headers"]
        other = server.url("/echo", host="localhost")  # another origin, the same server
        echo = json.loads(
            body(request(client, server.url(f"/redirect/307?to={other}"), headers=headers))
        )
    assert ["x-plain", "kept"] in echo["headers"]
    assert "x-token" not in [name for name, _ in echo["headers"]]
    first, second = server.recorder.requests[-2:]
    assert ("x-token", "Bearer secret") in first.headers
    assert all("secret" not in value for _, value in second.headers)
