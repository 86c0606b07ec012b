"""Store connections that are closed abortively: an RST, never a FIN behind queued bytes.

A call that timed out may leave its command in this host's TCP send queue, unsent or being
retransmitted to a node that is cut off. A graceful close keeps sending that queue, so a link
that comes back would deliver the command after the service had answered 503 and served later
writes on new connections. With SO_LINGER set to 0, closing the socket discards the queue and
sends a reset: what was not delivered by then never is. redis-py closes a connection on every
timeout and connection error, and otherwise only when the pool is closed, when nothing is queued.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from redis.connection import Connection, SSLConnection

#: struct linger {int l_onoff; int l_linger;}: on, with no time: the close resets.
_RESET_ON_CLOSE = struct.pack("ii", 1, 0)


def _abortive(sock: socket.socket) -> socket.socket:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
    return sock


class AbortiveConnection(Connection):
    """redis-py's TCP connection, with SO_LINGER 0 from the moment it connects."""

    # `_connect` is redis-py's per-transport hook (it makes and connects the socket); redis-py has
    # no public way to set a SOL_SOCKET option on its sockets.
    def _connect(self) -> Any:
        return _abortive(super()._connect())


class AbortiveSSLConnection(SSLConnection):
    """redis-py's TLS connection, with SO_LINGER 0 on its socket (the TLS socket wraps the same
    descriptor, so the option is the TCP socket's)."""

    def _connect(self) -> Any:
        return _abortive(super()._connect())
