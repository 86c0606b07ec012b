"""Redis's CPU per write, with the store of one tree driven directly: run by bench/ab.py, once per
tree and round, as `python bench/ab_direct.py --tree DIR --socket SOCK --count N`.

It imports `app` from DIR (the working tree, or a git ref's worktree), makes the store as the
service would (the feed at its default retention where the tree has one), preloads `--preload`
plants so that the indexes have their depth, and from 16 threads makes N creates of sequential
ids and N of random 63-bit ids (four tags), replays them, reads them, reads N/100 pages of 100
(all, one tag, and of the feed where the tree has them), renames them (where the tree can), then
deletes them: one round trip per call, as the workers do, so that Redis is busy. For each
operation it prints, as JSON, the Redis CPU per call (`INFO cpu`, user + sys, I/O included) and
the script's own time (`INFO commandstats`, `evalsha`), and the Redis memory per plant at the end
of the creates (`used_memory`, the feed's events included where the tree has a feed).
"""

from __future__ import annotations

import argparse
import inspect
import json
import random
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor


def random_ids(count: int) -> list[int]:
    """`count` distinct ids spread over the 63-bit range, the same in every run."""
    rng = random.Random(25)
    found: set[int] = set()
    while len(found) < count:
        found.add(rng.randrange(-(2**62), 2**62))
    return sorted(found, key=lambda _: rng.random())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--preload", type=int, default=100_000)
    args = parser.parse_args()
    sys.path.insert(0, args.tree)
    import redis

    from app import store as stores

    options = {"capacity": 10**9, "prefix": f"ab-{uuid.uuid4().hex}", "connect_timeout": 5, "timeout": 5}
    if "events_retain" in inspect.signature(stores.store_from_url).parameters:
        options["events_retain"] = 100_000  # the service's default
    store = stores.store_from_url(f"unix://{args.socket}", **options)
    client = redis.Redis(unix_socket_path=args.socket)
    preloaded = [6 * 10**12 + n for n in range(args.preload)]
    sequential = [7 * 10**12 + n for n in range(args.count)]
    randoms = random_ids(args.count)
    ids = sequential + randoms
    tags = ["fern", "palm", "cactus", "ivy"]

    def create(plant_id: int) -> object:
        return store.create(plant_id, f"Plant {plant_id % 10**6:06d}", tags[plant_id % 4])

    writes = {"create (sequential ids)": create, "create (random ids)": create, "replay": create}
    if hasattr(store, "get"):
        writes["get"] = store.get
    pages = max(1, args.count // 100)
    if hasattr(store, "page"):
        writes["page of 100"] = lambda _: store.page(None, 100)
        writes["tagged page of 100"] = lambda _: store.page(None, 100, ("fern",))
    if hasattr(store, "events"):
        writes["page of 100 events"] = lambda _: store.events(None, 100)
    if hasattr(store, "change"):
        writes["rename"] = lambda plant_id: store.change(
            plant_id, f"Renamed {plant_id % 10**6:06d}", stores.KEEP, stores.UNCONDITIONAL, create=False
        )
    if hasattr(store, "delete"):
        writes["delete"] = store.delete
    found = {}
    calls_of = {"create (sequential ids)": sequential, "create (random ids)": randoms}
    with ThreadPoolExecutor(16) as pool:
        memory_before = client.info("memory")["used_memory"]
        list(pool.map(create, preloaded, chunksize=256))
        for name, write in writes.items():
            calls = ids[:pages] if "page" in name else calls_of.get(name, ids)
            client.config_resetstat()
            cpu = client.info("cpu")
            before = cpu["used_cpu_user"] + cpu["used_cpu_sys"]
            list(pool.map(write, calls, chunksize=64 if len(calls) > 1000 else 1))
            cpu = client.info("cpu")
            script = client.info("commandstats").get("cmdstat_evalsha", {})
            found[name] = {
                "redis_cpu_us": (cpu["used_cpu_user"] + cpu["used_cpu_sys"] - before) * 1e6 / len(calls),
                "script_us": script.get("usec", 0) / len(calls),
            }
            if name == "create (random ids)":
                memory = client.info("memory")["used_memory"] - memory_before
                found["memory per plant"] = {"bytes": memory / (len(preloaded) + len(ids))}
    store.close()
    # Leave Redis as it was for the next run (the A/B's servers keep their own prefixes).
    for key in client.scan_iter(match=f"{{{options['prefix']}}}*", count=1000):
        client.unlink(key)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
