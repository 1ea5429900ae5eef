"""Structured logs on stderr (stdout belongs to the protocol): text or one JSON object per line.

A record may carry fields (``record.audit``, a dict: see ``executor.audit``): in JSON they are
top-level keys beside ``message``; in text, ``key=value`` pairs after it, a value quoted as
JSON when it is not a plain word, so a peer's text cannot start a line of its own.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any, Final

__all__ = ["configure_logging"]

_TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: A text value written as is: printable ASCII but for space, ``"``, ``=`` and ``\``;
#: anything else (and the empty string) is JSON-quoted, control characters escaped.
_PLAIN: Final = re.compile(r"[!#-<>-\[\]-~]+")


def _fields(record: logging.LogRecord) -> dict[str, Any] | None:
    fields = getattr(record, "audit", None)
    return fields if isinstance(fields, dict) else None


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = _fields(record)
        if fields:
            for key, value in fields.items():
                entry.setdefault(key, value)  # never over the record's own keys
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def _text_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str) and _PLAIN.fullmatch(value):
        return value
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = _fields(record)
        if not fields:
            return text
        pairs = " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
        # After the traceback, if any, the pairs would not be on the record's first line.
        head, newline, rest = text.partition("\n")
        return f"{head} {pairs}{newline}{rest}"


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    """Send every log record to stderr in ``fmt`` (``text`` or ``json``) at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(_TextFormatter(_TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # websockets logs every connection at INFO; ours already does.
    logging.getLogger("executor.websocket.protocol").setLevel(logging.WARNING)
