"""Moves this process into a network namespace of its own whose only
interface is ``lo``, so that a Ray cluster started from it can reach nothing
but loopback (Ray binds the host's address even when told 127.0.0.1).

As root the namespace is made directly; otherwise inside a user namespace
(where the kernel allows unprivileged ones). Threads started before the move
stay outside, so call it early, before anything starts threads.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
from typing import Optional

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1


def _unshare(flags: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(ctypes.c_int(flags)) != 0:
        return ctypes.get_errno()
    return 0


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, req)[:18])[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))


def interfaces() -> list:
    """Names of the network interfaces this process sees."""
    return [name for _, name in socket.if_nameindex()]


def enter_private_netns() -> Optional[str]:
    """Enters a fresh network namespace with ``lo`` up. Returns ``None`` on
    success, else why it could not (the process is then unchanged)."""
    uid, gid = os.getuid(), os.getgid()
    err = _unshare(CLONE_NEWNET)
    if err == errno.EPERM:
        err = _unshare(CLONE_NEWUSER | CLONE_NEWNET)
        if err == 0:
            try:
                _write("/proc/self/setgroups", "deny")
                _write("/proc/self/uid_map", f"0 {uid} 1")
                _write("/proc/self/gid_map", f"0 {gid} 1")
            except OSError as e:
                return f"cannot map ids in the new user namespace: {e}"
    if err != 0:
        return (
            f"unshare(CLONE_NEWNET) failed: {os.strerror(err)} (needs root or unprivileged user namespaces)"
        )
    try:
        _loopback_up()
    except OSError as e:
        return f"cannot bring lo up in the new network namespace: {e}"
    if interfaces() != ["lo"]:
        return f"the new network namespace has interfaces {interfaces()}, expected only lo"
    return None
