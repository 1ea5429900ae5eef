"""SOCKS5 on real sockets: names, IPv4 and IPv6 literals, refused commands and versions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.http.servers import HttpServer
from tests.netproxy.conftest import MakeProxy
from tests.netproxy.helpers import EchoServer, RunningProxy, connect_proxy, exchange, socks5

SUCCEEDED, NOT_ALLOWED, COMMAND_NOT_SUPPORTED, ADDRESS_TYPE_NOT_SUPPORTED = 0, 2, 7, 8
NO_ACCEPTABLE_METHOD = 0x1FF  # helpers.socks5 marks a method refusal with 0x100


@pytest.mark.enforcement
def test_a_listed_name_is_connected_and_an_unlisted_one_refused(
    proxy: RunningProxy, echo: EchoServer
) -> None:
    code, sock = socks5(proxy, "localhost", echo.port)
    with sock:
        assert code == SUCCEEDED
        assert exchange(sock, b"over socks") == b"over socks"
    code, sock = socks5(proxy, "example.invalid", echo.port)
    with sock:
        assert code == NOT_ALLOWED
        assert sock.recv(1) == b""  # and closed
    allowed, refused = proxy.decisions
    assert (allowed.protocol, allowed.allowed, allowed.address) == ("socks5", True, "127.0.0.1")
    assert (refused.protocol, refused.allowed, refused.reason) == (
        "socks5",
        False,
        "not in allow list",
    )


@pytest.mark.enforcement
def test_ipv4_literals_only_when_listed(make_proxy: MakeProxy, echo2: EchoServer) -> None:
    """127.0.0.2: another loopback address, named only by its literal."""
    unlisted = make_proxy(allow=("*", "localhost"))
    code, sock = socks5(unlisted, "127.0.0.2", echo2.port)
    sock.close()
    assert code == NOT_ALLOWED
    assert unlisted.refusals()[0].reason == "IP literal not listed"
    listed = make_proxy(allow=("127.0.0.2",))
    code, sock = socks5(listed, "127.0.0.2", echo2.port)
    with sock:
        assert code == SUCCEEDED and exchange(sock, b"v4") == b"v4"


@pytest.mark.enforcement
def test_ipv6_literals_only_when_listed(make_proxy: MakeProxy, echo6: EchoServer) -> None:
    unlisted = make_proxy(allow=("*", "localhost"))
    code, sock = socks5(unlisted, "::1", echo6.port)
    sock.close()
    assert code == NOT_ALLOWED
    (refusal,) = unlisted.refusals()
    assert (refusal.host, refusal.reason) == ("::1", "IP literal not listed")
    listed = make_proxy(allow=("::1",))
    code, sock = socks5(listed, "::1", echo6.port)
    with sock:
        assert code == SUCCEEDED and exchange(sock, b"v6") == b"v6"
    assert listed.decisions[0].address == "::1"


@pytest.mark.enforcement
@pytest.mark.parametrize(("command", "name"), [(2, "BIND"), (3, "UDP ASSOCIATE")])
def test_bind_and_udp_associate_are_not_supported(
    proxy: RunningProxy, echo: EchoServer, command: int, name: str
) -> None:
    accepted = echo.accepted
    code, sock = socks5(proxy, "localhost", echo.port, command=command)
    with sock:
        assert code == COMMAND_NOT_SUPPORTED
        assert sock.recv(1) == b""
    (decision,) = proxy.decisions
    assert not decision.allowed and decision.reason == f"SOCKS5 {name} is not supported"
    assert echo.accepted == accepted  # nothing was connected for it
    code, sock = socks5(proxy, "localhost", echo.port)  # CONNECT still works
    with sock:
        assert code == SUCCEEDED


def test_only_the_no_authentication_method_is_offered(proxy: RunningProxy) -> None:
    code, sock = socks5(proxy, "localhost", 1, methods=b"\x02")  # user/password only
    with sock:
        assert code == NO_ACCEPTABLE_METHOD
        assert sock.recv(1) == b""


def test_an_unknown_address_type_is_refused(proxy: RunningProxy) -> None:
    with connect_proxy(proxy) as sock:
        sock.sendall(b"\x05\x01\x00")
        assert sock.recv(2) == b"\x05\x00"
        sock.sendall(b"\x05\x01\x00\x09")  # ATYP 9
        reply = sock.recv(10)
    assert reply[:2] == bytes((5, ADDRESS_TYPE_NOT_SUPPORTED))
    assert proxy.decisions == []


@pytest.mark.enforcement
def test_socks4_is_rejected(proxy: RunningProxy, echo: EchoServer) -> None:
    with connect_proxy(proxy) as sock:
        sock.sendall(b"\x04\x01" + echo.port.to_bytes(2, "big") + bytes((127, 0, 0, 1)) + b"\x00")
        assert sock.recv(8) == b"\x00\x5b" + bytes(6)
        assert sock.recv(1) == b""
    assert proxy.decisions == []


def test_a_non_ascii_name_is_refused_as_not_a_host_name(proxy: RunningProxy) -> None:
    code, sock = socks5(proxy, "bücher.example", 80)
    sock.close()
    assert code == NOT_ALLOWED
    assert proxy.refusals()[0].reason == "not a host name"


def test_curl_socks5_hostname(proxy: RunningProxy, origin: HttpServer) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")

    def curl(url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "curl",
                "-sS",
                "--max-time",
                "10",
                "--socks5-hostname",
                f"127.0.0.1:{proxy.port}",
                url,
            ],
            capture_output=True,
            text=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            timeout=20,
            check=False,
        )

    result = curl(origin.url("/echo", host="localhost"))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["path"] == "/echo"
    refused = curl(origin.url("/echo", host="example.invalid"))
    assert refused.returncode != 0
    assert [(d.protocol, d.allowed) for d in proxy.decisions] == [
        ("socks5", True),
        ("socks5", False),
    ]
