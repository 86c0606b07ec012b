"""Watchers of the change feed against one gunicorn worker: what holding them costs, and how fast
a write reaches them.

    .venv/bin/python bench/watch.py                        # memory: both scenarios, full size
    .venv/bin/python bench/watch.py --store redis
    .venv/bin/python bench/watch.py --smoke                # a small run of each (the tests' mode)

- `hold`: N watchers (half long-polls with `wait=55`, half server-sent-event streams), then ten
  seconds with no write: the worker's threads before and after, its RSS per watcher, and its CPU
  while they wait (the heartbeats, 15 s apart, spread over the start).
- `wake`: M streams, then creates at R a second for T seconds from another connection: for each
  event and each stream, the time from the create's 200 to the event's arrival (p50, p99, max),
  and whether every stream got every event, in order.

One worker with 2 request threads, pinned to CPU 0; the watchers and the writer run on CPU 1.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import selectors
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.attacks import workers_cpu_seconds

TOKEN = "bench-token"
_ID = re.compile(rb'"id":(\d+)')


def _request(path: str, stream: bool, token: str) -> bytes:
    accept = "Accept: text/event-stream\r\n" if stream else ""
    return f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n{accept}\r\n".encode()


def open_watchers(port: int, count: int, streams_share: float, token: str = TOKEN) -> list[socket.socket]:
    socks = []
    for number in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        stream = number < count * streams_share
        sock.sendall(_request("/events?after=now" + ("" if stream else "&wait=55"), stream, token))
        sock.setblocking(False)
        socks.append(sock)
    return socks


def worker_pid(master_pid: int) -> int:
    return int(Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()[0])


def status_field(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise LookupError(name)


def hold(port: int, master_pid: int, count: int, quiet_seconds: float, token: str = TOKEN) -> dict:
    pid = worker_pid(master_pid)
    threads_before, rss_before = status_field(pid, "Threads"), status_field(pid, "VmRSS")
    started = time.monotonic()
    socks = open_watchers(port, count, 0.5, token)
    opened = time.monotonic() - started
    time.sleep(2.0)
    threads_after, rss_after = status_field(pid, "Threads"), status_field(pid, "VmRSS")
    before = workers_cpu_seconds(master_pid)
    time.sleep(quiet_seconds)
    cpu = (workers_cpu_seconds(master_pid) - before) / quiet_seconds
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


def wake(port: int, count: int, rate: float, seconds: float, token: str = TOKEN) -> dict:
    _, cursor = feed_since(port, None, token)
    socks = open_watchers(port, count, 1.0, token)
    selector = selectors.DefaultSelector()
    seen: dict[int, list[int]] = {}
    arrivals: dict[int, list[float]] = {}
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ)
        seen[sock.fileno()] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            for key, _ in selector.select(0.1):
                try:
                    data = key.fileobj.recv(262144)  # type: ignore[union-attr]
                except BlockingIOError:
                    continue
                now = time.monotonic()
                for match in _ID.finditer(data):
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
            target=_write, args=(port, first + n, writers, rate / writers, seconds, written, token)
        )
        for n in range(writers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    time.sleep(3.0)
    stop.set()
    reader.join(5)
    expected, _ = feed_since(port, cursor, token)
    complete = sum(1 for ids in seen.values() if ids == expected)
    latencies = sorted(
        (arrival - written[plant_id]) * 1000 for plant_id, times in arrivals.items() for arrival in times
    )
    for sock in socks:
        sock.close()

    def percentile(share: float) -> float:
        return round(latencies[min(len(latencies) - 1, int(share * len(latencies)))], 2) if latencies else -1

    return {
        "streams": count,
        "creates": len(expected),
        "rate": rate,
        "streams_with_every_event_in_order": complete,
        "p50_ms": percentile(0.5),
        "p99_ms": percentile(0.99),
        "max_ms": round(latencies[-1], 2) if latencies else -1,
    }


def _write(
    port: int, first: int, step: int, rate: float, seconds: float, written: dict[int, float], token: str
) -> None:
    """Creates at `rate` a second on a schedule (open loop): a slow answer does not slow the next."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    start = time.monotonic()
    plant_id, n = first, 0
    while n / rate < seconds:
        time.sleep(max(0.0, start + n / rate - time.monotonic()))
        conn.request("POST", "/plants", json.dumps({"id": plant_id, "name": "w"}), headers)
        response = conn.getresponse()
        response.read()
        written[plant_id] = time.monotonic()
        plant_id += step
        n += 1


def serve(store: str, watchers: int) -> tuple:
    from tests.servers import Gunicorn, RedisServer

    env = {
        "PLANTS_API_TOKENS": TOKEN,
        "GUNICORN_THREADS": "2",
        "PLANTS_EVENTS_MAX_WATCHERS": str(watchers + 100),
        "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": str(watchers + 100),
    }
    redis = None
    if store == "redis":
        redis = RedisServer(Path(tempfile.mkdtemp(prefix="bench-watch-")))
        env["PLANTS_STORE_URL"] = redis.unix_url
    server = Gunicorn(env=env, args=("--worker-connections", str(watchers + 200)))
    if os.environ.get("BENCH_PIN", "1") == "1":
        os.system(f"taskset -a -p -c 0 {server.process.pid} >/dev/null 2>&1")  # noqa: S605
        os.system(f"taskset -a -p -c 0 {worker_pid(server.process.pid)} >/dev/null 2>&1")  # noqa: S605
        os.sched_setaffinity(0, {1})
    return server, redis


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["memory", "redis"], default="memory")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--watchers", type=int, default=10_000)
    parser.add_argument("--streams", type=int, nargs="+", default=[2000, 100])
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    watchers = 200 if args.smoke else args.watchers
    streams = [50] if args.smoke else args.streams
    seconds = 2.0 if args.smoke else args.seconds
    server, redis = serve(args.store, max(watchers, *streams))
    results = []
    try:
        results.append(
            {
                "store": args.store,
                "scenario": "hold",
                **hold(server.port, server.process.pid, watchers, seconds),
            }
        )
        print(json.dumps(results[-1]), flush=True)
        for count in streams:
            results.append(
                {"store": args.store, "scenario": "wake", **wake(server.port, count, args.rate, seconds)}
            )
            print(json.dumps(results[-1]), flush=True)
    finally:
        server.stop()
        if redis is not None:
            redis.stop()


if __name__ == "__main__":
    main()
