"""Following a failover behind the same name (a DNS name, a unix socket path re-pointed): the old
primary stays up as a replica, and answers every write READONLY, having done nothing.

A connection resolves the name once, as it connects; so after READONLY every connection of the
client must connect again before its next use. Closing the pool's idle connections is not enough:
a connection in use by another thread at that moment (its call under way on the old server) goes
back to the pool afterwards, still on the old server, and the next thread to take it meets
READONLY again; under steady load every connection is in use most of the time, and such calls
kept answering 503 with the new primary up. So a single Redis's pools are `RenewingPool`s: each
`renew` starts a generation, and a connection lent again after a generation began connects again
first. A write sent once more after its own `renew` therefore goes on a connection made after
it, which reaches whatever the name names by then: READONLY again only while that is a replica.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import redis
from redis.connection import ConnectionPool
from redis.exceptions import ReadOnlyError


class RenewingPool(ConnectionPool):
    """redis-py's pool, whose connections connect again once each after every `renew`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._generation = 0
        self._generation_lock = threading.Lock()
        #: The generation each connection was lent in: one lent in an earlier one connects again.
        self._lent_in: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    def renew(self) -> None:
        """The server behind the address stopped being the primary: every connection connects
        again, resolving the name afresh, the idle ones now, the others when next lent."""
        with self._generation_lock:
            self._generation += 1
        self.disconnect(inuse_connections=False)

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        # Read before the pool connects a new or closed connection: one renewed meanwhile is
        # taken as of the earlier generation, and connects once more the next time it is lent.
        generation = self._generation
        connection = super().get_connection(*args, **kwargs)
        lent_in = self._lent_in.get(connection)
        if lent_in is not None and lent_in < generation:
            try:
                connection.disconnect()
                connection.connect()
            except BaseException:
                self.release(connection)
                raise
        self._lent_in[connection] = generation
        return connection


def renew(client: Any) -> None:
    """After `client` (a plain redis-py client) met READONLY: each of its connections connects
    again before its next use (`RenewingPool`); a pool of another kind closes its idle ones."""
    pool = client.connection_pool
    if isinstance(pool, RenewingPool):
        pool.renew()
    else:
        pool.disconnect(inuse_connections=False)


def renewed_after_read_only(exc: BaseException | None, client: Any) -> bool:
    """Whether a write that failed with `exc` on `client`, a plain redis-py client, met a replica
    (READONLY: Redis refused it before it did anything), in which case `client` is renewed: the
    write sent once more connects again and resolves the address afresh, which after a failover
    behind the same name names the new primary. False for any other error, and on a cluster,
    which answers MOVED."""
    if not isinstance(exc, ReadOnlyError) or not isinstance(client, redis.Redis):
        return False
    renew(client)
    return True


def fresh_client(client: Any) -> redis.Redis:
    """A client of its own for the server `client` (a plain redis-py client) reaches, whose one
    connection is made now, as `client`'s are: it resolves the name afresh. Close it after use."""
    pool = client.connection_pool
    return redis.Redis.from_pool(
        ConnectionPool(connection_class=pool.connection_class, **pool.connection_kwargs)
    )


class ServerSeen:
    """The server the name named at the last look (Redis's `run_id`, which changes with the server
    and at its restart): a change tells that connections made before may reach another one."""

    def __init__(self) -> None:
        self._run_id: str | None = None

    def changed(self, run_id: str | None) -> bool:
        """Whether `run_id` is another than at the last look (the first look counts as one)."""
        changed, self._run_id = run_id != self._run_id or run_id is None, run_id
        return changed


def renewing_client(url: str, **options: Any) -> redis.Redis:
    """A single Redis's client for `url` (redis-py's `from_url`, its options those of the pool),
    on a `RenewingPool`, which the client closes when it is closed."""
    return redis.Redis.from_pool(RenewingPool.from_url(url, **options))
