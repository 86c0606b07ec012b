"""The shared store: plants in Redis (or Valkey), one atomic script round trip per create.

Layout, all under one hash tag so that every script's keys sit in one Redis Cluster slot:

- `{prefix}:b:<n>`: one of 65,536 buckets, a small hash from id to the encoded plant. Redis keeps
  hashes of up to `hash-max-listpack-entries` small fields as a compact listpack, so a plant costs
  tens of bytes instead of a key of its own. The bucket is the id's low 16 bits: fixed forever, so
  the same id always finds the same bucket whatever the settings.
- `{prefix}:count`: how many plants are stored, for the capacity.

A plant is encoded as `<name length in bytes>:<name><tag>`; the tag is never empty, so a value
without tag bytes is a plant without a tag.
"""

from __future__ import annotations

import redis
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ReadOnlyError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from .base import Outcome, Plant, StoreFullError, StoreUnavailableError

BUCKETS = 1 << 16

# KEYS: the bucket, the count. ARGV: the id, the encoded plant, the capacity.
# Answers 0 created, 1 identical, 2 conflict, 3 full.
CREATE_SCRIPT = """
local stored = redis.call('HGET', KEYS[1], ARGV[1])
if stored then
  if stored == ARGV[2] then return 1 end
  return 2
end
if tonumber(redis.call('GET', KEYS[2]) or '0') >= tonumber(ARGV[3]) then return 3 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[2])
return 0
"""
_OUTCOMES = (Outcome.CREATED, Outcome.IDENTICAL, Outcome.CONFLICT)


def create_keys(prefix: str, plant_id: int) -> tuple[str, str]:
    """The create script's keys for `plant_id`: its bucket, and the count; `prefix` without braces."""
    return f"{{{prefix}}}:b:{plant_id & (BUCKETS - 1)}", f"{{{prefix}}}:count"


def encode(name: str, tag: str | None) -> bytes:
    name_bytes = name.encode("utf-8")
    return b"%d:%s%s" % (len(name_bytes), name_bytes, tag.encode("utf-8") if tag else b"")


def decode(value: bytes) -> Plant:
    length, _, rest = value.partition(b":")
    name, tag = rest[: int(length)], rest[int(length) :]
    return Plant(name.decode("utf-8"), tag.decode("utf-8") if tag else None)


class RedisPlantStore:
    """A bounded store in Redis, shared by every worker and host that uses the same URL and prefix."""

    shared = True

    def __init__(
        self, url: str, *, capacity: int, prefix: str, connect_timeout: float, timeout: float
    ) -> None:
        self.capacity = capacity
        self._prefix = prefix
        # One retry, on a broken connection only: a pooled connection that Redis closed (a
        # restart) fails at once and the retry takes a new one. A create is safe to repeat: a
        # create that landed answers "identical" the second time. A timeout is not retried,
        # so a hung Redis costs a request at most the connect and read timeouts.
        self._client = redis.Redis.from_url(
            url,
            socket_connect_timeout=connect_timeout,
            socket_timeout=timeout,
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        )
        self._create = self._client.register_script(CREATE_SCRIPT)

    def create(self, plant_id: int, name: str, tag: str | None) -> Outcome:
        try:
            answer = self._create(
                keys=create_keys(self._prefix, plant_id),
                args=(plant_id, encode(name, tag), self.capacity),
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
