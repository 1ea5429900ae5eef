"""Structured logs on stderr (stdout belongs to the protocol): text or one JSON object per line."""

from __future__ import annotations

import json
import logging
import sys
import time

__all__ = ["configure_logging"]


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    """Send every log record to stderr in ``fmt`` (``text`` or ``json``) at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # websockets logs every connection at INFO; ours already does.
    logging.getLogger("executor.websocket.protocol").setLevel(logging.WARNING)
