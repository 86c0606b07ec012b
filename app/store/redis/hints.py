"""Which bucket groups each index has ever used, so that a cluster's pages skip the groups it never did.

A cluster spreads plants over `CLUSTER_GROUPS` groups, and one page reads at most a few of them.
Without hints a small store, or a rare tag, would be walked through many empty pages. A set
`{prefix}:groups:<hint>` holds the groups that have held a plant of its indexes: hint `a` for
index `a` (every plant), and for a tag's index one of `TAG_HINTS` hints, `h<crc32 of the tag mod
TAG_HINTS>`, shared by the tags that fall in it. A create adds its group to its sets *before* its
script runs, and a group is never removed, so a page that reads the sets first skips only groups
that never held a plant of its indexes (a shared hint can only make it read more). With
PLANTS_STORE_MIN_REPLICAS, the sets' shard's replicas confirm a group's entry before its create
runs, as the create's own shard's confirm the plant: else a failover of the sets' shard could lose
the entry of a plant answered 200, and every page would skip it for good. The sets are
never removed, so their number must not grow with the tags a client invents: at most
`TAG_HINTS` + 1. On a single Redis there is one group and no set.

Before 1.5.0 each tag had a set of its own, `{prefix}:groups:t<tag>`: a page reads it too, so
that a plant created by an older worker during a rolling upgrade is still found; no create
writes one now.
"""

from __future__ import annotations

import contextlib
import threading
import zlib
from collections.abc import Collection
from typing import Any

from redis.exceptions import AskError, MovedError

from app.compat.redis import follow_redirect
from app.store.base import StoreUnavailableError
from app.store.redis.client import LazyClient
from app.store.redis.failures import FAILURES
from app.store.redis.groups import Groups

#: Hints this process knows are set, kept so a create costs no round trip once its group is known.
_REMEMBERED = 100_000
#: The hints the tags share: each is a set of at most `CLUSTER_GROUPS` members.
TAG_HINTS = 1024


def tag_hint(tag: str) -> str:
    """The hint of a tag's index: the same in every process (not Python's salted hash)."""
    return f"h{zlib.crc32(tag.encode()) % TAG_HINTS}"


class GroupHints:
    """`replicas`: how many replicas confirm a new entry (Redis's WAIT, for `wait_ms`)."""

    def __init__(self, prefix: str, groups: Groups, *, replicas: int = 0, wait_ms: int = 0) -> None:
        self._prefix = prefix
        self._groups = groups
        self._replicas, self._wait_ms = replicas, wait_ms
        self._known: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def _key(self, hint: str) -> str:
        return f"{{{self._prefix}}}:groups:{hint}"

    def note(self, clients: LazyClient, plant_id: int, tag: str | None) -> None:
        """Before a create: its group is in the sets of its indexes. Raises what Redis raises, and
        StoreUnavailableError when fewer replicas than asked confirm it."""
        if self._groups.count == 1:
            return
        group = self._groups.of(plant_id)
        hints = ("a",) if tag is None else ("a", tag_hint(tag))
        missing = [hint for hint in hints if (hint, group) not in self._known]
        if not missing:
            return
        if self._replicas:
            self._confirmed(clients, [self._key(hint) for hint in missing], group)
        else:
            pipe = clients.get().pipeline(transaction=False)
            for hint in missing:
                pipe.sadd(self._key(hint), group)
            pipe.execute()
        with self._lock:
            if len(self._known) > _REMEMBERED:
                self._known.clear()
            self._known.update((hint, group) for hint in missing)

    def _confirmed(self, clients: LazyClient, keys: list[str], group: int) -> None:
        """SADD to each of `keys` (one slot: the prefix's hash tag), then WAIT on the same connection,
        which counts the replicas that have this connection's writes."""
        adds: list[tuple[Any, ...]] = [("SADD", key, group) for key in keys]
        node, commands = clients.node_for(keys[0]), adds
        for attempt in range(2):
            try:
                *added, confirmed = clients.call_all(node, *commands, ("WAIT", self._replicas, self._wait_ms))
            except FAILURES:
                clients.suspect(keys[0])  # a failover: read the map again
                raise
            redirect = next((result for result in added if isinstance(result, AskError)), None)
            if redirect is None or attempt:
                break
            if isinstance(redirect, MovedError):
                clients.forget(keys[0])  # the slot moved: once more on the node MOVED names
                with contextlib.suppress(*FAILURES):
                    follow_redirect(clients.get(), keys[0], redirect)
                node = clients.node_for(keys[0])
                continue
            # The slot is moving (ASK: the set is not, or no longer, on the migrating node): once
            # more on the importing node, each SADD after an ASKING, its replicas confirming there,
            # as RedisCluster follows ASK for any other command.
            importing = clients.get().get_node(host=redirect.host, port=redirect.port)
            if importing is None:
                break
            node = clients.get().get_redis_connection(importing)
            commands = [command for add in adds for command in (("ASKING",), add)]
        for result in (*added, confirmed):
            if isinstance(result, Exception):
                clients.forget(keys[0])
                raise result
        if confirmed < self._replicas:
            raise StoreUnavailableError(
                "replication",
                f"Redis: {confirmed} of {self._replicas} replicas confirmed the pages' entry of the"
                " write's group in time",
                clients.serving(keys[0]),
            )

    def used(self, client: Any, indexes: Collection[str]) -> list[int]:
        """The groups that ever held a plant of one of `indexes`, in order."""
        if self._groups.count == 1:
            return [0]
        pipe = client.pipeline(transaction=False)
        for index in indexes:
            pipe.smembers(self._key(index))  # `a`, or a tag's set from before 1.5.0
            if index != "a":
                pipe.smembers(self._key(tag_hint(index[1:])))
        return sorted({int(group) for members in pipe.execute() for group in members})
