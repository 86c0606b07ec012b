"""Build the page indexes of a Redis store written by 1.0.0: `python -m app.store.migrate`.

It reads PLANTS_STORE_URL (or PLANTS_STORE_URL_FILE) and PLANTS_STORE_PREFIX as the service
does. Each bucket is indexed by one atomic script that skips plants deleted meanwhile, indexes
each as the bucket holds it then (not as read), and changes nothing for plants already indexed,
so it is safe while 1.1.0 serves, and safe to run again. Until it has run, the service answers
pages with 503 (reads, creates and deletes work).
"""

from __future__ import annotations

import argparse
import sys

import redis
from redis.exceptions import RedisError

from app.settings import ConfigurationError, from_environ, store_location
from app.store.redis import lua
from app.store.redis.failures import unavailable
from app.store.redis.groups import BUCKETS, member
from app.store.url import StoreUrl

#: Buckets read per round trip.
BATCH = 256
#: Plants indexed per script call: a bucket of many plants (ids 65,536 apart share one) is
#: indexed in steps, so that no call holds Redis for long.
PLANTS_PER_CALL = 128


def migrate(client: redis.Redis, prefix: str) -> int:
    """Index every plant under `prefix`; mark the store as indexed; return how many were indexed."""
    tag = f"{{{prefix}}}"
    index = client.register_script(lua.INDEX)
    indexed = 0
    for start in range(0, BUCKETS, BATCH):
        pipe = client.pipeline(transaction=False)
        for bucket in range(start, start + BATCH):
            pipe.hgetall(f"{tag}:b:{bucket}")
        for bucket, plants in enumerate(pipe.execute(), start=start):
            items = list(plants.items())
            for at in range(0, len(items), PLANTS_PER_CALL):
                pairs = [
                    part
                    for field, value in items[at : at + PLANTS_PER_CALL]
                    for part in (member(int(field)), value)
                ]
                indexed += index(keys=[f"{tag}:b:{bucket}"], args=[*lua.IndexArgs(tag, ""), *pairs])
    client.set(f"{tag}:layout", "2")
    return indexed


def _parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="python -m app.store.migrate",
        description=(
            "Build the page indexes of a Redis store written by the Plant Store 1.0.0, once, with"
            " the service's own settings (PLANTS_STORE_URL or PLANTS_STORE_URL_FILE, and"
            " PLANTS_STORE_PREFIX). Safe while the service serves, and safe to run again"
            " (docs/operations.md, Redis)."
        ),
    )


def main(argv: list[str] | None = None) -> int:
    # Before the store is touched: --help prints the usage and exits 0, any argument is refused
    # (2), so that a stranger's first `--help` or a guessed `--dry-run` writes nothing.
    _parser().parse_args(argv)
    try:
        text, key, prefix = store_location(from_environ())
        try:
            url = StoreUrl.parse(text)
        except ValueError as exc:
            raise ConfigurationError(key, str(exc)) from None
        if not url.shared:
            raise ConfigurationError(key, "names the memory store, which needs no migration")
        if url.cluster:
            # 1.0.0 never ran on a cluster: its stores are single Redis servers.
            raise ConfigurationError(key, "names a cluster; 1.0.0 stores are on one Redis")
    except ConfigurationError as exc:
        print(f"Plant Store migrate: configuration error: {exc.from_environment()}", file=sys.stderr)
        return 2
    try:
        indexed = migrate(redis.Redis.from_url(url.url, socket_timeout=30, socket_connect_timeout=5), prefix)
    except RedisError as exc:
        print(
            f"Plant Store migrate: Redis at {url.redacted} failed: {unavailable(exc)}; once that is"
            " mended, run it again (what it indexed stays, and indexing twice changes nothing).",
            file=sys.stderr,
        )
        return 1
    print(f"Plant Store migrate: indexed {indexed} plants under prefix {prefix!r}; pages are served.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
