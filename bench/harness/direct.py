"""The A/B's Redis side: Redis's CPU per operation with one tree's store driven directly.

    python bench/harness/direct.py --socket SOCK --count N --preload P    # PYTHONPATH=TREE

Run by bench/ab.py once per tree and round, with PYTHONPATH naming the tree, so that `app` is
that tree's (the working tree, or a git revision's worktree). It makes the store as the service
would, preloads P plants so that the indexes have their depth, and from 16 threads makes N creates
of sequential ids and N of random 63-bit ids (four tags), replays them, reads them, reads N/100
pages of 100 (all, one tag, and of the feed), renames them, then deletes them: one round trip per
call, as the workers do, so that Redis is busy. For each operation it prints, as JSON, Redis's CPU
per call and the script's own time, and Redis's memory per plant after the creates.
"""

from __future__ import annotations

import argparse
import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import redis

# This directory is first on sys.path when run as a script; the `bench` package may be another tree's.
from redis_cpu import RedisCPU, random_ids  # type: ignore[import-not-found]

from app import store as stores


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--socket", required=True)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--preload", type=int, default=100_000)
    args = parser.parse_args()
    prefix = f"ab-{uuid.uuid4().hex}"
    # A long timeout: on a busy machine the 16 threads' calls queue behind each other.
    store = stores.store_from_url(
        f"unix://{args.socket}", capacity=10**9, prefix=prefix, connect_timeout=5, timeout=30,
        events_retain=100_000,  # the service's default
    )  # fmt: skip
    client = redis.Redis(unix_socket_path=args.socket)
    preloaded = [6 * 10**12 + n for n in range(args.preload)]
    sequential = [7 * 10**12 + n for n in range(args.count)]
    randoms = random_ids(args.count)
    ids = sequential + randoms
    tags = ["fern", "palm", "cactus", "ivy"]

    def create(plant_id: int) -> object:
        return store.create(plant_id, f"Plant {plant_id % 10**6:06d}", tags[plant_id % 4])

    operations = {
        "create (sequential ids)": create,
        "create (random ids)": create,
        "replay": create,
        "get": store.get,
        "page of 100": lambda _: store.page(None, 100),
        "tagged page of 100": lambda _: store.page(None, 100, ("fern",)),
        "page of 100 events": lambda _: store.events(None, 100),
        "rename": lambda plant_id: store.change(
            plant_id, f"Renamed {plant_id % 10**6:06d}", stores.KEEP, stores.UNCONDITIONAL, create=False
        ),
        "delete": store.delete,
    }
    pages = ids[: max(1, args.count // 100)]
    calls_of = {"create (sequential ids)": sequential, "create (random ids)": randoms}
    found = {}
    with ThreadPoolExecutor(16) as pool:
        memory_before = client.info("memory")["used_memory"]
        list(pool.map(create, preloaded, chunksize=256))
        for name, operation in operations.items():
            calls = pages if "page" in name else calls_of.get(name, ids)
            window = RedisCPU(client).start()
            list(pool.map(operation, calls, chunksize=64 if len(calls) > 1000 else 1))
            found[name] = window.per_call(len(calls))
            if name == "create (random ids)":
                memory = client.info("memory")["used_memory"] - memory_before
                found["memory per plant"] = {"bytes": memory / (len(preloaded) + len(ids))}
    store.close()
    # Leave Redis as it was for the next run (the A/B's servers keep their own prefixes).
    for key in client.scan_iter(match=f"{{{prefix}}}*", count=1000):
        client.unlink(key)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
