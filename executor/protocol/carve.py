"""A large message's base64 field read without JSON-parsing it (``fs/writeFile``'s
``dataBase64``), with exactly the result a full parse gives, or not at all.

orjson builds a 16 MiB string at ~550 MB/s (it scans every byte for escapes): ~29 ms of the
~58 ms a 16 MiB ``fs/writeFile`` cost the daemon. Base64 needs no escapes, so the field's
bytes can become the string as they are (~3 ms) once it is known that they are base64.

Why the result equals a full parse: the field's bytes are checked to be base64 (no quote,
backslash, control or non-ASCII byte), so they are a string's plain content in the message's
tokens whatever those are. The message is parsed with those bytes replaced by a random
marker of plain characters (the same tokens, so valid exactly when the original is), and the
shortcut is taken only when the marker came out as ``params.dataBase64`` of a JSON-RPC
object: then that literal was this field's value and nothing else (no other key of the same
name, nested or repeated, won over it). Anything else, and the caller parses as usual.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, Final

__all__ = ["CARVE_MIN", "loads_carving"]

try:  # pragma: no cover - exercised in whichever environment is installed
    import pybase64

    def _is_base64(data: memoryview) -> bool:
        try:
            pybase64.b64decode(data, validate=True)
        except ValueError:
            return False
        return True

except ImportError:  # pragma: no cover
    # The standard library's strict check is a regular expression, slower than the parse it
    # would save: no shortcut without the fast extra.
    _is_base64 = None  # type: ignore[assignment]

#: Below this size a message is parsed as usual (the shortcut only pays for large fields).
CARVE_MIN: Final = 1 << 20
_KEY: Final = b'"dataBase64":"'


def loads_carving(
    data: bytes | bytearray | memoryview | str,
    loads: Callable[[bytes], Any],
    minimum: int = CARVE_MIN,
) -> Any | None:
    """``loads(data)`` for a message whose ``params.dataBase64`` is at least ``minimum``
    bytes of base64, with that field's bytes taken as they are; None when it is not such a
    message (or the shortcut cannot tell), and then nothing was decided: parse ``data``."""
    if _is_base64 is None or isinstance(data, str) or len(data) < minimum:
        return None
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        return None
    haystack = _searchable(data, view)
    key = haystack.find(_KEY)
    if key < 0:
        return None
    # Found inside a key (``"a\\"dataBase64":"``) or in another object, the marker below does
    # not come out as params.dataBase64: no need to tell those apart here.
    start = key + len(_KEY)
    end = haystack.find(b'"', start)
    if end - start < minimum // 2 or not _is_base64(view[start:end]):
        return None
    marker = secrets.token_hex(16)
    try:
        value = loads(b"".join((view[:start], marker.encode(), view[end:])))
    except Exception:  # whatever the parser refuses: the usual parse says it in its words
        return None
    params = value.get("params") if type(value) is dict else None
    if type(params) is not dict or params.get("dataBase64") != marker:
        return None
    params["dataBase64"] = str(view[start:end], "ascii")
    return value


def _searchable(data: bytes | bytearray | memoryview, view: memoryview) -> Any:
    """Something with ``find`` over exactly ``data``'s bytes, without copying them (a large
    frame's payload is a view of a whole mapping, which has ``find``)."""
    if not isinstance(data, memoryview):
        return data
    whole: Any = data.obj
    if hasattr(whole, "find") and view.contiguous and len(whole) == len(view):
        return whole
    return bytes(view)
