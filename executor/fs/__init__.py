"""The filesystem methods (``fs/*``) and the streamed file handles of ``fs/open``.

Modules, each with one job:

* ``handlers`` — the routes: params to operations, run in worker threads, errors translated;
* ``handles`` — per-connection file handles (ids, cap, descriptor lifetime);
* ``resolve`` — race-free path resolution to directory descriptors (``openat2`` fast path,
  ``O_NOFOLLOW`` walk otherwise), applying a sandbox view;
* ``view`` — what a sandbox's rules let a call see of a path;
* ``inodes`` — which files a sandbox denies by identity (hard links into denied trees);
* ``files``, ``metadata``, ``directories``, ``walk``, ``remove``, ``copy`` — the operations;
* ``syscalls`` — ``openat2`` and ``statx`` through ctypes;
* ``failures`` — the reference's own error messages;
* ``capabilities`` — ``capabilityRoots/discoverV1`` on the same resolvers, with its bounded
  reads (``capability_reads``) and a manifest's declarations (``plugin_declarations``).
* ``watch`` — ``fs/watchMissing`` (ids and one watch per connection), with what one call
  watches (``watch_plan``), the daemon's shared inotify descriptor (``watch_hub``) and the
  system calls (``inotify``); docs/watch-missing.md.

docs/filesystem.md records the observed reference behaviour and our deliberate differences.
"""

from __future__ import annotations

from executor.fs.handlers import FsLimits, fs_routes

__all__ = ["FsLimits", "fs_routes"]
