"""The Redis store's client: one Redis, or a Redis Cluster, from the store URL; and writes that wait
for replicas (Redis's WAIT on the write's own connection).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import Script
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    ReadOnlyError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from app.compat.redis import (
    READ_TIMEOUT,
    SLOT_MAP,
    HeldConnections,
    Unanswered,
    connection_class,
    follow_redirect,
)
from app.store.base import StoreUnavailableError
from app.store.redis import lua
from app.store.redis.deadline import Deadline
from app.store.redis.failures import FAILURES, settled, translate
from app.store.redis.renewal import ServerSeen, renew, renewing_client
from app.store.redis.slot_map import SlotMapRefresh
from app.store.url import StoreUrl


def connect(url: StoreUrl, *, connect_timeout: float, timeout: float) -> redis.Redis | RedisCluster:
    """A client for the store URL: redis-py's Redis, or its RedisCluster for a cluster URL. Its TCP
    connections close abortively, and each call given an end ends by then (app/compat/redis.py)."""
    # One retry, on a broken connection only: a pooled connection that Redis closed (a restart),
    # or on a cluster a node that failed (the retry follows the refreshed slot map). Every
    # script is safe to repeat: a create that landed answers "identical", a delete "absent".
    options: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": timeout,
        "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    }
    # The project's classes, which bound a call's connects and reads by its end; a unix socket's
    # closes as it is (no send queue: a write is in Redis's buffer at once).
    tls = url.scheme in ("rediss", "rediss+cluster")
    options["connection_class"] = connection_class(tls=tls, unix=url.scheme == "unix")
    if not url.cluster:
        return renewing_client(url.url, **options)
    # Given a `url`, RedisCluster builds each node's pool from these options, connection_class
    # included (given only startup nodes, it does not take one). The URL names the first node
    # alone, so that the TLS, user and password come from the options.
    options.update(url.tls_options)  # the URL's ssl_* options, which rediss:// gives redis-py in its URL
    return RedisCluster(
        url=f"redis://{url.addresses[0]}",
        startup_nodes=[ClusterNode(host, port) for host, port in url.nodes[1:]],
        username=url.username,
        password=url.password,
        **options,
    )


class LazyClient:
    """The client, made on first use: a RedisCluster reads the slot map when made, and the service
    must start (and answer 503) while the cluster is down."""

    def __init__(self, url: StoreUrl, *, connect_timeout: float, timeout: float) -> None:
        self.cluster = url.cluster
        self._make = lambda: connect(url, connect_timeout=connect_timeout, timeout=timeout)
        self._client: redis.Redis | RedisCluster | None = None if self.cluster else self._make()
        self._lock = threading.Lock()
        #: Per slot, the name and the plain client of the node that serves it.
        self._nodes: dict[int, tuple[str, redis.Redis]] = {}
        self._held = HeldConnections()
        self._slot_map = SlotMapRefresh()
        self._seen = ServerSeen()

    def get(self) -> Any:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make()
                client = self._client
        return client

    def node_for(self, key: str) -> redis.Redis:
        """The plain client of the node that serves `key`: the client itself on a single Redis.

        RedisCluster's per-command routing costs more CPU than the command's own client work
        (bench/README.md), so commands on one group go straight to its node, whose client is
        kept per slot, and are forgotten after a redirect or a failure.
        """
        return self.entry_for(key)[1]

    def entry_for(self, key: str) -> tuple[str | None, redis.Redis]:
        """The name (None on a single Redis) and the plain client of the node that serves `key`."""
        client = self.get()
        if not self.cluster:
            return None, client
        slot = key_slot(key.encode())
        entry = self._nodes.get(slot)
        if entry is None:
            node = client.get_node_from_key(key)
            entry = self._nodes[slot] = (node.name, client.get_redis_connection(node))
        return entry

    def call(self, node: redis.Redis, *command: Any, resend: bool = True, until: float | None = None) -> Any:
        """`command` on `node` (a plain client), on this thread's held connection (app/compat/redis.py);
        after a lost reply, sent again only with `resend`; a timeout at `until` (time.monotonic())."""
        return self._held.call(node, *command, resend=resend, until=until)

    def call_all(self, node: redis.Redis, *commands: tuple, until: float | None = None) -> list[Any]:
        """`commands` together on `node`'s held connection, never sent again after a lost reply."""
        return self._held.call_all(node, *commands, until=until)

    def read(self, key: str, *command: Any, until: float | None = None) -> Any:
        """`command`, a one-key read, on the node that serves `key`; on a cluster, after a
        redirect or a failed node, once more through RedisCluster, which follows them (a one-key
        read is safe on either node of a moving slot). A failure raises the store's error, which
        names the cluster's node that failed. `until` (time.monotonic()): a timeout then at the
        latest, where redis-py can bound a read (else its socket timeout), and no second try
        through RedisCluster, whose calls have no end of their own."""
        bound = until if READ_TIMEOUT else None
        try:
            try:
                return self.call(self.node_for(key), *command, until=bound)
            except (AskError, TryAgainError, ClusterDownError, RedisConnectionError):
                if not self.cluster or bound is not None:
                    raise
                self.forget(key)
                return self.get().execute_command(*command)
            except RedisTimeoutError:
                self.suspect(key)
                raise
        except FAILURES as exc:
            raise translate(exc, self.serving(key)) from None

    def serving(self, key: str) -> str | None:
        """The host:port of the cluster's node that serves `key` by the slot map, as RedisCluster
        names its nodes; None on a single Redis (the store URL names it), or when no node does."""
        client = self._client  # never made here: a cluster that did not answer is asked once
        if not isinstance(client, RedisCluster):
            return None
        try:
            return str(client.get_node_from_key(key).name)
        except FAILURES:
            return None

    def renew(self, node: redis.Redis) -> None:
        """`node` answered READONLY: the server its address named is a replica now, the primary
        maybe moved behind the same name (a DNS name, a socket path re-pointed). A script that met
        READONLY did nothing (Redis refuses it at its first write; library.lua's undo meets the
        same refusal), so it may be sent again. Every connection of this client connects again,
        resolving the name afresh: the idle ones now, the others before they are next used, each
        held one by its own thread (app/compat/redis.py, renewal.py)."""
        self._held.renew()
        renew(node)

    def server_changed(self, run_id: str | None) -> bool:
        """Whether the server the name names (its `run_id`, as a probe found it) is another than at
        the last probe: the first probe counts as a change."""
        return self._seen.changed(run_id)

    def renewals(self) -> int:
        """How many times `renew` was called: a listener of its own follows it (listener.py)."""
        return self._held.renewals

    def forget(self, key: str) -> None:
        self._nodes.pop(key_slot(key.encode()), None)

    def suspect(self, key: str) -> int:
        """The node that serves `key` did not answer (in time): on a cluster, it may be cut off and
        its replica promoted, which only a fresh slot map tells (redis-py reads the map again
        after an error or a redirect, never after a timeout). So forget it, and read the map
        again from another node, in the background (slot_map.py). Returns the reads of the map
        done so far, for `wait_for_map`."""
        if not self.cluster:
            return 0
        entry = self._nodes.pop(key_slot(key.encode()), None)
        # After each read any slot may have moved: ask the new map for each.
        return self._slot_map.refresh(self.get(), entry[0] if entry else None, self._nodes.clear)

    def wait_for_map(self, after: int, timeout: float) -> bool:
        """Whether a read of the map after `after` reads (suspect's answer) ended within `timeout`."""
        return self._slot_map.wait_for_read(after, timeout)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


#: The attribute of a failure that names the node it came from, as it was when the script was sent.
_SENT_TO = "plants_sent_to"


class ScriptRunner:
    """Runs the store's scripts on the node of their group, and waits for replicas when asked.

    On a cluster a script never follows ASK: while its group's slot moves between nodes, some of
    the group's keys are on each, and a script (which reaches keys it cannot declare, the index
    leaves) must not run on either. The scripts refuse to start on the source node (their first
    command probes the slot, see lua.py), and ASK or TRYAGAIN is waited out here until
    the move ends in MOVED, which refreshes redis-py's slot map, or until `moving_wait_s`.

    A write (a plant's, an endpoint's change) carries a `Deadline` (deadline.py): when its outcome
    is unknown (a timeout, or a connection lost once it may have been sent) its error is raised
    only once the deadline has passed, after which Redis refuses it; so it can never land after
    the 503 it answered. A script run with `resend` False is never sent again once it was sent
    whole (nor on a cluster's other node after a failover). One run to `learn` is not either, and
    its lost reply raises `Unanswered` at once, before the deadline's wait, for lost.py to learn
    what it did (it looks for the write's event first). A script given `until`
    (time.monotonic()) times out then at the latest, whatever its connect, its replies or a move
    of its slot would take.
    """

    def __init__(self, nodes: LazyClient, *, replicas: int, wait_ms: int, moving_wait_s: float) -> None:
        self._nodes = nodes
        self._scripts: dict[str, Script] = {}
        self._replicas = replicas
        self._wait_ms = wait_ms
        self._moving_wait_s = moving_wait_s

    def __call__(
        self,
        name: str,
        keys: tuple,
        args: tuple,
        *,
        write: bool = False,
        deadline: Deadline | None = None,
        resend: bool = True,
        learn: bool = False,
        until: float | None = None,
    ) -> Any:
        """The answer of the script `name` of lua.py; `write` waits for the replicas, if asked. A
        failure raises the store's error, which names the cluster's node that failed; with
        `learn` (never resent), a lost reply raises `Unanswered`."""
        try:
            return self._run(name, keys, args, write=write, resend=resend and not learn, until=until)
        except FAILURES as exc:
            if isinstance(exc, Unanswered) and learn:
                raise  # lost.py learns what it did, and waits for the deadline as it must
            unknown = isinstance(exc, (RedisTimeoutError, RedisConnectionError)) and not settled(exc)
            if deadline is not None and unknown:
                deadline.wait_until_settled()
            # The node it was sent to, not the one a read of the map since names for its slot.
            raise translate(exc, getattr(exc, _SENT_TO, None) or self._nodes.serving(keys[0])) from None

    def serving(self, key: str) -> str | None:
        """The cluster's node that serves `key` (LazyClient.serving)."""
        return self._nodes.serving(key)

    def _run(
        self, name: str, keys: tuple, args: tuple, *, write: bool, resend: bool, until: float | None
    ) -> Any:
        script = self._scripts.get(name)
        if script is None:
            script = self._scripts[name] = self._nodes.get().register_script(getattr(lua, name))
        moving_deadline = time.monotonic() + self._moving_wait_s
        if until is not None:
            moving_deadline = min(moving_deadline, until)
        redirects = 0
        renewed = False
        sent_to = None
        wait = write and self._replicas > 0
        try:
            while True:
                sent_to, node = self._nodes.entry_for(keys[0])
                try:
                    return self._once(node, script, keys, args, wait=wait, resend=resend, until=until)
                except NoScriptError:
                    self._nodes.call(node, "SCRIPT", "LOAD", script.script, until=until)
                except (MovedError, ClusterDownError, RedisConnectionError) as exc:
                    if isinstance(exc, Unanswered) and not resend:
                        raise  # it may have run: never on another node too
                    redirects += 1
                    if not self._nodes.cluster or redirects > (5 if isinstance(exc, MovedError) else 2):
                        raise
                    if not self._follow(keys[0], exc, until):
                        raise
                except ReadOnlyError:
                    # A replica now, which refused the script at its first write: once more on a
                    # fresh connection, which may find the primary behind the name (`renew`).
                    if renewed:
                        raise
                    renewed = True
                    self._nodes.renew(node)
                except (AskError, TryAgainError):  # (MovedError, an AskError, is caught above)
                    if time.monotonic() > moving_deadline:
                        raise
                    time.sleep(0.02)
                except RedisTimeoutError:
                    self._nodes.suspect(keys[0])
                    raise
        except FAILURES as exc:
            setattr(exc, _SENT_TO, sent_to)  # for the log: the node as it was when sent
            raise

    def _follow(self, key: str, exc: Exception, until: float | None) -> bool:
        """After a redirect or a failure on `key`'s node: whether the slot's node may be another
        now (a move or a failover). MOVED names it, as RedisCluster itself patches its map;
        otherwise the map is read again in the background (slot_map.py) and waited for, for no
        longer than half the store's timeout (a write's 503 waits for no one's read longer), nor
        past `until`."""
        self._nodes.forget(key)
        moved = exc if isinstance(exc, MovedError) else None
        if moved is not None or not SLOT_MAP:
            # A failure here leaves the map to the next call.
            with contextlib.suppress(*FAILURES):
                follow_redirect(self._nodes.get(), key, moved)
            return True
        wait_s = self._wait_ms / 1000
        if until is not None:
            wait_s = min(wait_s, until - time.monotonic())
        reads = self._nodes.suspect(key)
        return wait_s > 0 and self._nodes.wait_for_map(reads, wait_s)

    def _once(
        self,
        node: redis.Redis,
        script: Script,
        keys: tuple,
        args: tuple,
        *,
        wait: bool,
        resend: bool,
        until: float | None,
    ) -> Any:
        command = ("EVALSHA", script.sha, len(keys), *keys, *args)
        if not wait:
            return self._nodes.call(node, *command, resend=resend, until=until)
        # WAIT counts the replicas that have this connection's writes, so it must follow the
        # script on the same connection: sent together, one round trip, and never sent again.
        answer, confirmed = self._nodes.call_all(
            node, command, ("WAIT", self._replicas, self._wait_ms), until=until
        )
        for result in (answer, confirmed):
            if isinstance(result, Exception):
                raise result
        if confirmed < self._replicas:
            raise StoreUnavailableError(
                "replication",
                f"Redis: {confirmed} of {self._replicas} replicas confirmed the write in time",
                self._nodes.serving(keys[0]),
            )
        return answer
