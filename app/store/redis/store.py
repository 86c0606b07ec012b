"""The shared store: plants in Redis, Valkey or a Redis Cluster, one atomic script per write or page.

The key layout and the scripts are in `lua.py`; how plants spread over bucket groups
(one on a single Redis, `CLUSTER_GROUPS` on a cluster) in `groups.py`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from app.store.base import (
    UNCONDITIONAL,
    Change,
    CreateOutcome,
    EventPage,
    FeedEntry,
    FeedSelection,
    Page,
    Plant,
    Precondition,
    Selected,
)
from app.store.readiness import Readiness
from app.store.redis.client import LazyClient, ScriptRunner, connect
from app.store.redis.cursor_secret import SharedSecret
from app.store.redis.endpoints import RedisEndpoints
from app.store.redis.failures import RedisBacked
from app.store.redis.feed import GroupFeeds
from app.store.redis.groups import CLUSTER_GROUPS, Groups, decode
from app.store.redis.hints import GroupHints
from app.store.redis.listener import BLOCK_MS, StreamsListener
from app.store.redis.lost import LostReplies
from app.store.redis.pages import GroupPages
from app.store.redis.probe import probe
from app.store.redis.writes import PlantWrites
from app.store.url import CLUSTER_SCHEMES, StoreUrl

#: How long a write waits for a group whose slot is moving between nodes, in all.
_MOVING_WAIT_S = 1.0


class RedisPlantStore(RedisBacked):
    """A bounded store in Redis, shared by every worker and host that uses the same URL and prefix."""

    SCHEMES = ("redis", "rediss", "unix", *CLUSTER_SCHEMES)
    shared = True

    @classmethod
    def from_url(cls, url: StoreUrl, **options: Any) -> RedisPlantStore:
        return cls(url, **options)

    def __init__(
        self,
        url: StoreUrl,
        *,
        capacity: int,
        prefix: str,
        connect_timeout: float,
        timeout: float,
        min_replicas: int = 0,
        events_retain: int = 0,
    ) -> None:
        self.capacity = capacity
        self.events_retain = events_retain
        self._clients = LazyClient(url, connect_timeout=connect_timeout, timeout=timeout)
        self._url, self._connect_timeout = url, connect_timeout
        cluster = self._clients.cluster
        self.groups = Groups(
            prefix,
            count=CLUSTER_GROUPS if cluster else 1,
            capacity=capacity,
            cluster=cluster,
            retain=events_retain,
        )
        # WAIT answers within half the socket timeout, so its shortfall is a 503 of its own.
        wait_ms = max(1, int(timeout * 500))
        hints = GroupHints(prefix, self.groups, replicas=min_replicas, wait_ms=wait_ms)
        self._cursor_key = SharedSecret(f"{{{prefix}}}:cursor-key")
        self._run = ScriptRunner(
            self._clients, replicas=min_replicas, wait_ms=wait_ms, moving_wait_s=_MOVING_WAIT_S
        )
        # A write's lost reply is learnt from the feed, never by resending it.
        lost = LostReplies(self._run, self.groups, timeout, confirmed=min_replicas > 0)
        # A plant's write takes effect within the store timeout of its start, or never.
        self._writes = PlantWrites(
            self._clients, self.groups, hints, lost, window_s=timeout, rewrite=min_replicas > 0
        )
        self._pages = GroupPages(self._clients, self.groups, hints, self._run)
        self._feeds = GroupFeeds(self._clients, self.groups, self._run)
        # A change of an endpoint, as a plant's write, takes effect within the store timeout or never.
        self.endpoints = RedisEndpoints(self._clients, self._run, prefix, cluster=cluster, window_s=timeout)

    def create(self, plant_id: int, name: str, tag: str | None, *, origin: str = "") -> CreateOutcome:
        return self._writes.create(plant_id, name, tag, origin=origin)

    def get(self, plant_id: int) -> Plant | None:
        key = self.groups.bucket_key(plant_id)
        value = self._clients.read(key, "HGET", key, str(plant_id))
        return None if value is None else decode(value, plant_id, self.groups)

    def delete(self, plant_id: int, precondition: Precondition = UNCONDITIONAL, *, origin: str = "") -> bool:
        return self._writes.delete(plant_id, precondition, origin=origin)

    def change(
        self,
        plant_id: int,
        name: Any,
        tag: Any,
        precondition: Precondition,
        *,
        create: bool,
        origin: str = "",
    ) -> tuple[Change, Plant | None]:
        return self._writes.change(plant_id, name, tag, precondition, create=create, origin=origin)

    def page(self, after: bytes | None, limit: int, tags: Collection[str] | None = None) -> Page:
        """A page in (group, id) order; on a single Redis (one group) that is id order."""
        return self._pages.page(after, limit, tags)

    def events(self, after: bytes | None, limit: int) -> EventPage:
        """Events merged from each group's stream (feed.py)."""
        return self._feeds.page(after, limit)

    def events_now(self) -> bytes:
        return self._feeds.now()

    def tag_before(self) -> tuple[str | None] | None:
        return self._writes.tag_before()

    def write_mark(self) -> bytes | None:
        return self._writes.write_mark()

    def feed_listener(self) -> StreamsListener:
        """What hears the other processes' writes to the feed (listener.py): a client of its own,
        whose timeout outlasts a blocking read."""
        timeout = BLOCK_MS / 1000 + self._connect_timeout + 1
        client = connect(self._url, connect_timeout=self._connect_timeout, timeout=timeout)
        keys = [self.groups.feed_key(g) for g in range(self.groups.count)]
        return StreamsListener(client, keys, None if self._clients.cluster else self._clients.renewals)

    def feed_entries(
        self, after: bytes | None, limit: int, *, read_on: bool = False
    ) -> tuple[list[FeedEntry], bytes]:
        return self._feeds.entries(after, limit, read_on=read_on)

    def feed_select(
        self, after: bytes | None, limit: int, selection: FeedSelection, *, read_most: int
    ) -> Selected:
        """Judged by the feed's script: only the entries it selects cross whole (feed.py)."""
        return self._feeds.select(after, limit, selection, read_most)

    def feed_count(self, position: bytes) -> int:
        return self._feeds.count(position)

    def cursor_key(self) -> bytes:
        """A random secret kept in Redis beside the plants, made by the first process that asks
        (cursor_secret.py: at maxmemory, this process's own until Redis takes it)."""
        return self._cursor_key.get(self._clients)

    def __len__(self) -> int:
        pipe = self._clients.get().pipeline(transaction=False)
        for group in range(self.groups.count):
            pipe.get(self.groups.count_key(group))
        return sum(int(count or 0) for count in pipe.execute())

    def ping(self) -> None:
        self._clients.get().ping()

    def readiness(self) -> Readiness:
        return probe(self._clients, self.groups)

    def close(self) -> None:
        self._clients.close()
