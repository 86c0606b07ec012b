"""Writes beside filtered streams on Redis: what streams whose filter no write matches cost a write.

    python -m bench filtered-writes --streams 800 --seconds 40
    python -m bench filtered-writes --baseline /tmp/old-tree   # and that tree's service, side by side

One worker (2 request threads, pinned to CPU 0) on a Redis of its own; wrk (bench/lua/create.lua,
tags no stream follows) creates for `--seconds` with no stream open, then with `--streams` streams
open, each `GET /events?tags=t<n>` on a tag of its own, for longer than a heartbeat (15 s: each
stream then reads the feed past what was written since it opened). Each run: creates/s, the
server's CPU and Redis's CPU a create (from /proc), and `GET /healthz`'s latency from a probe on a
new connection every 100 ms (p50, p99, max), and when its slowest answers came (seconds after the
last stream opened: heartbeats that fall together show as slow probes 15 s apart). With
`--quiet S`, then the streams for S seconds with no write: `/healthz` every 50 ms beside their
heartbeats alone, and the server's and Redis's CPU per stream and heartbeat interval. `--retain N M`:
each tree at each PLANTS_EVENTS_RETAIN, whose half is how many writes, heard while any watch waits,
wake every watch at once (the sweep). With `--baseline`, the service of that tree (a copy of the
repository at an earlier commit) is measured the same way, each round alternating the two, so that
the machine's load weighs on both alike.
"""

from __future__ import annotations

import http.client
import itertools
import random
import socket
import statistics
import threading
import time
from pathlib import Path

from bench.harness import ROOT, TOKEN
from bench.harness.load import wrk
from bench.harness.report import benchmark_parser, save
from bench.harness.servers import RedisServer, Server, cpu_seconds, gunicorn, scratch

#: The service's default PLANTS_EVENTS_HEARTBEAT, in seconds.
HEARTBEAT = 15


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


def _probe(port: int, stop: threading.Event, latencies: list[tuple[float, float]], every: float) -> None:
    """`GET /healthz` on a new connection every `every` seconds until `stop`: each one's start
    (time.monotonic()) and milliseconds."""
    while not stop.wait(every):
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("GET", "/healthz")
            conn.getresponse().read()
        finally:
            conn.close()
        latencies.append((started, (time.monotonic() - started) * 1000))


def _latencies(latencies: list[tuple[float, float]], opened: float) -> dict:
    """p50, p99 and max in milliseconds, and the five slowest as [seconds after the last stream
    opened, milliseconds]."""
    ordered = sorted(ms for _, ms in latencies) or [0.0]
    slowest = sorted(latencies, key=lambda probe: probe[1])[-5:]
    return {
        "p50": round(statistics.median(ordered), 1),
        "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 1),
        "max": round(ordered[-1], 1),
        "slowest": [[round(at - opened, 1), round(ms, 1)] for at, ms in sorted(slowest)],
    }


def _script_calls(redis: RedisServer) -> int:
    """How many scripts Redis has run (`INFO commandstats`): a create is one, and so is a
    stream's read of the feed, or of the feed's end."""
    stats = redis.command("INFO", "commandstats").splitlines()
    scripts = [line.partition("calls=")[2] for line in stats if line.startswith("cmdstat_eval")]
    return sum(int(calls.partition(",")[0]) for calls in scripts)


def _run(server: Server, redis: RedisServer, seconds: float, streams: int) -> dict:
    """One wrk run of creates, with `streams` filtered streams open beside it."""
    opening = time.monotonic()
    socks = _open_streams(server.port, streams)
    opened = time.monotonic()
    if socks:
        time.sleep(2.0)
    stop, latencies = threading.Event(), []
    prober = threading.Thread(target=_probe, args=(server.port, stop, latencies, 0.1), daemon=True)
    prober.start()
    assert redis.process is not None
    base = random.randrange(1, 900) * 10**13  # ids within JSON's safe integers
    scripts = _script_calls(redis)
    run = wrk(server, "create.lua", seconds, 8, {"BENCH_ID_BASE": str(base)}, redis_pid=redis.process.pid)
    scripts = _script_calls(redis) - scripts
    stop.set()
    prober.join(35)
    for sock in socks:
        sock.close()
    return {
        "streams": streams,
        # How long opening them took: their heartbeats fall that much before `slowest`'s 15 s.
        "opening_s": round(opened - opening, 1),
        "creates_per_s": round(run["rps"], 1),
        "server_cpu_us_per_create": round(run["cpu_us_per_request"], 1),
        "redis_cpu_us_per_create": round(run["redis_cpu_us_per_request"], 1),
        # The scripts beyond one a create (wrk's count of the creates it saw answered): the
        # streams' reads of the feed and of its end, and the creates still under way at its end.
        "scripts_beyond_creates": scripts - run["requests"],
        "healthz_ms": _latencies(latencies, opened),
        "non2xx": run.get("non2xx", 0),
    }


def _quiet(server: Server, redis: RedisServer, seconds: float, streams: int) -> dict:
    """`streams` streams open and, from 2 s after, no write for `seconds`: their heartbeats alone,
    and `/healthz` beside them every 50 ms. The CPU is the server's and Redis's per stream and heartbeat
    interval (15 s): about what one heartbeat costs, the idle worker's own turns included."""
    opening = time.monotonic()
    socks = _open_streams(server.port, streams)
    opened = time.monotonic()
    time.sleep(2.0)  # the streams' first reads done: their heartbeats alone from here
    measured = time.monotonic()
    assert redis.process is not None
    cpu, redis_cpu = server.cpu_seconds(), cpu_seconds(redis.process.pid)
    stop, latencies = threading.Event(), []
    prober = threading.Thread(target=_probe, args=(server.port, stop, latencies, 0.05), daemon=True)
    prober.start()
    time.sleep(seconds)
    stop.set()
    prober.join(35)
    beats = streams * (time.monotonic() - measured) / HEARTBEAT
    cpu, redis_cpu = server.cpu_seconds() - cpu, cpu_seconds(redis.process.pid) - redis_cpu
    for sock in socks:
        sock.close()
    return {
        "streams": streams,
        "writes": 0,
        "opening_s": round(opened - opening, 1),
        "server_cpu_us_per_heartbeat": round(cpu * 1e6 / beats, 1),
        "redis_cpu_us_per_heartbeat": round(redis_cpu * 1e6 / beats, 1),
        "healthz_ms": _latencies(latencies, opened),
    }


def measure(tree: Path, seconds: float, streams: int, quiet: float = 0.0, retain: int = 0) -> list[dict]:
    """The tree's service on a new Redis: creates with no stream open, then with `streams` open;
    then, for `quiet` seconds, the streams with no write (`_quiet`). With `retain`, its
    PLANTS_EVENTS_RETAIN (the sweep wakes every watch each half of it, counted while any waits)."""
    redis = RedisServer(scratch("filtered-writes"))
    env = {
        "GUNICORN_THREADS": "2",
        "PLANTS_STORE_URL": redis.unix_url,
        "PLANTS_EVENTS_MAX_WATCHERS": str(streams + 100),
        "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": str(streams + 100),
        **({"PLANTS_EVENTS_RETAIN": str(retain)} if retain else {}),
    }
    server = gunicorn("filtered", env, cwd=tree, args=("--worker-connections", str(streams + 200))).start()
    try:
        runs = [_run(server, redis, seconds, 0), _run(server, redis, seconds, streams)]
        return [*runs, _quiet(server, redis, quiet, streams)] if quiet else runs
    finally:
        server.stop()
        redis.stop()


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--streams", type=int, default=800)
    parser.add_argument("--baseline", type=Path, help="a tree of the service to measure beside this one")
    parser.add_argument(
        "--quiet",
        type=float,
        default=0.0,
        help="then S seconds of the streams with no write (their heartbeats alone)",
    )
    parser.add_argument(
        "--retain",
        type=int,
        nargs="+",
        default=[0],
        help="each tree at each PLANTS_EVENTS_RETAIN (0: the default), alternated in each round",
    )
    args = parser.parse_args()
    trees = {"this": ROOT, **({"baseline": args.baseline} if args.baseline else {})}
    streams, seconds = (20, 2.0) if args.smoke else (args.streams, 40.0)
    seconds = args.seconds or seconds
    results = []
    for round_number in range(args.rounds or 1):
        for (name, tree), retain in itertools.product(trees.items(), args.retain):
            quiet = 2.0 if args.smoke and args.quiet else args.quiet
            for found in measure(tree, seconds, streams, quiet, retain):
                results.append({"round": round_number, "tree": name, "retain": retain, **found})
                print(results[-1], flush=True)
    save(results, "filtered-writes", args.json)
    return 0
