"""Source text shared by the small probes that tests run inside a sandbox (``python3 -c``)."""

from __future__ import annotations

#: ``out`` (what the probe prints as JSON) and ``attempt(name, action)``: ``ok`` or the errno
#: name of the ``OSError`` the action raised. Needs ``errno`` imported by the probe.
ATTEMPT = """
out = {}


def attempt(name, action):
    try:
        action()
        out[name] = "ok"
    except OSError as exc:
        out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
"""
