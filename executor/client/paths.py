"""Paths and sandbox intent as the wire wants them, built on the caller's side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from executor.client.errors import ClientError
from executor.errors import ConfigError, RequestError
from executor.protocol.paths import parse_path_uri, to_uri

__all__ = ["native_path", "path_uri", "sandbox_context", "sandbox_params"]


def path_uri(path: str) -> str:
    """A path on the executor's host as a ``file:`` URI (a URI is kept as it is)."""
    if path[:5].lower() == "file:":
        return path
    if not path.startswith("/"):
        raise ClientError(f"{path!r}: paths on the executor must be absolute")
    return to_uri(path)


def native_path(path: str) -> str:
    """A path or ``file:`` URI as a native absolute path."""
    if path[:5].lower() != "file:":
        return path
    try:
        return parse_path_uri(path)
    except RequestError as exc:
        raise ClientError(f"{path!r}: {exc}") from exc


def sandbox_context(
    sandbox: str | Mapping[str, Any],
    *,
    workspace_roots: Sequence[str] = (),
    cwd: str | None = None,
    network: bool | None = None,
) -> dict[str, Any]:
    """The wire ``sandbox`` object: a dict as it is; a profile name (or ``.toml`` file)
    compiled here, from the same profiles ``executor run`` uses, for ``workspace_roots``
    and the policy ``cwd`` (default: the first workspace root); ``network`` overrides the
    profile's network (see ``sandbox_params``)."""
    params = sandbox_params(sandbox, workspace_roots=workspace_roots, cwd=cwd, network=network)
    context: dict[str, Any] = params["sandbox"]
    return context


def sandbox_params(
    sandbox: str | Mapping[str, Any],
    *,
    workspace_roots: Sequence[str] = (),
    cwd: str | None = None,
    network: bool | None = None,
) -> dict[str, Any]:
    """The ``process/start`` params that carry ``sandbox`` (see ``sandbox_context``).

    ``network`` overrides a profile's network as ``executor run --network on|off`` does
    (``Profile.network_policy``): ``False`` takes it away, ``True`` gives a profile without
    one the full network and keeps one that has it as it is (a proxied one stays proxied).
    A wire dict says its own network: ``network`` is refused with it.

    A profile in proxy mode adds ``enforceManagedNetwork`` and ``networkProxy`` with its
    host patterns: the wire's permission profile says only "network enabled", and without
    them the command would get the full network. Its ``local_ports`` have no wire form and
    are not sent (less access, never more)."""
    if not isinstance(sandbox, str):
        if network is not None:
            raise ClientError("a network override applies to a profile name, not a wire dict")
        return {"sandbox": dict(sandbox)}
    from executor.sandbox.network import NetworkAccess
    from executor.sandbox.profiles import load_profile

    try:
        profile = load_profile(sandbox)
    except ConfigError as exc:
        raise ClientError(f"profile {sandbox}: {exc}") from exc
    roots = tuple(native_path(root) for root in workspace_roots)
    context = profile.wire_context(
        workspace_roots=roots, cwd=native_path(cwd) if cwd is not None else None
    )
    policy = profile.network_policy(network)
    if network is not None and "network" in context["permissions"]:
        # A disabled profile has no network to override (``network_policy`` agrees).
        on = "enabled" if policy.enabled else "restricted"
        context["permissions"] = {**context["permissions"], "network": on}
    params: dict[str, Any] = {"sandbox": context}
    if policy.mode is NetworkAccess.PROXY:
        domains = dict.fromkeys(policy.allow, "allow") | dict.fromkeys(policy.deny, "deny")
        params["enforceManagedNetwork"] = True
        params["networkProxy"] = {
            "proxy": {
                "enabled": True,
                "enableSocks5": True,
                "enableSocks5Udp": False,
                "allowUpstreamProxy": False,
                "dangerouslyAllowAllUnixSockets": False,
                "mode": "full",
                "allowLocalBinding": policy.local_binding,
                "domains": domains,
            }
        }
    return params
