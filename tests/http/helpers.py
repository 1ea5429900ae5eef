"""Small helpers of the http/request tests."""

from __future__ import annotations

import base64
from typing import Any

from tests.support.client import WsClient

DELTA = "http/request/bodyDelta"
#: The serve option a daemon needs to reach these tests' loopback servers (refused by default).
LOOPBACK = ["--http-allow-private"]


def request(client: WsClient, url: str, method: str = "GET", **extra: Any) -> Any:
    """``http/request`` with a fresh requestId unless given; returns the result."""
    params = {"method": method, "url": url, "requestId": extra.pop("requestId", "r"), **extra}
    return client.request("http/request", params, timeout=20)


def body(result: dict[str, Any]) -> bytes:
    """The decoded buffered body."""
    return base64.b64decode(result["bodyBase64"])


def deltas(client: WsClient, request_id: str, timeout: float = 15) -> list[dict[str, Any]]:
    """Every body delta of ``request_id`` up to the final one."""
    found: list[dict[str, Any]] = []
    while not found or not found[-1]["done"]:
        note = client.notification(
            DELTA, timeout=timeout, where=lambda n: n["params"]["requestId"] == request_id
        )
        found.append(note["params"])
    return found


def joined(found: list[dict[str, Any]]) -> bytes:
    """The body carried by ``found`` deltas."""
    return b"".join(base64.b64decode(delta["deltaBase64"]) for delta in found)
