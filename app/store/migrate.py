"""Build the page indexes of a Redis store: `python -m app.store.migrate`.

For a store written by 1.0.0, and for one whose Redis evicted keys (an `allkeys-*`
maxmemory-policy), among them a group's `:layout`, the mark that its indexes hold every plant: on
a single Redis or a Redis Cluster alike, each group's plants that remain are indexed again and
its mark written again. It reads PLANTS_STORE_URL (or PLANTS_STORE_URL_FILE) and
PLANTS_STORE_PREFIX as the service does. Each bucket is indexed by one atomic script that skips
plants deleted meanwhile, indexes each as the bucket holds it then (not as read), and changes
nothing for plants already indexed, so it is safe while the service serves, and safe to run again.
Until it has run, the service answers pages with 503 (reads, creates and deletes work).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from redis.exceptions import OutOfMemoryError

from app.settings import ConfigurationError, from_environ, store_location
from app.store.redis import lua
from app.store.redis.client import connect
from app.store.redis.failures import FAILURES, unavailable
from app.store.redis.groups import BUCKETS, CLUSTER_GROUPS, Groups, member
from app.store.url import StoreUrl

#: Why a migration stopped at Redis's maxmemory (after evictions, Redis is at it).
FULL = (
    "Redis is at its maxmemory and refuses the indexes' writes (Redis: OutOfMemoryError): raise"
    " maxmemory (CONFIG SET maxmemory) or free memory"
)
#: Buckets read per round trip.
BATCH = 256
#: Plants indexed per script call: a bucket of many plants (ids 65,536 apart share one) is
#: indexed in steps, so that no call holds Redis for long.
PLANTS_PER_CALL = 128


def migrate(client: Any, prefix: str, *, cluster: bool = False) -> int:
    """Index every plant under `prefix` (`client`: a single Redis's, or with `cluster` a
    RedisCluster); mark each group as indexed; return how many were indexed."""
    groups = Groups(prefix, count=CLUSTER_GROUPS if cluster else 1, capacity=1, cluster=cluster)
    index = client.register_script(lua.INDEX)
    indexed = 0
    for group, tag in enumerate(groups.tags):
        # A bucket is the id's low 16 bits, and its group the bucket modulo the count of groups.
        buckets = range(group, BUCKETS, groups.count)
        for start in range(0, len(buckets), BATCH):
            batch = buckets[start : start + BATCH]
            pipe = client.pipeline(transaction=False)
            for bucket in batch:
                pipe.hgetall(f"{tag}:b:{bucket}")
            for bucket, plants in zip(batch, pipe.execute(), strict=True):
                items = list(plants.items())
                for at in range(0, len(items), PLANTS_PER_CALL):
                    pairs = [
                        part
                        for field, value in items[at : at + PLANTS_PER_CALL]
                        for part in (member(int(field)), value)
                    ]
                    args = [*lua.IndexArgs(tag, groups.cluster_arg), *pairs]
                    indexed += index(keys=[f"{tag}:b:{bucket}"], args=args)
        client.set(f"{tag}:layout", "2")
    return indexed


def _parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="python -m app.store.migrate",
        description=(
            "Build the page indexes of a Redis store written by the Plant Store 1.0.0, or whose"
            " Redis evicted keys (an allkeys-* maxmemory-policy; set noeviction first), once, with"
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
    except ConfigurationError as exc:
        print(f"Plant Store migrate: configuration error: {exc.from_environment()}", file=sys.stderr)
        return 2
    client = None
    try:
        client = connect(url, connect_timeout=5, timeout=30)
        indexed = migrate(client, prefix, cluster=url.cluster)
    except FAILURES as exc:
        cause = FULL if isinstance(exc, OutOfMemoryError) else unavailable(exc)
        print(
            f"Plant Store migrate: Redis at {url.redacted} failed: {cause}; once that is"
            " mended, run it again (what it indexed stays, and indexing twice changes nothing).",
            file=sys.stderr,
        )
        return 1
    finally:
        if client is not None:
            client.close()
    print(f"Plant Store migrate: indexed {indexed} plants under prefix {prefix!r}; pages are served.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
