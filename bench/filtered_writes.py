"""Writes beside filtered streams on Redis: what streams whose filter no write matches cost a write.

    python -m bench filtered-writes --streams 800 --seconds 40
    python -m bench filtered-writes --baseline /tmp/old-tree   # and that tree's service, side by side

One worker (2 request threads, pinned to CPU 0) on a Redis of its own; wrk (bench/lua/create.lua,
tags no stream follows) creates for `--seconds` with no stream open, then with `--streams` streams
open, each `GET /events?tags=t<n>` on a tag of its own, for longer than a heartbeat (15 s: each
stream then reads the feed past what was written since it opened). Each run: creates/s, the
server's CPU and Redis's CPU a create (from /proc), and `GET /healthz`'s latency from a probe on a
new connection every 100 ms (p50, p99, max). With `--baseline`, the service of that tree (a copy of
the repository at an earlier commit) is measured the same way, each round alternating the two, so
that the machine's load weighs on both alike.
"""

from __future__ import annotations

import http.client
import random
import socket
import statistics
import threading
import time
from pathlib import Path

from bench.harness import ROOT, TOKEN
from bench.harness.load import wrk
from bench.harness.report import benchmark_parser, save
from bench.harness.servers import RedisServer, Server, gunicorn, scratch


def _open_streams(port: int, count: int) -> list[socket.socket]:
    """`count` streams from the feed's end, each following a tag of its own (`t<n>`)."""
    head = f"Host: x\r\nAuthorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n"
    socks = []
    for number in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(f"GET /events?after=now&tags=t{number} HTTP/1.1\r\n{head}".encode())
        sock.setblocking(False)  # never read: the server's buffers hold what little it sends
        socks.append(sock)
    return socks


def _probe(port: int, stop: threading.Event, latencies: list[float]) -> None:
    """`GET /healthz` on a new connection every 100 ms until `stop`: each one's milliseconds."""
    while not stop.wait(0.1):
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("GET", "/healthz")
            conn.getresponse().read()
        finally:
            conn.close()
        latencies.append((time.monotonic() - started) * 1000)


def _run(server: Server, redis: RedisServer, seconds: float, streams: int) -> dict:
    """One wrk run of creates, with `streams` filtered streams open beside it."""
    socks = _open_streams(server.port, streams)
    if socks:
        time.sleep(2.0)
    stop, latencies = threading.Event(), []
    prober = threading.Thread(target=_probe, args=(server.port, stop, latencies), daemon=True)
    prober.start()
    assert redis.process is not None
    base = random.randrange(1, 900) * 10**13  # ids within JSON's safe integers
    run = wrk(server, "create.lua", seconds, 8, {"BENCH_ID_BASE": str(base)}, redis_pid=redis.process.pid)
    stop.set()
    prober.join(35)
    for sock in socks:
        sock.close()
    ordered = sorted(latencies) or [0.0]
    return {
        "streams": streams,
        "creates_per_s": round(run["rps"], 1),
        "server_cpu_us_per_create": round(run["cpu_us_per_request"], 1),
        "redis_cpu_us_per_create": round(run["redis_cpu_us_per_request"], 1),
        "healthz_ms": {
            "p50": round(statistics.median(ordered), 1),
            "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
            "max": round(ordered[-1], 1),
        },
        "non2xx": run.get("non2xx", 0),
    }


def measure(tree: Path, seconds: float, streams: int) -> list[dict]:
    """The tree's service on a new Redis: creates with no stream open, then with `streams` open."""
    redis = RedisServer(scratch("filtered-writes"))
    env = {
        "GUNICORN_THREADS": "2",
        "PLANTS_STORE_URL": redis.unix_url,
        "PLANTS_EVENTS_MAX_WATCHERS": str(streams + 100),
        "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": str(streams + 100),
    }
    server = gunicorn("filtered", env, cwd=tree, args=("--worker-connections", str(streams + 200))).start()
    try:
        return [_run(server, redis, seconds, 0), _run(server, redis, seconds, streams)]
    finally:
        server.stop()
        redis.stop()


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--streams", type=int, default=800)
    parser.add_argument("--baseline", type=Path, help="a tree of the service to measure beside this one")
    args = parser.parse_args()
    trees = {"this": ROOT, **({"baseline": args.baseline} if args.baseline else {})}
    streams, seconds = (20, 2.0) if args.smoke else (args.streams, 40.0)
    seconds = args.seconds or seconds
    results = []
    for round_number in range(args.rounds or 1):
        for name, tree in trees.items():
            for found in measure(tree, seconds, streams):
                results.append({"round": round_number, "tree": name, **found})
                print(results[-1], flush=True)
    save(results, "filtered-writes", args.json)
    return 0
