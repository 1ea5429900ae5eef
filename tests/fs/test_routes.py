"""``fs_routes`` serves each filesystem method of ``executor.protocol.methods`` exactly once."""

from __future__ import annotations

from collections import Counter

from executor.fs import fs_routes
from executor.fs.watch import watch_routes
from executor.protocol import methods
from executor.sandbox.host import LocalHost


def test_every_fs_method_has_one_async_route() -> None:
    """One route per ``FS_*`` request name (``fs/watchMissing``'s in its own table), each run
    off the loop; ``fs/missingChanged`` is a notification, with no route."""
    names = {
        value
        for name, value in vars(methods).items()
        if name.startswith("FS_") and isinstance(value, str)
    } - {methods.FS_MISSING_CHANGED}
    assert names and all(name.startswith("fs/") for name in names)
    routes = [*fs_routes(LocalHost()), *watch_routes()]
    assert Counter(r.method for r in routes) == Counter(names)
    assert all(r.is_async and r.params is not None for r in routes)
