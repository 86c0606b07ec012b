"""How a process hears of the other processes' writes to a Redis store's feed.

On one Redis, the feed is one stream: `XREAD BLOCK` waits for an entry after the newest seen, on
a connection of its own (its timeout is longer than the block). On a cluster the feed is a stream
per bucket group, on every shard: the listener looks at the feed's position every 0.2 s instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis

from app.store.url import StoreUrl

#: How often a cluster's listener looks at the feed's position.
CLUSTER_LOOK_SECONDS = 0.2


class StreamListener:
    """Blocks on one Redis stream until an entry newer than the last it saw is added."""

    def __init__(self, url: StoreUrl, key: str, *, connect_timeout: float, block: float) -> None:
        self._client = redis.Redis.from_url(
            url.url, socket_connect_timeout=connect_timeout, socket_timeout=block + connect_timeout + 1
        )
        self._key = key
        self._last: Any = None

    def wait(self, timeout: float) -> bool:
        if self._last is None:
            self._last = self._newest()
        answer: Any = self._client.xread({self._key: self._last}, count=1, block=max(1, int(timeout * 1000)))
        if not answer:
            return False
        # Skip to the newest entry: one wake-up covers a burst, and nothing after it is missed.
        self._last = self._newest() or answer[0][1][-1][0]
        return True

    def _newest(self) -> Any:
        entries = self._client.xrevrange(self._key, count=1)
        return entries[0][0] if entries else "0-0"

    def close(self) -> None:
        self._client.close()


class PositionListener:
    """Looks at the feed's position (`now()`) until it moves."""

    def __init__(self, now: Callable[[], bytes]) -> None:
        self._now = now
        self._last: bytes | None = None

    def wait(self, timeout: float) -> bool:
        if self._last is None:
            self._last = self._now()
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            time.sleep(CLUSTER_LOOK_SECONDS)
            position = self._now()
            if position != self._last:
                self._last = position
                return True
        return False

    def close(self) -> None:
        pass
