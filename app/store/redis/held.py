"""One Redis connection per request thread, held between calls: the store's hot path.

redis-py's `Redis.execute_command` checks a connection out of its pool and back in on every
call, through argument-deprecation wrappers and observability hooks: measured, 30 to 35 µs of a
worker's CPU per call on top of the 40 µs of the call itself (bench/README.md, issue 25). A
request thread makes one call at a time, so it keeps one connection of each client it uses,
taken from that client's pool (so closing the pool still closes it), and sends and reads on it
with redis-py's own `Connection`: the same commands, replies, parser and errors.

It keeps the client's error handling: one retry on a broken connection (a connection Redis
closed, for one after a restart; redis-py reconnects on the next send), and none on a timeout,
after which redis-py has already closed the connection. Any other error came with a whole reply,
so the connection stays in step.

A thread's connections go back to their pools when the thread ends, so a server that starts a
thread per request (`flask run`) reuses them instead of opening one per request.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

import redis
from redis.exceptions import ConnectionError as RedisConnectionError

#: Clients one thread may hold a connection of: on a cluster, one per node it has written to.
_MOST_HELD = 64


class _ThreadEnd:
    """Held in a thread's locals beside its connections, and collected when the thread ends."""


def _release(held: dict[int, tuple[redis.Redis, Any]]) -> None:
    """Connections back to their pools."""
    for client, connection in held.values():
        client.connection_pool.release(connection)
    held.clear()


class HeldConnections:
    def __init__(self) -> None:
        self._local = threading.local()

    def call(self, client: redis.Redis, *command: Any) -> Any:
        """The reply to `command` on this thread's connection of `client`; raises what redis-py raises."""
        held = self._held()
        entry = held.get(id(client))
        if entry is None or entry[0] is not client:
            if len(held) >= _MOST_HELD:
                _release(held)
            entry = held[id(client)] = (client, client.connection_pool.get_connection())
        connection = entry[1]
        try:
            connection.send_command(*command)
            return connection.read_response()
        except RedisConnectionError:
            connection.disconnect()
            connection.send_command(*command)
            return connection.read_response()

    def _held(self) -> dict[int, tuple[redis.Redis, Any]]:
        """This thread's connections, by the id of their client: (client, connection)."""
        local = self._local
        # A forked worker must not share its parent's sockets: it makes its own.
        if getattr(local, "pid", None) != os.getpid():
            held: dict[int, tuple[redis.Redis, Any]] = {}
            local.pid, local.held, local.end = os.getpid(), held, _ThreadEnd()
            # When the thread ends its locals go, and with `end` the connections go back.
            weakref.finalize(local.end, _release, held)
        return local.held
