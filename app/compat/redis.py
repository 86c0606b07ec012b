"""redis-py past its documented interface: abortive closes, a request thread's held connections,
and a cluster's slot map.

**Abortive close.** A call that timed out may leave its command in this host's TCP send queue,
unsent or being retransmitted to a node that is cut off. A graceful close keeps sending that
queue, so a link that comes back would deliver the command after the service had answered 503
and served later writes on new connections. With SO_LINGER 0, closing the socket discards the
queue and sends a reset: what was not delivered by then never is. redis-py has no public way to
set a SOL_SOCKET option on its sockets (`socket_keepalive_options` are TCP-level), so the
connection classes override `_connect`, its per-transport hook that makes the socket. When that
hook has changed, redis-py's own connections are used: the plant writes stay safe (each carries a
deadline after which Redis refuses it, app/store/redis/deadline.py), the webhook endpoints'
changes lose the reset, and no call is bounded (below).

**Held connections.** `Redis.execute_command` checks a connection out of the pool and back in
on every call, through its argument-deprecation wrappers and observability hooks. A request
thread makes one call at a time, so it keeps one connection of each client it uses, taken from
that client's pool (so closing the pool still closes it), and sends and reads on it with
redis-py's own `Connection`: the same commands, replies, parser and errors. A command that was
not sent whole (the connection had broken) is sent again on a new connection, as the client
does; one whose reply was lost is sent again only when asked (`resend`, a read's default): a
write's second run would judge the state its first run made, so a write that must not be
repeated raises `Unanswered` instead (app/store/redis/lost.py learns what it did). Before such a
write, a connection Redis has closed meanwhile (a restart) is found and replaced, so that the
write goes on a live one. After a failover behind the same name (`renew`: the server a connection
reaches answered READONLY), each thread replaces its own before its next call, so that none is
closed under another thread's call (the pool's others: app/store/redis/renewal.py). When the
pool's or the connection's methods are not as expected, each call goes through
`execute_command`, which resends after a lost reply as redis-py does.

**A call's own time.** The steps that learn what a write whose reply was lost did share what is
left of the write's time, so each may get less than the client's socket timeout. redis-py documents
no per-command timeout. Its `Connection.read_response` takes a timeout of its own since 8.0
(`timeout`, for one read), and its `_connect` hook reads the connection's `socket_connect_timeout`
and `socket_timeout` as it connects. So every connection the store makes is of its own classes
(a unix socket's too), and while a thread makes a call with an end (`_bounded`, a thread-local)
each of them connects, and reads each reply, within what is left of it at that moment: a new
connection that redis-py's `get_connection` connects before the call holds it (on a cluster, a
node the thread had not written to: a slot moved), a broken one's reconnect late in the call (a
resend), redis-py's own handshake (HELLO, CLIENT SETINFO: a round trip each) and a TLS one. The
socket keeps the connection's own timeout for later calls. With a redis-py whose `read_response`
takes no timeout, or whose `_connect` has changed, no such step is sent: the write answers 503
once its fate is settled, as where the feed cannot tell.

**The slot map.** RedisCluster reads its slot map again after its own errors and redirects,
never after a timeout, and the store's scripts (which must not follow ASK) do not go through its
routing. So the store drives the map itself, through `RedisCluster.nodes_manager` (undocumented):
a MOVED patches the one slot, a failed node has the map read again, and a node that timed out is
asked last when it is read again from another (a cut-off primary's promoted replica is found
within a second, not when the partition heals). When the manager is not as expected, a one-key
read through RedisCluster's own routing, which follows the redirect or reads the map again after
a connection error, stands in; after a timeout nothing does, and a cut-off primary is left when
RedisCluster next fails on it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, cast

import redis
from redis.cluster import NodesManager, RedisCluster
from redis.connection import (
    AbstractConnection,
    Connection,
    ConnectionPool,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MovedError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from app.compat import binds, warn

log = logging.getLogger(__name__)


#: Whether `_connect` is the hook this module overrides: made, connects and returns the socket.
ABORTIVE_CLOSE = all(
    binds(getattr(cls, "_connect", None)) for cls in (Connection, SSLConnection, UnixDomainSocketConnection)
)
#: Whether the pool lends connections and a connection sends and reads as held connections use them.
HELD_CONNECTIONS = (
    binds(getattr(ConnectionPool, "get_connection", None))
    and binds(getattr(ConnectionPool, "release", None), object())
    and binds(getattr(Connection, "send_command", None), "PING")
    and binds(getattr(Connection, "send_packed_command", None), b"")
    and binds(getattr(Connection, "pack_commands", None), [("PING",)])
    and binds(getattr(Connection, "can_read", None))
    and binds(getattr(Connection, "read_response", None))
    and binds(getattr(Connection, "disconnect", None))
)
#: Whether the cluster's slot map can be patched and read again as RedisCluster itself does.
SLOT_MAP = (
    binds(
        getattr(NodesManager, "initialize", None),
        last_failed_node_name=None,
        disconnect_startup_nodes_pools=False,
    )
    and binds(getattr(NodesManager, "move_node_to_end_of_cached_nodes", None), "node")
    and binds(getattr(NodesManager, "move_slot", None), object())
)
#: Whether a reply can be waited for with a timeout of its own (redis-py 8's `read_response`).
READ_TIMEOUT = HELD_CONNECTIONS and binds(getattr(Connection, "read_response", None), timeout=1.0)
#: The least a read past a call's end waits: a reply already come is still taken.
_LEAST_WAIT_S = 0.001
if not ABORTIVE_CLOSE:
    warn(
        log,
        "redis-py's Connection._connect has changed: store connections close gracefully, and a write"
        " whose reply was lost answers 503",
    )
if not HELD_CONNECTIONS:
    warn(log, "redis-py's connection pool has changed: each store call goes through execute_command")
if HELD_CONNECTIONS and not READ_TIMEOUT:
    warn(log, "redis-py's read_response takes no timeout: a write whose reply was lost answers 503")
if not SLOT_MAP:
    warn(log, "redis-py's cluster slot map has changed: only RedisCluster's own errors read it again")

#: struct linger {int l_onoff; int l_linger;}: on, with no time: the close resets.
_RESET_ON_CLOSE = struct.pack("ii", 1, 0)


def _abortive(sock: socket.socket) -> socket.socket:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
    return sock


class _CallEnd(threading.local):
    """The end of the call this thread is making, while it has one (`_bounded`): the store's
    connection classes connect and read by then."""

    #: time.monotonic(), or None. A default on the class: every read of every store connection
    #: looks it up, and a thread-local's missing attribute costs an AttributeError made and dropped.
    until: float | None = None


_CALL = _CallEnd()


def _connect_by(connection: Any, until: float, connect: Callable[[], Any]) -> Any:
    """`connect()` within what is left until `until` at this moment, a TLS handshake included:
    redis-py reads both timeouts as it connects; the socket keeps the connection's own after."""
    left = _left(until)
    own_connect, own = connection.socket_connect_timeout, connection.socket_timeout
    connection.socket_connect_timeout = min(own_connect, left) if own_connect else left
    connection.socket_timeout = min(own, left) if own else left
    try:
        sock = connect()
    finally:
        connection.socket_connect_timeout, connection.socket_timeout = own_connect, own
    sock.settimeout(own)
    return sock


class _ByTheCallsEnd(AbstractConnection):
    """A connection that, during its thread's call with an end, connects and reads by then: the
    connect of a new connection or of a broken one's reconnect, and each reply, redis-py's own
    handshake's (HELLO, CLIENT SETINFO) included."""

    def _connect(self) -> Any:
        # The concrete class's hook (Connection's, SSLConnection's, ...), next in the order.
        connect: Callable[[], Any] = cast(Any, super())._connect
        until = _CALL.until
        return connect() if until is None else _connect_by(self, until, connect)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        until = _CALL.until
        if until is not None and "timeout" not in kwargs:
            # Past the end, the least wait rather than none: redis-py's own timeout closes the
            # connection, on which a reply is still due.
            kwargs["timeout"] = max(until - time.monotonic(), _LEAST_WAIT_S)
        return super().read_response(*args, **kwargs)


class _Abortive(_ByTheCallsEnd):
    def _connect(self) -> Any:
        return _abortive(super()._connect())


class AbortiveConnection(_Abortive, Connection):
    """redis-py's TCP connection, with SO_LINGER 0 from the moment it connects."""


class AbortiveSSLConnection(_Abortive, SSLConnection):
    """redis-py's TLS connection, with SO_LINGER 0 on its socket (the TLS socket wraps the same
    descriptor, so the option is the TCP socket's)."""


class BoundedUnixConnection(_ByTheCallsEnd, UnixDomainSocketConnection):
    """redis-py's unix socket connection: it has no send queue, so it closes as it is."""


def connection_class(*, tls: bool = False, unix: bool = False) -> type[AbstractConnection]:
    """The `connection_class` of a store's pools: theirs, whose calls can be bounded, when
    redis-py's `_connect` is as expected; else redis-py's own."""
    if not ABORTIVE_CLOSE:
        return UnixDomainSocketConnection if unix else SSLConnection if tls else Connection
    return BoundedUnixConnection if unix else AbortiveSSLConnection if tls else AbortiveConnection


#: Clients one thread may hold a connection of: on a cluster, one per node it has written to.
_MOST_HELD = 64


class _ThreadEnd:
    """Held in a thread's locals beside its connections, and collected when the thread ends."""


#: One thread's held connections, by the id of their client: (client, connection, the count of
#: `HeldConnections.renew` calls when it was taken).
_Held = dict[int, tuple[redis.Redis, Any, int]]


def _release(held: _Held) -> None:
    """Connections back to their pools."""
    for client, connection, _ in held.values():
        client.connection_pool.release(connection)
    held.clear()


class Unanswered(RedisConnectionError):
    """The connection broke after a command was sent whole and before its reply came: the
    command may have run, and was not sent again."""


class HeldConnections:
    """Each thread's connection of each client; they go back to their pools when the thread ends,
    so a server that starts a thread per request (`flask run`) reuses them."""

    def __init__(self) -> None:
        self._local = threading.local()
        #: How many times `renew` was called: a held connection taken before the last is stale.
        #: Counted under a lock: `+=` reads, adds and stores in separate steps, between which
        #: another thread's renewal may run, and two renewals counted as one would leave a
        #: connection a thread took between them (from the pool, still on the old server, as
        #: the first renewal counted) unrenewed until it met READONLY itself.
        self._renewals = 0
        self._renewals_lock = threading.Lock()

    @property
    def renewals(self) -> int:
        """How many times `renew` was called."""
        return self._renewals

    def renew(self) -> None:
        """After a server stopped being the primary behind its address (a failover behind the
        same name): each thread's held connection (of any client) is closed by that thread itself
        before its next call, never under a call another thread is making, and connects again,
        resolving the name afresh. The pool's own connections are the pool's to renew."""
        with self._renewals_lock:
            self._renewals += 1

    def call(
        self, client: redis.Redis, *command: Any, resend: bool = True, until: float | None = None
    ) -> Any:
        """The reply to `command` on this thread's connection of `client`; raises what redis-py
        raises. As the client does: one retry on a broken connection (one Redis closed, say after
        a restart; redis-py reconnects on the next send), none on a timeout, after which redis-py
        has closed the connection. After a reply was lost, the retry only with `resend`; without
        it, `Unanswered`. Any other error came with a whole reply: the connection is in step.
        `until` (time.monotonic()): TimeoutError past it (`_bounded`)."""
        if not HELD_CONNECTIONS:
            # execute_command resends after a lost reply: no write raises Unanswered, so no call
            # learning what one did is given an `until`.
            return client.execute_command(*command)
        with _bounded(until):
            connection = self._connection(client)
            if resend:
                try:
                    connection.send_command(*command)
                    return connection.read_response()
                except RedisConnectionError:
                    connection.disconnect()
                    connection.send_command(*command)
                    return connection.read_response()
            _sent(connection, lambda: connection.send_command(*command))
            try:
                return connection.read_response()
            except RedisConnectionError as exc:
                connection.disconnect()
                raise Unanswered("the reply was lost") from exc

    def call_all(self, client: redis.Redis, *commands: tuple, until: float | None = None) -> list[Any]:
        """The replies to `commands`, sent together on this thread's connection of `client` (an
        error reply in its place, as a pipeline's with raise_on_error=False); never resent after
        a lost reply (`Unanswered`). `until`: as `call`'s."""
        if not HELD_CONNECTIONS:
            pipe = client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            return list(pipe.execute(raise_on_error=False))
        with _bounded(until):
            connection = self._connection(client)
            packed = connection.pack_commands(commands)
            _sent(connection, lambda: connection.send_packed_command(packed))
            replies: list[Any] = []
            try:
                for _ in commands:
                    try:
                        replies.append(connection.read_response())
                    except ResponseError as error:  # read whole: the connection is in step
                        replies.append(error)
            except RedisConnectionError as exc:
                connection.disconnect()
                raise Unanswered("the reply was lost") from exc
        return replies

    def _connection(self, client: redis.Redis) -> Any:
        """This thread's connection of `client`; a new one, taken during a call with an end
        (`_bounded`), connects by then: redis-py's `get_connection` connects it, handshake and all."""
        held = self._held()
        entry = held.get(id(client))
        if entry is None or entry[0] is not client:
            if len(held) >= _MOST_HELD:
                _release(held)
            entry = held[id(client)] = (client, client.connection_pool.get_connection(), self._renewals)
        elif entry[2] != self._renewals:
            entry[1].disconnect()  # its next send connects again (`renew`)
            entry = held[id(client)] = (client, entry[1], self._renewals)
        return entry[1]

    def _held(self) -> _Held:
        """This thread's connections, by the id of their client: (client, connection)."""
        local = self._local
        # A forked worker must not share its parent's sockets: it makes its own. The count of
        # forks, not os.getpid(): that is a system call on every write.
        if getattr(local, "forks", None) != _Forks.count:
            held: _Held = {}
            local.forks, local.held, local.end = _Forks.count, held, _ThreadEnd()
            # When the thread ends its locals go, and with `end` the connections go back.
            weakref.finalize(local.end, _release, held)
        return local.held


class _Forks:
    """How many times this process is a fork's child: a held connection is one of this count's."""

    count = 0

    @classmethod
    def forked(cls) -> None:
        cls.count += 1


os.register_at_fork(after_in_child=_Forks.forked)


def _sent(connection: Any, send: Callable[[], None]) -> None:
    """Sends a command whole (`send` sends it on `connection`), on a new connection when the held
    one had broken first (none of it had reached Redis: a command that is not whole never runs).
    It first makes sure Redis has not closed the connection while it was held, which the send
    itself would not tell (its bytes go to the host's send queue)."""
    try:
        if connection.can_read():
            raise RedisConnectionError("unread bytes on a held connection")
        send()
    except RedisConnectionError:
        connection.disconnect()
        send()


def _left(until: float) -> float:
    """The seconds left until `until` (time.monotonic()); TimeoutError when none are."""
    left = until - time.monotonic()
    if left <= 0:
        raise RedisTimeoutError("no time was left for the call")
    return left


def _check_bound(until: float) -> None:
    """TimeoutError when no time is left until `until`, or when the store's connections cannot
    bound a call: redis-py's reads take no timeout, or its connect hook has changed."""
    _left(until)
    if not (READ_TIMEOUT and ABORTIVE_CLOSE):
        raise RedisTimeoutError("redis-py cannot bound the wait for a reply")


#: A call without an end: most of them, so no generator is made for each.
_UNBOUNDED = contextlib.nullcontext()


def _bounded(until: float | None) -> contextlib.AbstractContextManager[None]:
    """A call of this thread that ends by `until` (time.monotonic()), when given (`_bounded_by`)."""
    return _UNBOUNDED if until is None else _bounded_by(until)


@contextlib.contextmanager
def _bounded_by(until: float) -> Iterator[None]:
    """A call of this thread that ends by `until`: each connect and each read the store's
    connections make meanwhile gets what is left when it starts (`_ByTheCallsEnd`). TimeoutError
    before anything is sent when no time is left, or when the call cannot be bounded."""
    _check_bound(until)
    _CALL.until = until
    try:
        yield
    finally:
        _CALL.until = None


def follow_redirect(client: RedisCluster, key: str, moved: MovedError | None = None) -> None:
    """After a MOVED (`moved`) or a failed node on `key`'s slot: point the map at the slot's node
    now. Raises what redis-py raises when the cluster does not answer."""
    if not SLOT_MAP:
        # Public path: RedisCluster follows the redirect, or reads the map after the error.
        with contextlib.suppress(RedisError):
            client.execute_command("EXISTS", key)
    elif moved is not None:
        client.nodes_manager.move_slot(moved)
    else:
        client.nodes_manager.initialize()


def reread_slot_map(client: RedisCluster, suspect: str | None) -> bool:
    """Read the slot map again from any node but `suspect` (a node's name), which is asked last;
    False when redis-py's map is not as expected. Raises what redis-py raises."""
    if not SLOT_MAP:
        return False
    manager = client.nodes_manager
    if suspect is not None:
        manager.move_node_to_end_of_cached_nodes(suspect)
    manager.initialize(last_failed_node_name=suspect, disconnect_startup_nodes_pools=False)
    return True
