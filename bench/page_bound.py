"""What one page can make Redis do: a 20-tag page of 1000 against a 1-tag page of 1000.

    python -m bench page-bound [--plants-per-tag 1001] [--rounds 30] [--cluster]
    python -m bench page-bound --smoke

Fills a fresh redis-server (or `--cluster`) with 20 tags of `--plants-per-tag` plants each
through the store, then times the PAGE script as Redis counts it (`INFO commandstats`,
microseconds of EVALSHA per page) for each page shape and for the feed's largest page (1000
events), the slowest single call (`SLOWLOG`), and Redis's `PING` latency from a
second client while one client pages 20 tags back to back. Goals: the 20-tag page at most 3
times the 1-tag page, no call over 20 ms, PING p99 ≤ 15 ms.
"""

from __future__ import annotations

import threading
import time

import redis

from app.store import store_from_url
from bench.harness.report import benchmark_parser, save
from bench.harness.servers import RedisClusterServers, RedisServer, scratch

TAGS = [f"tag-{n:02d}" for n in range(20)]


def evalsha_usec(clients: list[redis.Redis]) -> float:
    """Microseconds Redis spent in EVALSHA, summed over the primaries."""
    return sum(c.info("commandstats").get("cmdstat_evalsha", {"usec": 0})["usec"] for c in clients)


def per_page(clients: list[redis.Redis], run, pages: int) -> float:  # type: ignore[no-untyped-def]
    """Redis's script time per page (a cluster page may run one script per bucket group)."""
    before = evalsha_usec(clients)
    run()
    return (evalsha_usec(clients) - before) / pages


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--plants-per-tag", type=int, help="default 1001; smoke 101")
    parser.add_argument("--cluster", action="store_true", help="a local Redis Cluster of 3 primaries")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.smoke else 30)
    per_tag = args.plants_per_tag or (101 if args.smoke else 1001)
    seconds = args.seconds or (1 if args.smoke else 5)
    directory = scratch("page-bound")
    server = RedisClusterServers(directory) if args.cluster else RedisServer(directory)
    try:
        store = store_from_url(
            server.url, capacity=10**7, prefix="bench", connect_timeout=5, timeout=10,
            min_replicas=0, events_retain=100_000,
        )  # fmt: skip
        for n, tag in enumerate(TAGS):
            for i in range(per_tag):
                store.create(n + i * len(TAGS), f"plant {i}", tag)
        nodes = server.primaries() if args.cluster else [server]
        clients = [redis.Redis(host="127.0.0.1", port=node.port) for node in nodes]
        for client in clients:
            client.config_set("slowlog-log-slower-than", 0)
        store.page(None, 1000, TAGS[:1])  # loads the script

        def pages(tags: list[str]) -> None:
            for _ in range(rounds):
                after, count = None, 0
                while True:  # a cluster's page of 1000 may stop short: read on to 1000
                    page = store.page(after, 1000 - count, tags)
                    after, count = page.next, count + len(page.plants)
                    if after is None or count >= 1000:
                        break

        one = per_page(clients, lambda: pages(TAGS[:1]), rounds)
        twenty = per_page(clients, lambda: pages(TAGS), rounds)
        feed = per_page(clients, lambda: [store.events(None, 1000) for _ in range(rounds)], rounds)
        for client in clients:
            client.slowlog_reset()
        pages(TAGS)
        for _ in range(rounds):
            store.events(None, 1000)
        slowest = max(entry["duration"] for client in clients for entry in client.slowlog_get(1000)) / 1000

        stop = threading.Event()
        pingers = [redis.Redis(host="127.0.0.1", port=node.port) for node in nodes]
        pings: list[float] = []

        def page_forever() -> None:
            while not stop.is_set():
                store.page(None, 1000, TAGS)

        pager = threading.Thread(target=page_forever, daemon=True)
        pager.start()
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            started = time.perf_counter()
            pingers[len(pings) % len(pingers)].ping()
            pings.append((time.perf_counter() - started) * 1000)
            time.sleep(0.005)
        stop.set()
        pager.join()
        pings.sort()
        result = {
            "store": "cluster" if args.cluster else "redis",
            "one_tag_page_usec": round(one, 1),
            "twenty_tag_page_usec": round(twenty, 1),
            "ratio": round(twenty / one, 2),
            "events_page_of_1000_usec": round(feed, 1),
            "slowest_call_ms": round(slowest, 2),
            "ping_p50_ms": round(pings[len(pings) // 2], 3),
            "ping_p99_ms": round(pings[int(0.99 * len(pings))], 3),
        }
        print("\n".join(f"{key}: {value}" for key, value in result.items()))
        save(result, "page_bound", args.json)
    finally:
        server.stop()
    return 0
