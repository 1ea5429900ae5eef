"""Filesystem calls under the policy floor (``serve --require-sandbox``).

A call without ``sandbox`` sees the floor's view; a call with one sees its own, once
``PolicyFloor`` has found that it grants nothing the floor does not. One thing the rules do
not hold is the request's *aliases* (requested paths that name their real path through a
symlink, ``aliases.py``): the view lets a call traverse them and their ancestors. Only those
the floor's view shows anyway are kept, so an alias cannot reveal a name the floor hides.
"""

from __future__ import annotations

from executor.floor import PolicyFloor
from executor.fs.aliases import alias_paths
from executor.fs.resolve import Resolver
from executor.fs.view import SandboxView
from executor.protocol.intent import SandboxIntent
from executor.sandbox.hostview import HostView

__all__ = ["floored_resolver"]


def floored_resolver(host: HostView, intent: SandboxIntent | None, floor: PolicyFloor) -> Resolver:
    """The resolver of a filesystem call under ``floor``; ``InvalidParams`` if ``intent``
    grants more than the floor (blocking: materializes both)."""
    rules, floor_rules, source = floor.filesystem_rules(intent, host)
    if not rules.filesystem_restricted:
        return Resolver()  # only when the floor itself leaves the filesystem open
    aliases = alias_paths(source, host)
    if intent is not None and aliases and floor_rules.filesystem_restricted:
        shown = SandboxView(floor_rules, alias_paths(floor.intent(), host))
        aliases = frozenset(alias for alias in aliases if shown.visibility(alias).exists)
    return Resolver(SandboxView(rules, aliases))
