"""The legacy ``managed_config.toml`` read as requirements, as the reference does.

Besides being the highest config layer, the legacy managed file becomes a requirements
layer: ``approval_policy``, ``approvals_reviewer`` and ``sandbox_mode`` turn into the
``allowed_*`` lists the reference derives from them (observed on 0.171.0):

* ``approval_policy = X`` → ``allowed_approval_policies = [X]``, where ``on-failure`` reads
  as ``on-request`` and ``{ granular = {...} }`` is filled with its defaults;
* ``approvals_reviewer`` → ``["user"]``, or ``["auto_review", "user"]`` for ``auto_review``
  (and its older name ``guardian_subagent``);
* ``sandbox_mode`` → ``["read-only"]`` plus the mode when it is not ``read-only``.

Other keys are ignored; a value of the wrong shape fails the whole read.
"""

from __future__ import annotations

from typing import Any, Final

from executor.environment_config.typed import TypeMismatch, describe, enum_value

__all__ = ["requirements_from_managed"]

_APPROVAL_POLICIES: Final = ("untrusted", "on-failure", "on-request", "granular", "never")
_REVIEWERS: Final = ("user", "auto_review", "guardian_subagent")
_SANDBOX_MODES: Final = ("read-only", "workspace-write", "danger-full-access")
#: GranularApprovalConfig's fields in declaration order, with the default of optional ones.
_GRANULAR_FIELDS: Final[tuple[tuple[str, bool | None], ...]] = (
    ("sandbox_approval", None),
    ("rules", None),
    ("skill_approval", False),
    ("request_permissions", False),
    ("mcp_elicitations", None),
)


def requirements_from_managed(managed: dict[str, Any]) -> dict[str, Any]:
    """The requirements table the reference derives from a legacy managed config.

    Raises ``TypeMismatch`` (its text after the reference's
    ``Failed to parse config requirements as TOML: ``) for a value of the wrong shape.
    """
    policy: Any = None
    reviewer: str | None = None
    sandbox: str | None = None
    # serde reads the fields in document order, so the first bad one in the file is reported.
    for key, value in managed.items():
        if key == "approval_policy":
            policy = _approval_policy(value)
        elif key == "approvals_reviewer":
            reviewer = enum_value(value, _REVIEWERS, key)
        elif key == "sandbox_mode":
            sandbox = enum_value(value, _SANDBOX_MODES, key)
    table: dict[str, Any] = {}
    if policy is not None:
        table["allowed_approval_policies"] = [policy]
    if reviewer is not None:
        automatic = reviewer in ("auto_review", "guardian_subagent")
        table["allowed_approvals_reviewers"] = ["auto_review", "user"] if automatic else ["user"]
    if sandbox is not None:
        table["allowed_sandbox_modes"] = ["read-only"] + (
            [sandbox] if sandbox != "read-only" else []
        )
    return table


def _approval_policy(value: Any) -> Any:
    path = "approval_policy"
    if isinstance(value, str) and value == "granular":
        raise TypeMismatch("invalid type: unit variant, expected newtype variant", path)
    if isinstance(value, dict) and len(value) == 1 and "granular" in value:
        return {"granular": _granular(value["granular"])}
    policy = enum_value(value, _APPROVAL_POLICIES, path)
    return "on-request" if policy == "on-failure" else policy


def _granular(value: Any) -> dict[str, bool]:
    path = "approval_policy"
    if not isinstance(value, dict):
        raise TypeMismatch(
            f"invalid type: {describe(value)}, expected struct GranularApprovalConfig", path
        )
    known = dict(_GRANULAR_FIELDS)
    for key, item in value.items():
        if key in known and not isinstance(item, bool):
            raise TypeMismatch(
                f"invalid type: {describe(item)}, expected a boolean", f"{path}.{key}"
            )
    config: dict[str, bool] = {}
    for name, default in _GRANULAR_FIELDS:
        if name in value:
            config[name] = value[name]
        elif default is None:
            raise TypeMismatch(f"missing field `{name}`", path)
        else:
            config[name] = default
    return config
