"""What one page can make Redis do: a 20-tag page of 1000 against a 1-tag page of 1000.

    .venv/bin/python bench/page_bound.py [--plants-per-tag 1001] [--rounds 30]

Fills a fresh redis-server with 20 tags of `--plants-per-tag` plants each through the store,
then times the PAGE script as Redis counts it (`INFO commandstats`, microseconds per EVALSHA)
for each page shape, the slowest single call (`SLOWLOG`), and Redis's `PING` latency from a
second client while one client pages 20 tags back to back. Goal (issue 31): the 20-tag page
at most 3 times the 1-tag page, no call over 20 ms, PING p99 ≤ 15 ms.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from app.store import store_from_url
from tests.servers import RedisServer

TAGS = [f"tag-{n:02d}" for n in range(20)]


def evalsha_usec(client: redis.Redis) -> tuple[int, float]:
    stats = client.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return stats["calls"], stats["usec"]


def per_call(client: redis.Redis, run) -> float:  # type: ignore[no-untyped-def]
    calls, usec = evalsha_usec(client)
    run()
    calls2, usec2 = evalsha_usec(client)
    return (usec2 - usec) / max(1, calls2 - calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plants-per-tag", type=int, default=1001)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    server = RedisServer(Path(tempfile.mkdtemp(prefix="page-bound-")))
    try:
        store = store_from_url(
            server.unix_url, capacity=10**7, prefix="bench", connect_timeout=5, timeout=10,
            min_replicas=0, events_retain=0,
        )  # fmt: skip
        for n, tag in enumerate(TAGS):
            for i in range(args.plants_per_tag):
                store.create(n + i * len(TAGS), f"plant {i}", tag)
        client = redis.Redis(unix_socket_path=server.unix_url.removeprefix("unix://").split("?")[0])
        client.config_set("slowlog-log-slower-than", 0)
        store.page(None, 1000, TAGS[:1])  # loads the script

        def pages(tags: list[str]) -> None:
            for _ in range(args.rounds):
                store.page(None, 1000, tags)

        one = per_call(client, lambda: pages(TAGS[:1]))
        twenty = per_call(client, lambda: pages(TAGS))
        client.slowlog_reset()
        pages(TAGS)
        slowest = max(entry["duration"] for entry in client.slowlog_get(1000)) / 1000

        stop = threading.Event()
        pinger = redis.Redis(unix_socket_path=client.connection_pool.connection_kwargs["path"])
        pings: list[float] = []

        def page_forever() -> None:
            while not stop.is_set():
                store.page(None, 1000, TAGS)

        pager = threading.Thread(target=page_forever, daemon=True)
        pager.start()
        ends = time.monotonic() + 5
        while time.monotonic() < ends:
            started = time.perf_counter()
            pinger.ping()
            pings.append((time.perf_counter() - started) * 1000)
            time.sleep(0.005)
        stop.set()
        pager.join()
        pings.sort()
        result = {
            "one_tag_page_usec": round(one, 1),
            "twenty_tag_page_usec": round(twenty, 1),
            "ratio": round(twenty / one, 2),
            "slowest_call_ms": round(slowest, 2),
            "ping_p50_ms": round(pings[len(pings) // 2], 3),
            "ping_p99_ms": round(pings[int(0.99 * len(pings))], 3),
        }
        print(json.dumps(result, indent=2))
        if args.json:
            args.json.write_text(json.dumps(result))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
