"""What the operator allows ``http/request`` to do on this executor (``serve --http-*`` flags)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from executor.errors import InvalidParams

__all__ = ["DEFAULT_MAX_BUFFERED_BYTES", "HttpPolicy"]

#: Largest buffered response body, like ``fs/readFile``'s cap; bigger bodies need streaming.
DEFAULT_MAX_BUFFERED_BYTES: Final = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpPolicy:
    """``http/request`` is unsandboxed egress from the executor's host, so it is policy.

    ``valueEnvVar`` is refused unless the variable is named in ``header_env_vars``: otherwise a
    client could read any executor secret by guessing its name and sending it to itself.
    """

    enabled: bool = True
    #: Executor environment variables a header's ``valueEnvVar`` may name (empty: none).
    header_env_vars: frozenset[str] = frozenset()
    #: Host names requests (and every redirect hop) may reach; ``*.suffix`` for subdomains.
    #: Empty: any host.
    allowed_hosts: tuple[str, ...] = ()
    #: Largest response body a buffered request returns.
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES

    def check_host(self, host: str) -> None:
        """Refuse ``host`` (a serialized URL host) unless the allow-list admits it."""
        if self.allowed_hosts and not self.host_allowed(host):
            raise InvalidParams(f"http/request to {host} is not allowed on this executor")

    def host_allowed(self, host: str) -> bool:
        """Exact names match exactly; ``*.example.com`` matches any subdomain (not the apex)."""
        name = host.lower().strip("[]").rstrip(".")
        for pattern in self.allowed_hosts:
            wanted = pattern.lower().strip("[]").rstrip(".")
            if wanted.startswith("*."):
                if name.endswith(wanted[1:]) and len(name) > len(wanted) - 1:
                    return True
            elif name == wanted:
                return True
        return False

    def check_env_var(self, header: str, variable: str) -> None:
        """Refuse a ``valueEnvVar`` the operator did not allow."""
        if variable not in self.header_env_vars:
            raise InvalidParams(
                f"http/request header {header}: valueEnvVar is not allowed on this executor"
            )
