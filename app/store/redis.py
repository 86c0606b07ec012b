"""The shared store: plants in Redis (or Valkey), one atomic script round trip per write or page.

The key layout and the scripts are in `redis_scripts.py`.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection

import redis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ReadOnlyError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from . import redis_scripts
from .base import Outcome, Page, Plant, StoreFullError, StoreUnavailableError

BUCKETS = 1 << 16
_OUTCOMES = (Outcome.CREATED, Outcome.IDENTICAL, Outcome.CONFLICT)
_SIGN = 1 << 63


def create_keys(prefix: str, plant_id: int) -> tuple[str, str]:
    """The create script's keys for `plant_id`: its bucket, and the count; `prefix` without braces."""
    return f"{{{prefix}}}:b:{plant_id & (BUCKETS - 1)}", f"{{{prefix}}}:count"


def member(plant_id: int) -> bytes:
    """The id as an index member: 8 bytes that sort as the id does, then the decimal id."""
    return (plant_id + _SIGN).to_bytes(8, "big") + str(plant_id).encode()


def encode(name: str, tag: str | None) -> bytes:
    name_bytes = name.encode("utf-8")
    return b"%d:%s%s" % (len(name_bytes), name_bytes, tag.encode("utf-8") if tag else b"")


def decode(value: bytes) -> Plant:
    return Plant(*_decode_fields(value))


def _decode_fields(value: bytes) -> tuple[str, str | None]:
    length, _, rest = value.partition(b":")
    name, tag = rest[: int(length)], rest[int(length) :]
    return name.decode("utf-8"), tag.decode("utf-8") if tag else None


class RedisPlantStore:
    """A bounded store in Redis, shared by every worker and host that uses the same URL and prefix."""

    shared = True

    def __init__(
        self, url: str, *, capacity: int, prefix: str, connect_timeout: float, timeout: float
    ) -> None:
        self.capacity = capacity
        self._prefix = prefix
        self._tag = f"{{{prefix}}}"
        # One retry, on a broken connection only: a pooled connection that Redis closed (a
        # restart) fails at once and the retry takes a new one. Every script is safe to repeat:
        # a create that landed answers "identical" the second time, a delete "absent". A
        # timeout is not retried, so a hung Redis costs a request at most the two timeouts.
        self._client = redis.Redis.from_url(
            url,
            socket_connect_timeout=connect_timeout,
            socket_timeout=timeout,
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        )
        self._create = self._client.register_script(redis_scripts.CREATE)
        self._delete = self._client.register_script(redis_scripts.DELETE)
        self._page = self._client.register_script(redis_scripts.PAGE)
        self._cursor_key: bytes | None = None

    def create(self, plant_id: int, name: str, tag: str | None) -> Outcome:
        try:
            answer = self._create(
                keys=create_keys(self._prefix, plant_id),
                args=(self._tag, plant_id, encode(name, tag), self.capacity, member(plant_id)),
            )
        except OutOfMemoryError:
            # maxmemory reached with noeviction: Redis refuses every write.
            raise StoreFullError from None
        except RedisError as exc:
            raise unavailable(exc) from None
        if answer == 3:
            raise StoreFullError
        return _OUTCOMES[answer]

    def get(self, plant_id: int) -> Plant | None:
        try:
            value = self._client.hget(create_keys(self._prefix, plant_id)[0], str(plant_id))
        except RedisError as exc:
            raise unavailable(exc) from None
        return None if value is None else decode(value)

    def delete(self, plant_id: int) -> bool:
        try:
            # Its first write is HDEL, which Redis allows at maxmemory: a full store can delete.
            return (
                self._delete(
                    keys=create_keys(self._prefix, plant_id), args=(self._tag, plant_id, member(plant_id))
                )
                == 1
            )
        except RedisError as exc:
            raise unavailable(exc) from None

    def page(self, after: int | None, limit: int, tags: Collection[str] | None = None) -> Page:
        indexes = ["a"] if tags is None else ["t" + tag for tag in tags]
        if not indexes:
            return Page([], False)
        start = b"" if after is None else member(after)
        try:
            answer = self._page(keys=(f"{self._tag}:count",), args=(self._tag, start, limit, *indexes))
        except ResponseError as exc:
            if str(exc).startswith("NEEDSMIGRATION"):
                raise StoreUnavailableError(
                    "needs_migration",
                    "Redis holds plants stored by 1.0.0 without the indexes that pages need: "
                    "run `python -m app.store.migrate` once",
                ) from None
            raise unavailable(exc) from None
        except RedisError as exc:
            raise unavailable(exc) from None
        plants = [(int(answer[i]), *_decode_fields(answer[i + 1])) for i in range(1, len(answer), 2)]
        return Page(plants, answer[0] == 1)

    def cursor_key(self) -> bytes:
        """A random secret kept in Redis beside the plants, made by the first process that asks."""
        if self._cursor_key is None:
            key = f"{self._tag}:cursor-key"
            try:
                # A read first, so that a read-only replica can serve pages; SET NX GET then
                # answers the key another process made meanwhile, or nil when this call made it.
                found = self._client.get(key)
                if found is None:
                    made = secrets.token_bytes(32)
                    found = self._client.set(key, made, nx=True, get=True) or made
                self._cursor_key = found
            except RedisError as exc:
                raise unavailable(exc) from None
        return self._cursor_key

    def __len__(self) -> int:
        try:
            return int(self._client.get(create_keys(self._prefix, 0)[1]) or 0)
        except RedisError as exc:
            raise unavailable(exc) from None

    def ping(self) -> None:
        try:
            self._client.ping()
        except RedisError as exc:
            raise unavailable(exc) from None

    def close(self) -> None:
        self._client.close()


def unavailable(exc: RedisError) -> StoreUnavailableError:
    """The store's error for a Redis failure: its reason, and a message without the URL."""
    # Only the class: redis-py's messages can name the host, never the password, but a
    # class name is all an operator needs next to the request's 503.
    if isinstance(exc, RedisTimeoutError):
        reason = "timeout"
    elif isinstance(exc, RedisConnectionError):
        reason = "connection"
    elif isinstance(exc, ReadOnlyError):
        reason = "read_only"
    else:
        reason = "other"
    return StoreUnavailableError(reason, f"Redis: {type(exc).__name__}")
