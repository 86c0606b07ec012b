"""Kept-alive connections to receivers: at most one per endpoint, reused by its next attempt only
while nothing has changed (docs/webhooks.md, "Connections").

A connection is kept after an attempt only when the receiver answered 2xx, its answer was read to
its end, and it did not say `Connection: close`. The next attempt reuses it only when the
endpoint's URL is the same, its host still resolves (checked again, addresses.py) to the address
the connection goes to, and the receiver has not closed it meanwhile (nothing to read on it). A
connection idle for IDLE_S is closed, and so is the one of an endpoint that is deleted, disabled
or failing. At most KEPT_MAX are kept idle, whatever PLANTS_WEBHOOKS_MAX allows: beyond, the one
idle longest is closed.
"""

from __future__ import annotations

import contextlib
import http.client
import select
import ssl
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.webhooks.addresses import Target

#: How long a connection is kept unused: long enough to carry a burst of events and the next
#: ones soon after, short enough that a worker holds few idle sockets, and under the idle
#: timeouts of most receivers' servers (a connection they close first is found closed before it
#: is used, and replaced).
IDLE_S = 10.0
#: The most idle connections one deliverer keeps (its sockets: these, and one per attempt in
#: flight, at most lanes.py's THREADS). Above the default PLANTS_WEBHOOKS_MAX, so that by default
#: every endpoint may keep its own.
KEPT_MAX = 64


class Slot:
    """One endpoint's kept-alive connection between its attempts. Its drain holds the slot, so one
    thread at a time uses it."""

    def __init__(self) -> None:
        self.connection: http.client.HTTPConnection | None = None
        self.url = ""
        self.where: Target | None = None
        self.idle_since = 0.0
        #: How many attempts went out on a new connection (for the tests and the benchmark).
        self.opened = 0

    def take(self, url: str, where: Target) -> http.client.HTTPConnection | None:
        """The kept connection, if the attempt to `url` at `where` may reuse it; None (and the
        kept one closed) otherwise."""
        connection, self.connection = self.connection, None
        if connection is None:
            return None
        kept = self.where
        if (
            url == self.url
            and kept is not None
            and kept.address in where.addresses
            and (kept.port, kept.https, kept.host) == (where.port, where.https, where.host)
            and not _closed_by_peer(connection)
        ):
            return connection
        connection.close()
        return None

    def keep(self, url: str, where: Target, connection: http.client.HTTPConnection) -> None:
        self.close()
        self.connection, self.url, self.where = connection, url, where
        self.idle_since = time.monotonic()

    def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            connection.close()


def _closed_by_peer(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle connection has anything to read: the receiver's FIN or RST, or bytes it
    had no request for. Either way it cannot carry another request."""
    sock = connection.sock
    if sock is None:
        return True
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


class KeptAlive:
    """The kept-alive connections of one deliverer, one slot per endpoint. A drain takes its
    endpoint's slot and gives it back when it ends; the coordinator closes the idle ones."""

    def __init__(self, enabled: bool = True) -> None:
        #: False: every attempt opens a connection of its own and closes it (the benchmark's
        #: comparison).
        self.enabled = enabled
        self._lock = threading.Lock()
        self._slots: dict[str, Slot] = {}

    def take(self, endpoint_id: str) -> Slot | None:
        if not self.enabled:
            return None
        with self._lock:
            return self._slots.pop(endpoint_id, None) or Slot()

    def give_back(self, endpoint_id: str, slot: Slot | None) -> None:
        if slot is None or slot.connection is None:
            return
        with self._lock:
            replaced = self._slots.pop(endpoint_id, None)
            self._slots[endpoint_id] = slot
            if replaced is None and len(self._slots) > KEPT_MAX:
                oldest = min(self._slots, key=lambda key: self._slots[key].idle_since)
                replaced = self._slots.pop(oldest)
        if replaced is not None:
            replaced.close()

    def close_idle(self, now: float) -> None:
        """Close the connections unused for IDLE_S."""
        if not self._slots:
            return
        with self._lock:
            idle = [key for key, slot in self._slots.items() if now - slot.idle_since >= IDLE_S]
            closing = [self._slots.pop(key) for key in idle]
        for slot in closing:
            slot.close()

    def keep_only(self, endpoint_ids: set[str]) -> None:
        """Close the connections of endpoints not in `endpoint_ids` (deleted, disabled, failing)."""
        if not self._slots:
            return
        with self._lock:
            gone = [key for key in self._slots if key not in endpoint_ids]
            closing = [self._slots.pop(key) for key in gone]
        for slot in closing:
            slot.close()

    def close_all(self) -> None:
        with self._lock:
            closing, self._slots = list(self._slots.values()), {}
        for slot in closing:
            with contextlib.suppress(OSError):
                slot.close()

    def __len__(self) -> int:
        return len(self._slots)
