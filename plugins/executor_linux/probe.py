"""What the Linux sandbox layers can do on this host, probed once per daemon."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from executor.errors import ConfigError
from executor_linux import landlock, seccomp_policy

__all__ = ["LAYER_SWITCH_ENV", "HostSupport", "host_support", "switched_off"]

#: ``EXECUTOR_LINUX_NAMESPACES=off`` / ``EXECUTOR_LINUX_LANDLOCK=off`` switch a layer off, to
#: see (and test) what the others enforce alone; the core then refuses what they cannot.
#: ``EXECUTOR_LINUX_CGROUPS=off`` leaves resource limits to rlimits (see ``cgroups.py``).
#: ``0``, ``false`` and ``no`` mean off too; ``on``, ``1``, ``true``, ``yes`` or unset, on.
LAYER_SWITCH_ENV = {
    "namespaces": "EXECUTOR_LINUX_NAMESPACES",
    "landlock": "EXECUTOR_LINUX_LANDLOCK",
    "cgroups": "EXECUTOR_LINUX_CGROUPS",
}
_OFF = frozenset({"0", "false", "no", "off"})
_ON = frozenset({"", "1", "true", "yes", "on"})
_NSPROBE = Path(__file__).with_name("nsprobe.py")


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSupport:
    """Each layer: usable here, or the reason it is not."""

    landlock_abi: int
    landlock_reason: str
    namespaces: bool
    namespaces_reason: str
    user_namespace: bool
    fresh_proc: bool
    seccomp_reason: str
    #: Why a command cannot join a session's network namespace here ("": it can).
    network_proxy_reason: str = ""

    @property
    def seccomp(self) -> bool:
        """Seccomp filters can be built and loaded."""
        return not self.seccomp_reason


def switched_off(layer: str) -> str:
    """Why ``layer`` is off by its switch (``LAYER_SWITCH_ENV``), or "" when it is on.

    An unknown value is refused (``ConfigError``), not read as either: a typo must not leave
    a layer on that the operator meant to turn off, or the other way round. The backend then
    reports itself unavailable with this message, so nothing runs until it is fixed.
    """
    name = LAYER_SWITCH_ENV[layer]
    value = os.environ.get(name, "")
    word = value.strip().lower()
    if word in _OFF:
        return f"disabled by {name}={value}"
    if word in _ON:
        return ""
    raise ConfigError(
        f"{name}={value!r} is not understood: use off (or 0, false, no) to switch the {layer}"
        " layer off, or on (or 1, true, yes), or leave it unset"
    )


def _probe_namespaces() -> tuple[bool, str, bool]:
    off = switched_off("namespaces")
    if off:
        return False, off, False
    try:
        result = subprocess.run(
            [sys.executable, "-I", "-S", str(_NSPROBE)],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"namespace probe failed: {exc}", False
    line = result.stdout.strip()
    if line.startswith("ok"):
        return True, "", line == "ok proc"
    reason = line.removeprefix("fail ").strip() or result.stderr.strip()[-200:] or "unknown"
    who = "unprivileged user namespaces" if os.getuid() != 0 else "mount/PID namespaces"
    return False, f"{who} are not available here: {reason}", False


def _probe_landlock() -> tuple[int, str]:
    off = switched_off("landlock")
    if off:
        return 0, off
    abi = landlock.abi_version()
    return (
        abi,
        "" if abi else "Landlock is not enabled in this kernel (needs 5.13+ and lsm=landlock)",
    )


#: CAP_SYS_ADMIN's bit in ``/proc/self/status`` ``CapEff``.
_CAP_SYS_ADMIN = 21


def _has_sys_admin() -> bool:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_ADMIN & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _network_proxy_reason(namespaces: bool, namespaces_reason: str) -> str:
    """Why proxy mode cannot be enforced here ("" when it can).

    The command joins the session's network namespace, which the daemon created: ``setns``
    needs CAP_SYS_ADMIN in that namespace's owning user namespace. An unprivileged daemon's
    commands get a new user namespace first, which voids the daemon's capabilities, and the
    join must come before it; so only a daemon with CAP_SYS_ADMIN that needs no new user
    namespace (root) can do it.
    """
    if not namespaces:
        return f"needs private namespaces; {namespaces_reason}"
    if os.getuid() != 0:
        return (
            "joining the session's network namespace needs a root daemon (this one runs as "
            f"uid {os.getuid()}, its commands in a user namespace of their own)"
        )
    if not _has_sys_admin():
        return (
            "joining the session's network namespace needs CAP_SYS_ADMIN, which this daemon lacks"
        )
    return ""


@cache
def host_support() -> HostSupport:
    """Probe every layer (once)."""
    abi, landlock_reason = _probe_landlock()
    namespaces, ns_reason, proc = _probe_namespaces()
    return HostSupport(
        landlock_abi=abi,
        landlock_reason=landlock_reason,
        namespaces=namespaces,
        namespaces_reason=ns_reason,
        user_namespace=os.getuid() != 0,
        fresh_proc=proc,
        seccomp_reason=seccomp_policy.available() or "",
        network_proxy_reason=_network_proxy_reason(namespaces, ns_reason),
    )
