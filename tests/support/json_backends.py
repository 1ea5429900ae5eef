"""The daemon's two JSON backends: orjson when installed, the standard library otherwise.

``executor.protocol.jsonrpc`` picks one at import time. Tests that must hold for both load a
second copy of the module with orjson hidden (in process), or start a daemon whose
``PYTHONPATH`` puts a stand-in ``orjson`` that refuses to import (out of process).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from executor.protocol import jsonrpc

__all__ = ["BACKENDS", "daemon_env", "jsonrpc_module"]

#: ``orjson`` (the ``fast`` extra, as installed for the tests) and ``stdlib``.
BACKENDS = ("orjson", "stdlib")

#: What the standard library's parser says about ``{`` (orjson says something else).
STDLIB_TRUNCATED_DETAIL = "Expecting property name enclosed in double quotes"


def jsonrpc_module(backend: str) -> ModuleType:
    """``executor.protocol.jsonrpc`` as loaded with ``backend``."""
    if backend == "orjson":
        return jsonrpc
    saved = sys.modules.get("orjson")
    sys.modules["orjson"] = None  # type: ignore[assignment]  # makes `import orjson` fail
    try:
        spec = importlib.util.spec_from_file_location("_jsonrpc_stdlib", jsonrpc.__file__)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del sys.modules["orjson"]
        else:
            sys.modules["orjson"] = saved
    return module


def daemon_env(backend: str, scratch: Path) -> dict[str, str]:
    """Environment additions for a daemon subprocess that uses ``backend``."""
    if backend == "orjson":
        return {}
    shim = scratch / "no-orjson"
    shim.mkdir(exist_ok=True)
    (shim / "orjson.py").write_text('raise ImportError("orjson is hidden by the test")\n')
    paths = [str(shim), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(paths)}
