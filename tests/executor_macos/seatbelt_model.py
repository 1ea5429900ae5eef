"""A model of how Seatbelt decides a file operation, to check rendered profiles on Linux.

The model follows SBPL's documented reading: rules are ``(allow|deny OPERATION... FILTER...)``;
a rule applies when one of its operations covers the operation (``file-write*`` covers
``file-write-data``) and any of its filters matches (no filter: always); among the rules that
apply, the last one in the profile decides; ``(deny default)`` decides when none applies.
Filters: ``literal``, ``subpath``, ``regex`` (POSIX ERE; the renderer only emits the subset
Python's ``re`` reads the same way), ``require-all``/``require-any``/``require-not``, and
``(param "NAME")`` for values. Filters about anything but the path (``vnode-type``,
``extension``, ...) never match here: the model asks about plain files and directories.

Network operations are asked about a ``Socket``: an IP endpoint, or a Unix-domain socket's path
(which the path filters match, as Apple's own profiles rely on). ``(remote|local KIND
"HOST:PORT")`` matches an IP endpoint on that side when ``KIND`` fits its family (``ip`` and
``tcp`` both, ``ip4``/``tcp4`` IPv4, ``ip6``/``tcp6`` IPv6), ``HOST`` is ``*`` or ``localhost``
and ``PORT`` is ``*`` or its port. ``localhost`` is read as Seatbelt was observed to read it:
``127.0.0.0/8`` and ``::1``, but **not** the IPv4-mapped forms (``::ffff:127.0.0.1``), which
reach the loopback all the same; profiles must hold under that reading.

It is a model: it shows that the profile says what the rule set says, if Seatbelt reads SBPL
this way. With ``deny_wins`` it reads the other conceivable way (any matching deny beats every
allow); the renderer's profiles are meant to mean the same under both. Whether Seatbelt reads
them so is what the macOS-only tests check.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass

from executor.sandbox.rules import is_within
from tests.executor_macos.sexpr import Str, Sym, Tree, parse

__all__ = ["Model", "Socket"]


@dataclass(frozen=True, slots=True)
class Socket:
    """One end of a network operation: an IP address and port, or a Unix socket's path."""

    #: An IP literal (``127.0.0.1``, ``::ffff:127.0.0.1``) or an absolute path.
    address: str
    port: int = 0
    #: ``remote`` for connect/send (network-outbound), ``local`` for bind/accept.
    side: str = "remote"

    @property
    def unix(self) -> bool:
        """A Unix-domain socket, named by its path."""
        return self.address.startswith("/")

    def family(self) -> int:
        """4 or 6 (IPv4-mapped addresses are IPv6: that is the socket they come from)."""
        return ipaddress.ip_address(self.address).version

    def localhost(self) -> bool:
        """Whether Seatbelt's ``localhost`` matches this address (see the module docstring)."""
        address = ipaddress.ip_address(self.address)
        if address.version == 4:
            return address.is_loopback
        return address == ipaddress.IPv6Address("::1")


#: The address kinds of ``(remote|local KIND "HOST:PORT")`` and the families each matches.
_FAMILIES = {"ip": (4, 6), "tcp": (4, 6), "ip4": (4,), "tcp4": (4,), "ip6": (6,), "tcp6": (6,)}


class Model:
    """A parsed profile with its parameters, answering ``allows(operation, path)``."""

    def __init__(self, text: str, params: Mapping[str, str], *, deny_wins: bool = False) -> None:
        self.forms = parse(text)
        #: The other conceivable reading of SBPL: any matching deny beats every allow.
        self.deny_wins = deny_wins
        self.params = dict(params)
        self.default = "deny"
        self.rules: list[tuple[str, list[str], list[Tree]]] = []
        for form in self.forms:
            self._add(form)

    def _add(self, form: Tree) -> None:
        if not isinstance(form, list) or not form or not isinstance(form[0], Sym):
            raise ValueError(f"not a rule: {form!r}")
        head = form[0].name
        if head == "version":
            return
        if head not in ("allow", "deny"):
            raise ValueError(f"unknown form {head}")
        operations = [item.name for item in form[1:] if isinstance(item, Sym)]
        filters: list[Tree] = [item for item in form[1:] if isinstance(item, list)]
        if operations == ["default"]:
            self.default = head
            return
        self.rules.append((head, operations, filters))

    def allows(self, operation: str, path: str | Socket) -> bool:
        """Whether ``operation`` on ``path`` (a file path, or a socket) is allowed."""
        decisions = [
            action
            for action, operations, filters in self.rules
            if _covers(operations, operation)
            and (not filters or any(self._match(f, path) for f in filters))
        ]
        if not decisions:
            return self.default == "allow"
        if self.deny_wins:
            return "deny" not in decisions
        return decisions[-1] == "allow"

    def _value(self, node: Tree) -> str:
        if isinstance(node, Str):
            return node.value
        if isinstance(node, list) and node[:1] == [Sym("param")] and isinstance(node[1], Str):
            return self.params[node[1].value]
        raise ValueError(f"not a value: {node!r}")

    def _match(self, node: Tree, target: str | Socket) -> bool:
        if not isinstance(node, list) or not isinstance(node[0], Sym):
            raise ValueError(f"not a filter: {node!r}")
        head, args = node[0].name, node[1:]
        if head in ("require-all", "require-any", "require-not"):
            matches = [self._match(arg, target) for arg in args]
            if head == "require-all":
                return all(matches)
            return any(matches) if head == "require-any" else not matches[0]
        if isinstance(target, Socket):
            if head in ("remote", "local"):
                return self._match_endpoint(head, args, target)
            if not target.unix:
                return False
            path = target.address
        else:
            path = target
        if head == "literal":
            return path == self._value(args[0])
        if head == "subpath":
            return is_within(path, self._value(args[0]))
        if head == "regex":
            return ere_search(self._value(args[0]), path)
        return False

    def _match_endpoint(self, side: str, args: list[Tree], socket: Socket) -> bool:
        """``(remote|local KIND "HOST:PORT")`` against an IP socket."""
        kind, spec = args[0], args[1] if len(args) > 1 else Str("*:*")
        if not isinstance(kind, Sym) or kind.name not in _FAMILIES or not isinstance(spec, Str):
            raise ValueError(f"not an endpoint filter: {args!r}")
        if socket.unix or socket.side != side or socket.family() not in _FAMILIES[kind.name]:
            return False
        host, _, port = spec.value.rpartition(":")
        if host not in ("*", "localhost") or not (port == "*" or port.isdigit()):
            raise ValueError(f"Seatbelt names only '*' or 'localhost' and a port: {spec.value!r}")
        host_ok = host == "*" or socket.localhost()
        return host_ok and (port == "*" or int(port) == socket.port)


def _covers(operations: list[str], operation: str) -> bool:
    return any(
        name == operation or (name.endswith("*") and operation.startswith(name[:-1]))
        for name in operations
    )


def ere_search(regex: str, path: str) -> bool:
    """POSIX ``regexec`` of the renderer's ERE subset, with Python's ``re``.

    A final ``$`` means the very end of the string (Python's ``$`` would also match before a
    trailing newline).
    """
    body = regex[:-1]
    if regex.endswith("$") and (len(body) - len(body.rstrip("\\"))) % 2 == 0:
        regex = body + r"\Z"
    return re.search(regex, path, re.DOTALL) is not None
