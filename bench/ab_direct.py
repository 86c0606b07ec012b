"""Redis's CPU per write, with the store of one tree driven directly: run by bench/ab.py, once per
tree and round, as `python bench/ab_direct.py --tree DIR --socket SOCK --count N`.

It imports `app` from DIR (the working tree, or a git ref's worktree), makes the store as the
service would (the feed at its default retention where the tree has one), and from 16 threads
makes N creates (four tags), replays them, reads them, reads N/100 pages of 100 (all, one tag,
and of the feed where the tree has one), renames them (where the tree can), then deletes them:
one round trip per call, as the workers do, so that Redis is busy. For each operation it prints,
as JSON, the Redis CPU per call (`INFO cpu`, user + sys, I/O included) and the script's own time
(`INFO commandstats`, `evalsha`).
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--count", type=int, default=20_000)
    args = parser.parse_args()
    sys.path.insert(0, args.tree)
    import redis

    from app import store as stores

    options = {"capacity": 10**9, "prefix": f"ab-{uuid.uuid4().hex}", "connect_timeout": 5, "timeout": 5}
    if "events_retain" in inspect.signature(stores.store_from_url).parameters:
        options["events_retain"] = 100_000  # the service's default
    store = stores.store_from_url(f"unix://{args.socket}", **options)
    client = redis.Redis(unix_socket_path=args.socket)
    ids = [7 * 10**12 + n for n in range(args.count)]
    tags = ["fern", "palm", "cactus", "ivy"]
    writes = {
        "create": lambda plant_id: store.create(
            plant_id, f"Plant {plant_id % 10**6:06d}", tags[plant_id % 4]
        ),
        "replay": lambda plant_id: store.create(
            plant_id, f"Plant {plant_id % 10**6:06d}", tags[plant_id % 4]
        ),
        "get": store.get,
    }
    pages = max(1, args.count // 100)
    writes["page of 100"] = lambda _: store.page(None, 100)
    writes["tagged page of 100"] = lambda _: store.page(None, 100, ("fern",))
    if hasattr(store, "events"):
        writes["page of 100 events"] = lambda _: store.events(None, 100)
    if hasattr(store, "change"):
        writes["rename"] = lambda plant_id: store.change(
            plant_id, f"Renamed {plant_id % 10**6:06d}", stores.KEEP, stores.UNCONDITIONAL, create=False
        )
    writes["delete"] = store.delete
    found = {}
    with ThreadPoolExecutor(16) as pool:
        for name, write in writes.items():
            calls = ids[:pages] if "page" in name else ids
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
    store.close()
    print(json.dumps(found))


if __name__ == "__main__":
    main()
