"""A TCP proxy on 127.0.0.1 that drops a connection around one script: a network (or a Redis
failover, a middlebox's idle timer) that breaks a connection while a write is on it.

`drop_next(after_reply=True)`: the next EVALSHA (or the next of one script: `containing` its SHA)
goes to Redis whole, Redis runs it and replies, and the proxy resets the client's connection
instead of passing the reply on: the write landed, and its sender does not know. With
`at_once` too, the client's connection is reset as soon as the script has gone to Redis, its reply
not waited for (a Redis stalled with it: it runs the script when it goes on).
`after_reply=False`: the next EVALSHA never reaches Redis; the client's connection is reset as it
is sent. `slow_replies(seconds)`: every reply reaches its client that much late (a stalled Redis,
or a congested link, that still answers within a timeout).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable

from tests.proxy import Proxy, received, sent

#: SO_LINGER on, no time: close() sends a reset.
_RESET = struct.pack("ii", 1, 0)


class DroppingProxy(Proxy):
    def __init__(self, upstream_port: int) -> None:
        self._armed: bool | None = None  # None: forward everything; else drop_next's after_reply
        self._containing = b""
        self._at_once = False
        self._before_drop: Callable[[], None] | None = None
        self.dropped_command = b""
        #: Set when the armed drop has happened.
        self.dropped = threading.Event()
        self._reply_delay_s = 0.0
        super().__init__(upstream_port)

    def slow_replies(self, seconds: float) -> None:
        """Pass each reply on `seconds` after it came (0: at once)."""
        self._reply_delay_s = seconds

    def drop_next(
        self,
        *,
        after_reply: bool,
        before_drop: Callable[[], None] | None = None,
        containing: bytes = b"",
        at_once: bool = False,
    ) -> None:
        """`before_drop`: what else happens while the script has run and its sender waits (a
        slot moving to another node, say). `containing`: the dropped EVALSHA is the next that
        holds these bytes too (a script's SHA), any other is forwarded."""
        with self._lock:
            self._armed = after_reply
            self._containing = containing
            self._at_once = at_once
            self._before_drop = before_drop
            self.dropped.clear()

    def _forward(self, client: socket.socket, upstream: socket.socket) -> None:
        swallow = threading.Event()  # the next reply is not passed on: the client is reset
        threading.Thread(target=self._to_upstream, args=(client, upstream, swallow), daemon=True).start()
        threading.Thread(target=self._to_client, args=(upstream, client, swallow), daemon=True).start()

    def _reset(self, *sockets: socket.socket) -> None:
        if self._before_drop is not None:
            self._before_drop()
        self.dropped.set()  # before the client can see the reset
        for sock in sockets:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _to_upstream(self, client: socket.socket, upstream: socket.socket, swallow: threading.Event) -> None:
        for data in received(client):
            with self._lock:
                armed = self._armed if b"EVALSHA" in data and self._containing in data else None
                at_once = self._at_once
                if armed is not None:
                    self._armed = None
                    self.dropped_command = data[:300]
            if armed is False:
                self._reset(client, upstream)
                return
            if armed and at_once:
                if sent(upstream, data):
                    self._reset(client)  # upstream stays open: Redis reads the script when it goes on
                return
            if armed:
                swallow.set()
            if not sent(upstream, data):
                return

    def _to_client(self, upstream: socket.socket, client: socket.socket, swallow: threading.Event) -> None:
        for data in received(upstream):
            if swallow.is_set():
                self._reset(client, upstream)
                return
            if self._reply_delay_s:
                time.sleep(self._reply_delay_s)
            if not sent(client, data):
                return
