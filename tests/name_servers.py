"""A name server of the test's own for a child process's resolver: a UDP socket on port 53 of a
loopback address, named in a resolv.conf bound over /etc/resolv.conf in the child's own mount
namespace (root only; the machine's DNS is untouched)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import select
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

_CLONE_NEWNS, _MS_REC, _MS_PRIVATE, _MS_BIND = 0x20000, 0x4000, 0x40000, 0x1000

#: Why a test cannot bind a resolv.conf of its own here, or None when it can.
WHY_NOT = (
    "only root binds a resolv.conf over /etc/resolv.conf in a mount namespace"
    if os.geteuid() != 0 or not Path("/etc/resolv.conf").exists()
    else None
)


def with_resolv_conf(path: Path) -> Callable[[], None]:
    """A preexec_fn: the child gets a mount namespace of its own, where `path` is /etc/resolv.conf."""

    def enter() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if (
            libc.unshare(_CLONE_NEWNS) != 0
            # Private first, so that the bind below does not reach the machine's namespace.
            or libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0
            or libc.mount(str(path).encode(), b"/etc/resolv.conf", None, _MS_BIND, None) != 0
        ):
            raise OSError(ctypes.get_errno(), "could not bind a resolv.conf of the test's own")

    return enter


class SilentNameServer:
    """Takes queries and never answers; `asked()` says whether a query came."""

    def __init__(self, sock: socket.socket, address: str) -> None:
        self.sock, self.address = sock, address

    def asked(self) -> bool:
        return bool(select.select([self.sock], [], [], 0)[0])


@contextlib.contextmanager
def silent_name_server() -> Iterator[SilentNameServer]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    address = f"127.{random.randrange(1, 250)}.{random.randrange(1, 250)}.53"
    sock.bind((address, 53))
    try:
        yield SilentNameServer(sock, address)
    finally:
        sock.close()
