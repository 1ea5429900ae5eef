"""``http/request``: HTTP(S) from the executor's host, buffered or streamed (protocol.md §5.26).

``url`` parses request URLs as the reference does, ``params`` validates a request against the
wire rules and the operator's ``policy``, ``client`` performs it (redirects, deadline) over
``wire`` connections (h11) that ``egress`` opens where the policy allows and ``pools`` keeps
per session, and ``handlers`` speaks JSON-RPC: answers, body deltas, per-connection streams.
"""

from __future__ import annotations

from executor.http.handlers import http_routes
from executor.http.policy import HttpPolicy

__all__ = ["HttpPolicy", "http_routes"]
