"""The destinations this host delivers to itself, as the loopback guard sees them (daemon side).

``STATIC_LOCAL`` are local whatever the routing table says; the rest is the kernel's
``local`` routing table (``ip route show table local``: every interface address, its
broadcast and anycast addresses, AnyIP prefixes), read through rtnetlink.
"""

from __future__ import annotations

import os
import socket
import struct
from typing import Final

__all__ = ["STATIC_LOCAL", "local_prefixes"]

#: Always local (``connect`` maps 0.0.0.0 and ``::`` to loopback; multicast and broadcast
#: loop back to local listeners).
STATIC_LOCAL: Final = (
    "0.0.0.0/8",
    "127.0.0.0/8",
    "224.0.0.0/4",
    "255.255.255.255/32",
    "::/128",
    "::1/128",
    "ff00::/8",
)
# rtnetlink (include/uapi/linux/rtnetlink.h, netlink.h)
_RTM_NEWROUTE, _RTM_GETROUTE = 24, 26
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_RTA_DST, _RTA_TABLE = 1, 15
_RT_TABLE_LOCAL = 255
#: RTN_LOCAL, RTN_BROADCAST, RTN_ANYCAST, RTN_MULTICAST: delivered to this host.
_LOCAL_TYPES: Final = frozenset({2, 3, 4, 5})
_SOL_NETLINK, _NETLINK_GET_STRICT_CHK = 270, 12


def _routes_of(reply: bytes, found: set[str]) -> bool:
    """Collect the local routes in one rtnetlink reply; True once the dump is done."""
    offset = 0
    while offset + 16 <= len(reply):
        length, kind = struct.unpack_from("=IH", reply, offset)
        if length < 16:
            return True
        if kind == _NLMSG_DONE:
            return True
        if kind == _NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", reply, offset + 16)
            if code:
                raise OSError(-code, f"rtnetlink route dump: {os.strerror(-code)}")
            return True
        if kind == _RTM_NEWROUTE:
            family, dst_len, _src, _tos, table, _proto, _scope, rtype = struct.unpack_from(
                "=8B", reply, offset + 16
            )
            position, end = offset + 28, offset + length
            destination = None
            while position + 4 <= end:
                size, attribute = struct.unpack_from("=HH", reply, position)
                if size < 4:
                    break
                payload = reply[position + 4 : position + size]
                if attribute == _RTA_DST:
                    destination = payload
                elif attribute == _RTA_TABLE and len(payload) == 4:
                    (table,) = struct.unpack("=I", payload)
                position += (size + 3) & ~3
            # No RTA_DST is a default route: "everything is local" would end the network.
            if table == _RT_TABLE_LOCAL and rtype in _LOCAL_TYPES and destination is not None:
                address = socket.inet_ntop(family, destination)
                found.add(f"{address}/{dst_len}")
        offset += (length + 3) & ~3
    return False


def local_prefixes() -> set[str]:
    """The prefixes this host delivers locally: ``STATIC_LOCAL`` and the kernel's ``local``
    routing table (rtnetlink, this process's network namespace)."""
    found = set(STATIC_LOCAL)
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0) as sock:
        sock.settimeout(5.0)
        try:
            # The kernel then filters by table (4.20+); otherwise the loop below does.
            sock.setsockopt(_SOL_NETLINK, _NETLINK_GET_STRICT_CHK, 1)
        except OSError:
            pass
        sock.bind((0, 0))
        for sequence, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
            request = struct.pack("=8BI", family, 0, 0, 0, _RT_TABLE_LOCAL, 0, 0, 0, 0)
            header = struct.pack(
                "=IHHII",
                16 + len(request),
                _RTM_GETROUTE,
                _NLM_F_REQUEST | _NLM_F_DUMP,
                sequence,
                0,
            )
            sock.send(header + request)
            while not _routes_of(sock.recv(1 << 16), found):
                pass
    return found
