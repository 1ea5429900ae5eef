"""Connecting: a TCP handshake that never completes is abandoned at the deadline, or as soon
as the client that asked goes away — not when the kernel gives up minutes later."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import psutil
import pytest

from tests.http.helpers import request
from tests.support.client import RpcError, WsClient
from tests.support.daemon import RunningDaemon


@pytest.fixture
def unanswered_port() -> Iterator[int]:
    """A port whose accept queue is full: the kernel drops further SYNs, so connects hang."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port))
    probe = socket.socket()
    probe.settimeout(0.3)
    try:
        probe.connect(("127.0.0.1", port))
    except TimeoutError:
        pass  # the premise holds: a connect here hangs
    except OSError as exc:  # e.g. net.ipv4.tcp_abort_on_overflow=1 answers with a reset
        pytest.skip(f"this kernel does not leave connects to a full queue hanging: {exc}")
    else:
        pytest.skip("this kernel accepted a connection beyond a full accept queue")
    finally:
        probe.close()
    yield port
    filler.close()
    listener.close()


def _connecting(daemon_pid: int, port: int) -> int:
    """The daemon's sockets still trying to reach ``port``."""
    process = psutil.Process(daemon_pid)
    listing = getattr(process, "net_connections", None) or process.connections  # psutil < 6
    return sum(
        1
        for conn in listing(kind="tcp")
        if conn.raddr and conn.raddr.port == port and conn.status == psutil.CONN_SYN_SENT
    )


def _wait_until(condition: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_a_hanging_connect_fails_at_the_deadline(client: WsClient, unanswered_port: int) -> None:
    url = f"http://127.0.0.1:{unanswered_port}/"
    started = time.monotonic()
    with pytest.raises(RpcError) as error:
        request(client, url, timeoutMs=400)
    assert 0.3 < time.monotonic() - started < 3
    assert error.value.message == f"http/request failed: error sending request for url ({url})"


def test_a_hanging_connect_is_abandoned_when_its_client_leaves(
    shared_daemon: RunningDaemon, unanswered_port: int
) -> None:
    url = f"http://127.0.0.1:{unanswered_port}/"
    client = shared_daemon.session()
    params = {"method": "GET", "url": url, "requestId": "hang"}
    client.send({"id": client.next_id(), "method": "http/request", "params": params})
    assert _wait_until(lambda: _connecting(shared_daemon.pid, unanswered_port) == 1)
    client.close()
    assert _wait_until(lambda: _connecting(shared_daemon.pid, unanswered_port) == 0)
    with shared_daemon.session() as again:  # and the daemon serves on
        assert again.request("environment/status") is not None
