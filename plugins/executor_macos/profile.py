"""Render a ``RuleSet`` as a Seatbelt profile: SBPL text plus ``-D`` parameters (pure).

A profile is made of these sections, in this order. In SBPL the last matching rule decides,
so the order carries meaning: grants first, denies last.

1. ``base.sbpl``: ``(deny default)`` and what every process needs (exec, fork, signals within
   the sandbox, sysctls, ``/dev/null``, terminals).
2. ``preferences.sbpl`` when ``/`` is readable, or ``platform.sbpl`` when it is not but the
   system libraries are (``:minimal``): what the loader needs to start programs.
3. Readable trees: one ``file-read*`` allow; each readable root is a ``subpath``, minus the
   denied paths inside it (``require-not``).
4. Ancestors of readable roots that are not readable themselves: metadata only, so that
   ``getcwd``/``realpath`` can walk up to a readable root.
5. Writable trees: one ``file-write*`` allow; each writable root is a ``subpath``, minus every
   read-only or denied path inside it, by ``literal`` and by ``subpath`` (the ``literal`` keeps
   a missing carve-out such as ``.codex`` from being created).
6. Network, one of four (see ``network()``): ``network-restricted.sbpl`` (no network);
   ``network-enabled.sbpl`` (everything); proxy mode, ``network-proxy.sbpl`` plus an outbound
   allow per loopback port of the route (and ``network-local-binding.sbpl`` when the command
   may listen); loopback isolation, ``network-isolated.sbpl`` plus an outbound allow per
   ``local_ports`` entry. Every mode with network ends with ``network-services.sbpl`` (the Mach
   services DNS configuration and TLS trust need). Ports are the only values the renderer
   writes into the text itself: integers it checked and formats.
7. Denies: every deny rule (reads and writes, except the deeper rules that re-open a subtree),
   every deny glob as two anchored regexes (the match, and everything below it), and
   ``file-write-unlink`` denies on the directories whose renaming would carry a carve-out out
   of its place.

Parameter names say what a path is: ``READ_<i>``, ``WRITE_<i>`` and ``DENY_<i>`` are rules
with that access; ``TRAVERSE_<i>`` ancestors (section 4), ``GLOB_<i>`` and ``GLOB_<i>_BELOW``
deny-glob regexes, ``ANCHOR_<i>`` un-renamable directories. A name ending in ``_ALIAS`` is the
other spelling of the same location (``/tmp`` vs ``/private/tmp``, see ``sbpl.spellings``).

Nothing is canonicalized here: the materializer already resolved the paths that exist.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Final

from executor.errors import SandboxUnavailable
from executor.sandbox import Access, NetworkMode, PathRule, RuleOrigin, RuleSet, is_within
from executor_macos.sbpl import glob_to_ere, param, spellings

__all__ = ["SeatbeltProfile", "render_profile"]

_INDENT: Final = "  "
_MAX_PORT: Final = 65535


@dataclass(frozen=True, slots=True, kw_only=True)
class SeatbeltProfile:
    """Policy text and its parameters, in the order they are passed."""

    text: str
    params: tuple[tuple[str, str], ...]

    def arguments(self) -> tuple[str, ...]:
        """The ``sandbox-exec`` options: ``-p TEXT -DNAME=VALUE ...``."""
        return ("-p", self.text, *(f"-D{name}={value}" for name, value in self.params))


def render_profile(rules: RuleSet) -> SeatbeltProfile:
    """The Seatbelt profile enforcing ``rules``.

    Raises ``SandboxUnavailable`` for a path ``sandbox-exec`` cannot carry exactly (a NUL
    byte, or bytes that are not UTF-8).
    """
    return _Renderer(rules).render()


@cache
def _resource(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _grants(access: Access, operation: Access) -> bool:
    """Whether a rule with ``access`` allows the ``operation`` (READ: reading, WRITE: writing)."""
    return access is Access.WRITE or (operation is Access.READ and access is Access.READ)


class _Params:
    """Parameter names and values, in the order they were defined."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self._by_key: dict[tuple[str, str], tuple[str, ...]] = {}
        self._counters: dict[str, int] = {}

    def names(self, kind: str, path: str) -> tuple[str, ...]:
        """The names of every spelling of ``path`` as a ``kind`` parameter (created once)."""
        key = (kind, path)
        if key not in self._by_key:
            index = self._counters.get(kind, 0)
            self._counters[kind] = index + 1
            base = f"{kind}_{index}"
            self._by_key[key] = self._define(base, spellings(path))
        return self._by_key[key]

    def _define(self, base: str, values: tuple[str, ...]) -> tuple[str, ...]:
        names = tuple(base if i == 0 else f"{base}_ALIAS" for i in range(len(values)))
        for name, value in zip(names, values, strict=True):
            self.define(name, value)
        return names

    def define(self, name: str, value: str) -> str:
        """Record ``name=value`` after checking that ``sandbox-exec`` can carry it exactly."""
        _check_value(value)
        self.values[name] = value
        return name


def _check_value(value: str, what: str = "path") -> None:
    if "\0" in value:
        raise SandboxUnavailable(
            f"the {what} {_show(value)} contains a NUL byte, which sandbox-exec cannot carry"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        shown = _show(value)
        raise SandboxUnavailable(
            f"the {what} {shown} is not valid UTF-8; a Seatbelt profile cannot name it exactly"
        ) from None


def _show(value: str) -> str:
    """``value`` for an error message: undecodable bytes and control characters as ``\\xNN``."""
    try:
        text = value.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        text = value.encode("utf-8", "backslashreplace").decode("utf-8")
    text = "".join(
        f"\\x{ord(char):02x}" if ord(char) < 32 or ord(char) == 127 else char for char in text
    )
    return f"`{text}`"


def _form(head: str, filters: Iterable[str]) -> str:
    """``(head filter...)``, one filter per line."""
    body = "".join(f"\n{_INDENT}{line}" for item in filters for line in item.split("\n"))
    return f"({head}{body})"


def _path_filters(names: Iterable[str], *, literal: bool) -> Iterator[str]:
    for name in names:
        if literal:
            yield f"(literal {param(name)})"
        yield f"(subpath {param(name)})"


def _excluding(
    subpaths: Iterable[str], excluded: Iterable[str], values: Mapping[str, str], *, literal: bool
) -> Iterator[str]:
    """One filter per ``subpaths`` name: that tree, minus the ``excluded`` ones inside it."""
    candidates = list(excluded)
    for name in subpaths:
        inside = [other for other in candidates if is_within(values[other], values[name])]
        nots = [f"(require-not {item})" for item in _path_filters(inside, literal=literal)]
        tree = f"(subpath {param(name)})"
        yield _form("require-all", [tree, *nots]) if nots else tree


class _Structure:
    """How the rules nest, seen by one operation (reading or writing)."""

    def __init__(self, rules: RuleSet, operation: Access, ignored: frozenset[str]) -> None:
        self.rules = rules
        self.operation = operation
        #: Root path -> the rules inside it that withdraw the operation again.
        self.carve_outs: dict[str, list[PathRule]] = {}
        self.roots = [rule for rule in rules.rules if self.is_root(rule)]
        for rule in rules.rules:
            if rule.path in ignored or _grants(rule.access, operation):
                continue
            if _grants(self.parent_access(rule), operation):
                owner = self.owner(rule)
                if owner is not None:
                    self.carve_outs.setdefault(owner.path, []).append(rule)

    def parent_access(self, rule: PathRule) -> Access:
        parent = self.rules.parent_rule(rule)
        return Access.DENY if parent is None else parent.access

    def is_root(self, rule: PathRule) -> bool:
        """``rule`` opens a tree for the operation that its parent does not."""
        return _grants(rule.access, self.operation) and not _grants(
            self.parent_access(rule), self.operation
        )

    def owner(self, rule: PathRule) -> PathRule | None:
        """The root whose tree ``rule`` is carved out of."""
        current = self.rules.parent_rule(rule)
        while current is not None and not self.is_root(current):
            current = self.rules.parent_rule(current)
        return current


class _Renderer:
    def __init__(self, rules: RuleSet) -> None:
        if rules.filesystem_restricted:
            self.rules = rules
        else:
            # An open filesystem is rendered as one writable root, "/", with nothing carved out.
            self.rules = RuleSet(filesystem_restricted=True, rules=(PathRule("/", Access.WRITE),))
        self.network_mode = rules.network
        self.route = rules.route
        self.isolate_loopback = rules.isolate_loopback
        self.local_ports = rules.local_ports
        self.globs = rules.deny_globs if rules.filesystem_restricted else ()
        self.params = _Params()
        # Deny-glob matches found at materialization are denied by the glob's own regexes,
        # which also cover files created later; stating each match again adds nothing.
        covered = frozenset(
            rule.path
            for rule in self.rules.rules
            if rule.origin is RuleOrigin.DENY_GLOB and self.rules.denied_by_glob(rule.path)
        )
        self.structure = {
            op: _Structure(self.rules, op, covered) for op in (Access.READ, Access.WRITE)
        }
        #: Deny rules stated in the last section ("/" alone is what ``deny default`` says).
        self.stated = sorted(
            (
                rule
                for rule in self.rules.rules
                if rule.access is Access.DENY and rule.path != "/" and rule.path not in covered
            ),
            key=lambda rule: rule.path.count("/"),
        )
        self.carved = [
            rule
            for rule in self.rules.rules
            if rule.access is not Access.WRITE and rule.path != "/" and rule.path not in covered
        ]
        # Name the parameters of the rules the profile refers to in rule order (shallowest
        # first), whatever the sections below mention first. Rules that change nothing (same
        # access as their parent) are not referred to.
        referred = {rule.path for rule in self.stated}
        for structure in self.structure.values():
            referred.update(rule.path for rule in structure.roots)
            referred.update(rule.path for rules in structure.carve_outs.values() for rule in rules)
        for rule in self.rules.rules:
            if rule.path in referred:
                self.names(rule)

    def render(self) -> SeatbeltProfile:
        sections = [_resource("base.sbpl")]
        sections += self.runtime()
        sections += self.grants(Access.READ)
        sections += self.traverse()
        sections += self.grants(Access.WRITE)
        sections += self.network()
        sections += self.denies()
        text = "\n".join(section.rstrip("\n") + "\n" for section in sections)
        return SeatbeltProfile(text=text, params=tuple(self.params.values.items()))

    def readable(self, path: str) -> bool:
        return _grants(self.rules.access_of(path), Access.READ)

    def writable(self, path: str) -> bool:
        return self.rules.access_of(path) is Access.WRITE

    def names(self, rule: PathRule) -> tuple[str, ...]:
        return self.params.names(rule.access.value.upper(), rule.path)

    # --- sections 2 and 6: fixed text ---------------------------------------------------------

    def runtime(self) -> list[str]:
        if self.readable("/"):
            return [_resource("preferences.sbpl")]
        if self.readable("/usr/lib"):
            return [_resource("platform.sbpl")]
        return []

    def network(self) -> list[str]:
        """The network section: by the same precedence as ``RuleSet.needs`` (no network, then
        a proxy route, then loopback isolation, then everything)."""
        if self.network_mode is NetworkMode.RESTRICTED:
            return [_resource("network-restricted.sbpl")]
        services = _resource("network-services.sbpl")
        if self.route is not None:
            # The route lists the relayed local_ports too; stating them again costs nothing.
            ports = _ports([*self.route.ports, *self.local_ports])
            # No port at all (never built by the daemon) fails closed: nothing may connect.
            sections = [_resource("network-proxy.sbpl") + _loopback_ports(ports)]
            if self.route.local_binding:
                sections.append(_resource("network-local-binding.sbpl"))
            return [*sections, services]
        if self.isolate_loopback:
            ports = _ports(self.local_ports)
            return [_resource("network-isolated.sbpl") + _loopback_ports(ports), services]
        return [_resource("network-enabled.sbpl"), services]

    # --- sections 3 to 5: grants --------------------------------------------------------------

    def grants(self, operation: Access) -> list[str]:
        structure = self.structure[operation]
        write = operation is Access.WRITE
        clauses: list[str] = []
        for root in structure.roots:
            excluded = [
                name
                for rule in structure.carve_outs.get(root.path, [])
                for name in self.names(rule)
            ]
            clauses += _excluding(self.names(root), excluded, self.params.values, literal=write)
        if not clauses:
            return []
        if write:
            title = "; executor: writable trees, minus the read-only and denied paths inside them"
            return [title + "\n" + _form("allow file-write*", clauses)]
        title = "; executor: readable trees, minus the denied paths inside them"
        return [title + "\n" + _form("allow file-read* file-map-executable", clauses)]

    def traverse(self) -> list[str]:
        ancestors: set[str] = set()
        for root in self.structure[Access.READ].roots:
            path = root.path
            while path != "/":
                path = posixpath.dirname(path)
                if not self.readable(path):
                    ancestors.add(path)
        if not ancestors:
            return []
        names = [
            name
            for path in _shallowest_first(ancestors)
            for name in self.params.names("TRAVERSE", path)
        ]
        title = "; executor: ancestors of readable trees, metadata only (getcwd, realpath)"
        return [
            title
            + "\n"
            + _form("allow file-read-metadata", (f"(literal {param(n)})" for n in names))
        ]

    # --- section 7: denies --------------------------------------------------------------------

    def denies(self) -> list[str]:
        parts = [self.deny_rule(rule) for rule in self.stated]
        globs: list[str] = []
        for pattern in self.globs:
            form = self.deny_glob(len(globs), pattern)
            if form is not None:
                globs.append(form)
        parts += globs
        anchors = self.anchors()
        if anchors:
            names = [name for path in anchors for name in self.params.names("ANCHOR", path)]
            parts.append(_form("deny file-write-unlink", (f"(literal {param(n)})" for n in names)))
        if not parts:
            return []
        return [
            "; executor: denies; they come last, so they win over every grant above\n"
            + "\n".join(parts)
        ]

    def deny_rule(self, rule: PathRule) -> str:
        names = self.names(rule)
        literals = [f"(literal {param(name)})" for name in names]
        filters = {}
        for operation in (Access.READ, Access.WRITE):
            reopened = [
                name for root in self.reopened(rule, operation) for name in self.names(root)
            ]
            filters[operation] = [
                *literals,
                *_excluding(names, reopened, self.params.values, literal=False),
            ]
        if filters[Access.READ] == filters[Access.WRITE]:
            return _form("deny file-read* file-write*", filters[Access.READ])
        return (
            _form("deny file-read*", filters[Access.READ])
            + "\n"
            + _form("deny file-write*", filters[Access.WRITE])
        )

    def reopened(self, deny: PathRule, operation: Access) -> list[PathRule]:
        """Roots for ``operation`` strictly inside ``deny``: the rules re-open them.

        Deeper denies inside those roots are stated after this one (shallowest first), so
        they still win there.
        """
        return [
            root
            for root in self.structure[operation].roots
            if root.path != deny.path and is_within(root.path, deny.path)
        ]

    def deny_glob(self, index: int, pattern: str) -> str | None:
        """The deny form of a glob; None when it matches no path (see ``glob_to_ere``)."""
        _check_value(pattern, "deny glob")
        regexes = [regex for spelling in spellings(pattern) if (regex := glob_to_ere(spelling))]
        if not regexes:
            return None  # every spelling has the same classes: all match nothing, or none does
        filters = []
        for number, regex in enumerate(regexes):
            base = f"GLOB_{index}" if number == 0 else f"GLOB_{index}_ALIAS"
            below = regex if regex.endswith("/") else regex + "/"
            filters.append(f"(regex {param(self.params.define(base, regex + '$'))})")
            filters.append(f"(regex {param(self.params.define(base + '_BELOW', below))})")
        return _form("deny file-read* file-write*", filters)

    def anchors(self) -> list[str]:
        """Paths that must not be renamed or removed: the pinned ones, and writable directories
        above a carve-out (or holding a deny glob's fixed prefix) in a writable parent, where
        a rename would succeed."""
        starts = [posixpath.dirname(rule.path) for rule in self.carved]
        starts += [_fixed_prefix(pattern) for pattern in self.globs]
        # Pinned paths (workspace roots and what lies between them and a writable parent,
        # symlinked protected names) must stay where they are: the rules were derived from them.
        found = {pin for pin in self.rules.pinned if self.writable(posixpath.dirname(pin))}
        for start in starts:
            path = start
            while path != "/":
                parent = posixpath.dirname(path)
                # Renaming needs write access to the directory itself and to its parent; where
                # either is missing the write rules already refuse it.
                if self.writable(path) and self.writable(parent):
                    found.add(path)
                path = parent
        return _shallowest_first(found)


def _ports(ports: Sequence[object]) -> list[int]:
    """``ports`` without repeats, each checked to be a TCP port number (it goes into the text)."""
    checked: list[int] = []
    for port in ports:
        # bool is an int, and a str could carry SBPL: only a true int in range is written out.
        if type(port) is not int or not 1 <= port <= _MAX_PORT:
            raise SandboxUnavailable(f"the loopback port {port!r} is not a TCP port (1-65535)")
        if port not in checked:
            checked.append(port)
    return checked


def _loopback_ports(ports: Sequence[int]) -> str:
    """The outbound allow for ``ports`` on this host's loopback (empty without ports)."""
    if not ports:
        return ""
    filters = [f'(remote ip "localhost:{port}")' for port in ports]
    return (
        "\n; The loopback ports this command may connect to.\n"
        + _form("allow network-outbound", filters)
        + "\n"
    )


def _shallowest_first(paths: Iterable[str]) -> list[str]:
    return sorted(paths, key=lambda path: (0 if path == "/" else path.count("/"), path))


def _fixed_prefix(pattern: str) -> str:
    """The directory ``pattern`` starts with, before its first glob character."""
    for index, char in enumerate(pattern):
        if char in "*?[":
            return posixpath.dirname(pattern[:index]) or "/"
    return pattern.rstrip("/") or "/"
