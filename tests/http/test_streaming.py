"""http/request with streamResponse: the answer after headers, then seq-numbered body deltas."""

from __future__ import annotations

import time

import pytest

from tests.http.helpers import DELTA, deltas, joined, request
from tests.http.servers import HttpServer
from tests.support.client import RpcError, WsClient
from tests.support.daemon import RunningDaemon

MIB = 1024 * 1024


def test_chunked_body_streams_in_order(client: WsClient, server: HttpServer) -> None:
    """The result has an empty body and precedes the deltas; seqs count from 1; done is last."""
    result = request(client, server.url("/chunks"), requestId="s1", streamResponse=True)
    assert result["status"] == 200
    assert result["bodyBase64"] == ""
    found = deltas(client, "s1")
    assert [d["seq"] for d in found] == list(range(1, len(found) + 1))
    assert joined(found) == b"part0\npart1\npart2\n"
    assert found[-1] == {
        "requestId": "s1",
        "seq": len(found),
        "deltaBase64": "",
        "done": True,
        "error": None,
    }
    assert all(not d["done"] and d["error"] is None for d in found[:-1])
    arrivals = client.inbox.arrivals
    answer = next(i for i, m in enumerate(arrivals) if m.get("result") is result)
    first = next(i for i, m in enumerate(arrivals) if m.get("method") == DELTA)
    assert answer < first


def test_multi_mib_body_in_deltas_of_at_most_one_mib(client: WsClient, server: HttpServer) -> None:
    """A 3.5 MiB body arrives whole, each delta at most 1 MiB decoded."""
    size = 3 * MIB + MIB // 2
    request(client, server.url(f"/bytes/{size}"), requestId="big", streamResponse=True)
    found = deltas(client, "big")
    data = joined(found)
    assert len(data) == size
    assert data == (bytes(range(256)) * 256 * 60)[:size]
    assert max(len(joined([d])) for d in found) <= MIB


def test_body_failure_ends_with_an_error_delta(client: WsClient, server: HttpServer) -> None:
    """A body cut short mid-stream ends with done:true and the reference's error text."""
    request(client, server.url("/cut"), requestId="cut", streamResponse=True)
    found = deltas(client, "cut")
    assert joined(found) == b"x" * 10
    assert found[-1]["done"] is True
    assert found[-1]["deltaBase64"] == ""
    assert found[-1]["error"] == "error decoding response body"


def test_duplicate_active_request_id(client: WsClient, server: HttpServer) -> None:
    """A second stream with an id still streaming is refused; buffered reuse is fine; it frees."""
    request(client, server.url("/drip"), requestId="dup", streamResponse=True, timeoutMs=1500)
    with pytest.raises(RpcError) as error:
        request(client, server.url("/echo"), requestId="dup", streamResponse=True)
    assert (error.value.code, error.value.message) == (
        -32602,
        "http/request streamResponse requestId `dup` is already active",
    )
    assert request(client, server.url("/echo"), requestId="dup")["status"] == 200
    assert deltas(client, "dup")[-1]["error"] == "error decoding response body"
    request(client, server.url("/chunks"), requestId="dup", streamResponse=True)
    assert deltas(client, "dup")[-1]["error"] is None


def test_disconnect_closes_the_stream(shared_daemon: RunningDaemon, server: HttpServer) -> None:
    """When the connection goes away, the upstream socket is closed."""
    with shared_daemon.session() as client:
        request(client, server.url("/drip"), requestId="gone", streamResponse=True)
        client.notification(DELTA)
    assert server.recorder.client_gone.wait(5)


def test_streams_are_per_connection(shared_daemon: RunningDaemon, server: HttpServer) -> None:
    """The same requestId may stream on two connections at once."""
    with shared_daemon.session() as one, shared_daemon.session() as two:
        request(one, server.url("/drip"), requestId="same", streamResponse=True, timeoutMs=800)
        request(two, server.url("/chunks"), requestId="same", streamResponse=True)
        assert joined(deltas(two, "same")) == b"part0\npart1\npart2\n"
        assert deltas(one, "same")[-1]["error"] == "error decoding response body"


def test_deadline_mid_body(client: WsClient, server: HttpServer) -> None:
    """timeoutMs covers the body: a stalled stream ends with an error delta at the deadline."""
    started = time.monotonic()
    request(client, server.url("/drip"), requestId="slow", streamResponse=True, timeoutMs=500)
    found = deltas(client, "slow")
    assert 0.4 < time.monotonic() - started < 3
    assert joined(found) == b"y" * 10
    assert found[-1]["error"] == "error decoding response body"
