"""Watchers of the change feed on one worker: what holding them costs, how fast a write reaches them.

    python -m bench watch                        # memory: both scenarios, full size
    python -m bench watch --store redis
    python -m bench watch --smoke                # a small run of each

- `hold`: N watchers (half long-polls with `wait=55`, half server-sent-event streams), then ten
  seconds with no write: the worker's threads before and after, its RSS per watcher, and its CPU
  while they wait (the heartbeats, 15 s apart, spread over the start).
- `wake`: M streams, then creates at R a second for T seconds from another connection: for each
  event and each stream, the time from the create's 200 to the event's arrival (p50, p99, max),
  and whether every stream got every event, in order.
- `wake --filtered`: the same, each stream following a tag of its own (`tags=t<n>`) and each
  create tagged for one stream; also the streams each write woke, from the worker's
  `plants_watch_woken_per_change` histogram.
- `creates`, `snapshot` (bench/harness/watch_scenarios.py): create req/s with M filtered streams open
  against none, and a `snapshot=true` stream of `--plants` plants (worker RSS growth).

    python -m bench watch --scenarios wake creates --filtered --streams 2000
    python -m bench watch --scenarios snapshot --plants 1000000 --store redis

One worker with 2 request threads, pinned to CPU 0; the watchers and the writer run on CPU 1.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import re
import selectors
import socket
import threading
import time

from bench.harness import CLIENT_CPU, TOKEN
from bench.harness.report import benchmark_parser, save
from bench.harness.servers import (
    RedisServer,
    Server,
    children,
    children_cpu_seconds,
    gunicorn,
    scratch,
    status_field,
)
from bench.harness.watch_scenarios import creates_beside_streams, load_plants, snapshot

_ID = re.compile(rb'"id":(\d+)')
SCENARIOS = ("hold", "wake", "creates", "snapshot")


def _request(path: str, stream: bool, token: str) -> bytes:
    accept = "Accept: text/event-stream\r\n" if stream else ""
    return f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n{accept}\r\n".encode()


def open_watchers(
    port: int, count: int, streams_share: float, token: str = TOKEN, tagged: bool = False
) -> list[socket.socket]:
    socks = []
    for number in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        stream = number < count * streams_share
        path = "/events?after=now" + ("" if stream else "&wait=55") + (f"&tags=t{number}" if tagged else "")
        sock.sendall(_request(path, stream, token))
        sock.setblocking(False)
        socks.append(sock)
    return socks


def booted_threads(pid: int, timeout: float = 15.0) -> int:
    """The worker's thread count once it has started its request threads: with two workers, the
    one measured may still be booting when the server first answers (it has one thread then)."""
    deadline = time.monotonic() + timeout
    count = status_field(pid, "Threads")
    while time.monotonic() < deadline:
        time.sleep(0.2)
        count, last = status_field(pid, "Threads"), count
        if count > 1 and count == last:
            break
    return count


def hold(port: int, master_pid: int, count: int, quiet_seconds: float, token: str = TOKEN) -> dict:
    pid = children(master_pid)[0]  # the (first) worker
    threads_before, rss_before = booted_threads(pid), status_field(pid, "VmRSS")
    started = time.monotonic()
    socks = open_watchers(port, count, 0.5, token)
    opened = time.monotonic() - started
    time.sleep(2.0)
    threads_after, rss_after = status_field(pid, "Threads"), status_field(pid, "VmRSS")
    before = children_cpu_seconds(master_pid)
    time.sleep(quiet_seconds)
    cpu = (children_cpu_seconds(master_pid) - before) / quiet_seconds
    for sock in socks:
        sock.close()
    return {
        "watchers": count,
        "seconds_to_open": round(opened, 2),
        "threads_before": threads_before,
        "threads_after": threads_after,
        "rss_kib_per_watcher": round((rss_after - rss_before) / count, 2),
        "idle_cpu_share": round(cpu, 4),
    }


def feed_since(port: int, cursor: str | None, token: str = TOKEN) -> tuple[list[int], str]:
    """The plant ids of the feed's events after `cursor` (None: now), in the feed's order, and the end."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    ids: list[int] = []
    while True:
        conn.request(
            "GET", f"/events?after={cursor or 'now'}&limit=1000", headers={"Authorization": f"Bearer {token}"}
        )
        page = json.loads(conn.getresponse().read())
        ids += [event["plant"]["id"] for event in page["events"]]
        cursor = page["next"]
        if not page["events"]:
            return ids, cursor


def woken_so_far(port: int, token: str = TOKEN) -> tuple[float, float]:
    """The worker's `plants_watch_woken_per_change` sum and count."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {token}"})
    text = conn.getresponse().read().decode()
    found = dict(re.findall(r"^plants_watch_woken_per_change_(sum|count) (\S+)$", text, re.M))
    return float(found.get("sum", 0)), float(found.get("count", 0))


def wake(
    port: int, count: int, rate: float, seconds: float, token: str = TOKEN, filtered: bool = False
) -> dict:
    _, cursor = feed_since(port, None, token)
    socks = open_watchers(port, count, 1.0, token, tagged=filtered)
    woken_before = woken_so_far(port, token)
    selector = selectors.DefaultSelector()
    seen: dict[int, list[int]] = {}
    arrivals: dict[int, list[float]] = {}
    #: What came after each stream's last whole event: a read can end inside one (in its id).
    rest: dict[int, bytes] = {}
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ)
        seen[sock.fileno()] = []
        rest[sock.fileno()] = b""
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            for key, _ in selector.select(0.1):
                try:
                    data = key.fileobj.recv(262144)  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                now = time.monotonic()
                whole, _, rest[key.fd] = (rest[key.fd] + data).rpartition(b"\n\n")
                for match in _ID.finditer(whole):
                    plant_id = int(match.group(1))
                    seen[key.fd].append(plant_id)
                    arrivals.setdefault(plant_id, []).append(now)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(2.0)
    written: dict[int, float] = {}
    first = 9 * 10**12 + int(time.time() * 1000) % 10**9 * 1000
    writers = 4
    threads = [
        threading.Thread(
            target=_write,
            args=(
                port,
                first + n,
                writers,
                rate / writers,
                seconds,
                written,
                token,
                count if filtered else 0,
            ),
        )
        for n in range(writers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected, _ = feed_since(port, cursor, token)
    # The stream of tag t<n> gets the plants whose id is n modulo the streams.
    wanted = {
        sock.fileno(): [i for i in expected if i % count == n] if filtered else expected
        for n, sock in enumerate(socks)
    }

    def complete() -> int:
        return sum(1 for fd, ids in wanted.items() if seen[fd] == ids)

    # Every stream is read until it has every event, 15 s at most (a loaded machine delivers
    # late, not less), then a moment more for any event sent twice.
    deadline = time.monotonic() + 15.0
    while complete() < count and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    stop.set()
    reader.join(5)
    woken_sum, woken_count = (
        after - before for after, before in zip(woken_so_far(port, token), woken_before, strict=True)
    )
    complete_streams = complete()
    latencies = sorted(
        (arrival - written[plant_id]) * 1000 for plant_id, times in arrivals.items() for arrival in times
    )
    for sock in socks:
        sock.close()

    def percentile(share: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(share * len(latencies)))], 2) if latencies else -1

    return {
        "streams": count,
        "filtered": filtered,
        "creates": len(expected),
        "woken_per_write": round(woken_sum / woken_count, 2) if woken_count else 0,
        "rate": rate,
        "streams_with_every_event_in_order": complete_streams,
        "p50_ms": percentile(0.5),
        "p99_ms": percentile(0.99),
        "max_ms": round(latencies[-1], 2) if latencies else -1,
    }


def _write(
    port: int,
    first: int,
    step: int,
    rate: float,
    seconds: float,
    written: dict[int, float],
    token: str,
    tags: int = 0,
) -> None:
    """Creates at `rate` a second on a schedule (open loop): a slow answer does not slow the next.
    With `tags`, each plant is tagged `t<id modulo tags>`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    start = time.monotonic()
    plant_id, n = first, 0
    while n / rate < seconds:
        time.sleep(max(0.0, start + n / rate - time.monotonic()))
        plant = {"id": plant_id, "name": "w", **({"tag": f"t{plant_id % tags}"} if tags else {})}
        conn.request("POST", "/plants", json.dumps(plant), headers)
        response = conn.getresponse()
        response.read()
        written[plant_id] = time.monotonic()
        plant_id += step
        n += 1


def serve(store: str, watchers: int) -> tuple[Server, RedisServer | None]:
    """One worker with 2 request threads, room for `watchers`, pinned to SERVER_CPU; this process
    moves to CLIENT_CPU (BENCH_PIN=0: neither is pinned)."""
    env = {
        "GUNICORN_THREADS": "2",
        "PLANTS_EVENTS_MAX_WATCHERS": str(watchers + 100),
        "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": str(watchers + 100),
    }
    redis = None
    if store == "redis":
        redis = RedisServer(scratch("watch"))
        env["PLANTS_STORE_URL"] = redis.unix_url
    pin = os.environ.get("BENCH_PIN", "1") == "1"
    server = gunicorn("watched", env, args=("--worker-connections", str(watchers + 200)), pin=pin).start()
    if pin:
        os.sched_setaffinity(0, {int(CLIENT_CPU)})
    return server, redis


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--store", choices=["memory", "redis"], default="memory")
    parser.add_argument("--watchers", type=int, default=10_000)
    parser.add_argument("--streams", type=int, nargs="+", default=[2000, 100])
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--filtered", action="store_true", help="each stream follows a tag of its own")
    parser.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=["hold", "wake"])
    parser.add_argument("--plants", type=int, default=1_000_000, help="plants in the snapshot")
    args = parser.parse_args()
    watchers = 200 if args.smoke else args.watchers
    streams = [50] if args.smoke else args.streams
    plants = min(args.plants, 2000) if args.smoke else args.plants
    seconds = args.seconds or (2.0 if args.smoke else 10.0)
    server, redis = serve(args.store, max(watchers, *streams))
    results: list[dict] = []

    def report(scenario: str, found: dict) -> None:
        results.append({"store": args.store, "scenario": scenario, **found})
        print(json.dumps(results[-1]), flush=True)

    try:
        if "hold" in args.scenarios:
            report("hold", hold(server.port, server.pid, watchers, seconds))
        for count in streams if "wake" in args.scenarios else ():
            report("wake", wake(server.port, count, args.rate, seconds, filtered=args.filtered))
        if "creates" in args.scenarios:
            opened = functools.partial(open_watchers, server.port, max(streams), 1.0, tagged=True)
            report("creates", creates_beside_streams(server, opened, seconds))
        if "snapshot" in args.scenarios:
            url = None if redis is None else redis.unix_url
            load_plants(server, plants, url, server.env.get("PLANTS_STORE_PREFIX", "plants"))
            report("snapshot", {"plants": plants, **snapshot(server, plants)})
    finally:
        server.stop()
        if redis is not None:
            redis.stop()
    save(results, "watch", args.json)
    return 0
