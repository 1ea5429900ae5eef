"""Socket and ioctl probe, run inside the sandbox by ``test_seccomp_sockets.py`` (stdlib only).

``argv[1]`` is a JSON object: ``dgram_path`` and ``dgram_abstract`` (host datagram sockets
the test owns), ``tcp_port`` (a test-owned loopback listener, 0 for none), ``token`` (the
payload, so the host can tell a sandbox datagram from anything else) and optionally
``seccomp_filter``, a file of raw BPF the probe installs on itself first (to test the filter
alone, without the other layers). Prints one JSON object:
check name -> ``"ok"``, the errno name that stopped it, or a short note. Everything it
touches is its own (sockets, pipes, a fresh pty) or the test's.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import platform
import socket
import sys
import termios
from collections.abc import Callable

AF_PACKET, AF_BLUETOOTH, AF_ALG, AF_VSOCK = 17, 31, 38, 40
NETLINK_ROUTE = 0
USERFAULTFD_IOC_NEW = 0xAA00  # _IO(0xAA, 0) on x86 and arm64
HIGH_BIT = 1 << 32
#: Raw system call numbers, to pass 64-bit arguments that libc would truncate to an int.
SYSCALLS = {
    "x86_64": {"socket": 41, "ioctl": 16, "userfaultfd": 323},
    "aarch64": {"socket": 198, "ioctl": 29, "userfaultfd": 282},
}

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def raw_syscall(name: str, *args: int) -> int:
    """``syscall(2)`` with every argument as a full 64-bit register."""
    number = SYSCALLS[platform.machine()][name]
    result = int(libc.syscall(ctypes.c_long(number), *(ctypes.c_ulong(a) for a in args)))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def ioctl(fd: int, request: int, arg: bytes | int) -> None:
    fcntl.ioctl(fd, request, arg)


def raw_ioctl(fd: int, request: int, arg: int) -> None:
    raw_syscall("ioctl", fd, request, arg)


def install_filter(path: str) -> None:
    """``no_new_privs`` + ``PR_SET_SECCOMP`` with the raw classic-BPF program in ``path``."""

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    with open(path, "rb") as handle:
        program = handle.read()
    buffer = ctypes.create_string_buffer(program, len(program))
    prog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
    for args in ((38, 1, 0, 0, 0), (22, 2, ctypes.addressof(prog), 0, 0)):  # NO_NEW_PRIVS, SECCOMP
        if libc.prctl(*(ctypes.c_ulong(a) for a in args)) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))


def outcome(check: Callable[[], object]) -> str:
    """``"ok"`` (or the check's own note), else the errno name that stopped it."""
    try:
        note = check()
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, f"error {exc}")
    except KeyError:
        return "unknown architecture"
    return "ok" if note is None else str(note)


def make(family: int, kind: int, proto: int = 0) -> None:
    socket.socket(family, kind, proto).close()


def make_pair(kind: int) -> None:
    for end in socket.socketpair(socket.AF_UNIX, kind):
        end.close()


def raw_socket(family: int, kind: int) -> None:
    os.close(raw_syscall("socket", family, kind, 0))


def send_from_socket(kind: int, address: str, token: bytes) -> Callable[[], None]:
    """A fresh socket of ``kind`` sends the token to ``address``."""

    def check() -> None:
        with socket.socket(socket.AF_UNIX, kind) as sock:
            sock.sendto(token, address)

    return check


def send_from_pair(
    kind: int, address: str, token: bytes, use_sendmsg: bool = False
) -> Callable[[], str]:
    """One end of a socketpair sends the token to ``address``; says where it went."""

    def check() -> str:
        left, right = socket.socketpair(socket.AF_UNIX, kind)
        with left, right:
            if use_sendmsg:
                left.sendmsg([token], [], 0, address)
            else:
                left.sendto(token, address)
            right.setblocking(False)
            try:
                got = right.recv(64)
            except BlockingIOError:
                return "sent"
            return "to-peer" if got == token else "sent"

    return check


def pair_roundtrip(kind: int) -> str | None:
    """Data both ways, then a pipe's write end passed with SCM_RIGHTS and used by the receiver."""
    left, right = socket.socketpair(socket.AF_UNIX, kind)
    read_end, write_end = os.pipe()
    try:
        left.sendall(b"ping")
        right.sendall(b"pong")
        if right.recv(4) != b"ping" or left.recv(4) != b"pong":
            return "data mismatch"
        socket.send_fds(left, [b"f"], [write_end])
        _msg, fds, _flags, _addr = socket.recv_fds(right, 1, 1)
        if len(fds) != 1:
            return "no fd received"
        os.write(fds[0], b"via-fd")
        os.close(fds[0])
        return None if os.read(read_end, 6) == b"via-fd" else "fd mismatch"
    finally:
        for fd in (read_end, write_end):
            os.close(fd)
        left.close()
        right.close()


def tcp_connect(port: int, token: bytes) -> str | None:
    if not port:
        return "no listener"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(token)
    return None


def terminal_ioctls(tty: int) -> dict[str, str]:
    """The terminal ioctls on ``tty``, which must be the caller's controlling terminal.

    TIOCSTI on a terminal that is not the caller's controlling one fails with EPERM anyway,
    so only on its own controlling terminal does an EPERM show the filter at work.
    """
    results = {"pty_ctty": "ok" if os.tcgetpgrp(tty) == os.getpgrp() else "not ctty"}
    char = ctypes.addressof(ctypes.create_string_buffer(b"y"))
    checks: dict[str, Callable[[], object]] = {
        "pty_tiocgwinsz": lambda: ioctl(tty, termios.TIOCGWINSZ, bytes(8)),
        "pty_tiocsti": lambda: ioctl(tty, termios.TIOCSTI, b"x"),
        "pty_tiocsti_highbits": lambda: raw_ioctl(tty, HIGH_BIT | termios.TIOCSTI, char),
        # subcode 6: read the keyboard shift state (a console-only request)
        "pty_tioclinux": lambda: ioctl(tty, termios.TIOCLINUX, bytes([6, 0, 0, 0])),
    }
    results.update({name: outcome(check) for name, check in checks.items()})
    return results


def pty_checks() -> dict[str, str]:
    """Terminal ioctls on a fresh pty that a child makes its controlling terminal.

    Where no pty can be opened (Landlock alone keeps ``/dev/ptmx`` read-only), the test runs
    the probe with a terminal of its own as stdin, and that one is used instead.
    """
    try:
        master, slave = os.openpty()
    except OSError as exc:
        if os.isatty(0):
            return {**terminal_ioctls(0), "pty_source": "stdin"}
        return {"pty_setup": "openpty:" + errno.errorcode.get(exc.errno or 0, str(exc))}
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        results: dict[str, str] = {}
        try:
            os.close(reader)
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
            results = terminal_ioctls(slave)
        except OSError as exc:
            results["pty_setup"] = errno.errorcode.get(exc.errno or 0, str(exc))
        os.write(writer, json.dumps(results).encode())
        os._exit(0)
    os.close(writer)
    chunks = []
    while chunk := os.read(reader, 4096):
        chunks.append(chunk)
    os.waitpid(pid, 0)
    for fd in (reader, master, slave):
        os.close(fd)
    child: dict[str, str] = json.loads(b"".join(chunks) or b"{}")
    return {**child, "pty_source": "openpty"}


def userfaultfd_device(request: int) -> str | None:
    """``open("/dev/userfaultfd")`` + ``ioctl(USERFAULTFD_IOC_NEW)``; a userfaultfd is closed.

    Read-only suffices: the device hands out userfaultfds whatever the open mode.
    """
    try:
        device = os.open("/dev/userfaultfd", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return "open:" + errno.errorcode.get(exc.errno or 0, str(exc))
    try:
        uffd = raw_syscall("ioctl", device, request, os.O_CLOEXEC)
    except OSError as exc:
        return "ioctl:" + errno.errorcode.get(exc.errno or 0, str(exc))
    finally:
        os.close(device)
    os.close(uffd)
    return None


def main() -> None:
    cfg = json.loads(sys.argv[1])
    path, abstract = cfg["dgram_path"], "\0" + cfg["dgram_abstract"]
    token = cfg["token"].encode()
    if cfg.get("seccomp_filter"):
        install_filter(cfg["seccomp_filter"])
    report: dict[str, str] = {}
    checks: dict[str, Callable[[], object]] = {
        # sockets that must not exist with the network off
        "unix_dgram": lambda: make(socket.AF_UNIX, socket.SOCK_DGRAM),
        "unix_dgram_flags": lambda: make(
            socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
        ),
        "unix_raw": lambda: make(socket.AF_UNIX, socket.SOCK_RAW),
        "unix_dgram_highbits": lambda: raw_socket(socket.AF_UNIX, HIGH_BIT | socket.SOCK_DGRAM),
        "pair_dgram": lambda: make_pair(socket.SOCK_DGRAM),
        "pair_raw": lambda: make_pair(socket.SOCK_RAW),
        "inet_tcp": lambda: make(socket.AF_INET, socket.SOCK_STREAM),
        "inet_udp": lambda: make(socket.AF_INET, socket.SOCK_DGRAM),
        "inet6_tcp": lambda: make(socket.AF_INET6, socket.SOCK_STREAM),
        "inet6_udp": lambda: make(socket.AF_INET6, socket.SOCK_DGRAM),
        "netlink": lambda: make(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE),
        # families refused in every mode
        "vsock": lambda: make(AF_VSOCK, socket.SOCK_STREAM),
        "packet": lambda: make(AF_PACKET, socket.SOCK_DGRAM),
        "alg": lambda: make(AF_ALG, socket.SOCK_SEQPACKET),
        "bluetooth": lambda: make(AF_BLUETOOTH, socket.SOCK_STREAM),
        # every way to address the host's datagram sockets
        "send_dgram_path": send_from_socket(socket.SOCK_DGRAM, path, token),
        "send_raw_path": send_from_socket(socket.SOCK_RAW, path, token),
        "send_dgram_abstract": send_from_socket(socket.SOCK_DGRAM, abstract, token),
        "send_stream_path": send_from_socket(socket.SOCK_STREAM, path, token),
        "send_pair_dgram_path": send_from_pair(socket.SOCK_DGRAM, path, token),
        "send_pair_dgram_path_sendmsg": send_from_pair(socket.SOCK_DGRAM, path, token, True),
        "send_pair_dgram_abstract": send_from_pair(socket.SOCK_DGRAM, abstract, token),
        "send_pair_stream_path": send_from_pair(socket.SOCK_STREAM, path, token),
        "send_pair_seqpacket_path": send_from_pair(socket.SOCK_SEQPACKET, path, token),
        "send_pair_seqpacket_path_sendmsg": send_from_pair(
            socket.SOCK_SEQPACKET, path, token, True
        ),
        "send_pair_seqpacket_abstract": send_from_pair(socket.SOCK_SEQPACKET, abstract, token),
        # what keeps working
        "unix_stream": lambda: make(socket.AF_UNIX, socket.SOCK_STREAM),
        "unix_stream_flags": lambda: make(
            socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC
        ),
        "unix_seqpacket": lambda: make(socket.AF_UNIX, socket.SOCK_SEQPACKET),
        "pair_stream_roundtrip": lambda: pair_roundtrip(socket.SOCK_STREAM),
        "pair_seqpacket_roundtrip": lambda: pair_roundtrip(socket.SOCK_SEQPACKET),
        "tcp_connect": lambda: tcp_connect(int(cfg["tcp_port"]), token),
        # userfaultfd, by the system call and by the device
        "userfaultfd_syscall": lambda: os.close(raw_syscall("userfaultfd", os.O_CLOEXEC)),
        "userfaultfd_device": lambda: userfaultfd_device(USERFAULTFD_IOC_NEW),
        "userfaultfd_device_highbits": lambda: userfaultfd_device(HIGH_BIT | USERFAULTFD_IOC_NEW),
    }
    for name, check in checks.items():
        report[name] = outcome(check)
    report.update(pty_checks())
    print(json.dumps(report))


if __name__ == "__main__":
    main()
