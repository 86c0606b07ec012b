"""What the change feed costs: creates with it on and off, pages of events, bytes per event.

Creates with the feed on (the default) against creates with PLANTS_EVENTS_RETAIN=0, a page of
100 events against a page of 100 plants, the bytes each retained event takes, and how far a
follower lags behind creates at full speed.

    python -m bench events            # 5 interleaved rounds of 10 s per workload
    python -m bench events --smoke    # a second per workload

One gunicorn worker per server, pinned to CPU 0 with wrk on CPU 1, redis-server beside wrk (its
CPU per request is read from /proc, so Redis's own cost of each XADD is counted too).
"""

from __future__ import annotations

import functools
import threading
import time
import tracemalloc
from pathlib import Path

import redis

from app.store import MemoryPlantStore
from bench.harness.load import by_work, failed, fill_store, get_json, put_plants, wrk
from bench.harness.redis_cpu import RedisCPU
from bench.harness.report import SIDE_BY_SIDE, benchmark_parser, finish, side_by_side_table, spread, validity
from bench.harness.servers import Server, gunicorn, scratch, start_redis, stop_all

RETAIN = 100_000


def page_paths(server: Server, directory: Path) -> dict[str, Path]:
    """Files of paths for paths.lua: pages of 100 events, and pages of 100 plants, from cursors
    met on a walk of each."""
    files = {}
    for kind, path, key in (
        ("events", "/events?limit=100", "events"),
        ("plants", "/plants?limit=100", "plants"),
    ):
        lines, after = [path], None
        while True:
            page = get_json(server.port, path + (f"&after={after}" if after else ""))
            if not page[key] or "next" not in page:
                break
            after = page["next"]
            lines.append(f"{path}&after={after}")
        files[kind] = directory / f"{server.name}-{kind}.txt"
        files[kind].write_text("\n".join(lines[:-1] or lines) + "\n")
    return files


def follower_lag(server: Server, seconds: float, connections: int, id_base: int) -> dict:
    """Creates at full speed while a follower pages through the feed (1,000 at a time, at once
    while pages are full, 0.2 s after an empty one): its lag behind each event's time."""
    position = get_json(server.port, "/events?after=now")["next"]
    lags: list[float] = []
    stop = threading.Event()

    def follow() -> None:
        nonlocal position
        while not stop.is_set():
            page = get_json(server.port, f"/events?limit=1000&after={position}")
            position = page["next"]
            if page["events"]:
                newest = page["events"][-1]["time"]
                stamp = time.mktime(time.strptime(newest[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
                lags.append(time.time() - (stamp + int(newest[20:23]) / 1000))
            else:
                time.sleep(0.2)

    thread = threading.Thread(target=follow)
    thread.start()
    run = wrk(server, "create.lua", seconds, connections, {"BENCH_ID_BASE": str(id_base)})
    stop.set()
    thread.join()
    lags.sort()
    return {
        "creates_per_s": run["rps"],
        "polls": len(lags),
        "lag_median_ms": 1000 * lags[len(lags) // 2] if lags else None,
        "lag_max_ms": 1000 * lags[-1] if lags else None,
    }


def redis_direct(sock: Path, plants: int) -> dict[str, float]:
    """`plants` creates through the service's store, from 16 threads so that Redis is busy, with
    the feed off then on: `used_memory` per event, and Redis's CPU per create (all of it, and the
    script's own)."""
    client = redis.Redis(unix_socket_path=str(sock))
    found: dict[str, list[float]] = {"used_memory": [], "cpu_us": [], "script_us": []}
    for retain in (0, RETAIN):
        client.flushall()
        before = client.info("memory")["used_memory"]
        window = RedisCPU(client).start()
        fill_store(f"unix://{sock}", "bytes", ((10**11 + n, f"Plant {n:06d}", "fern") for n in range(plants)),
                   events_retain=retain)  # fmt: skip
        cost = window.per_call(plants)
        found["cpu_us"].append(cost["redis_cpu_us"])
        found["script_us"].append(cost["script_us"])
        found["used_memory"].append(client.info("memory")["used_memory"] - before)
    client.flushall()
    return {
        "bytes per event": (found["used_memory"][1] - found["used_memory"][0]) / plants,
        "cpu per create, off (us)": found["cpu_us"][0],
        "cpu per create, on (us)": found["cpu_us"][1],
        "script per create, off (us)": found["script_us"][0],
        "script per create, on (us)": found["script_us"][1],
    }


def memory_bytes_per_event(plants: int) -> float:
    """Python heap of `plants` creates into the memory store with the feed, less without it."""
    used = []
    for retain in (0, RETAIN):
        names = [f"Plant {n:06d}" for n in range(plants)]  # made before, as a request's body is
        tracemalloc.start()
        store = MemoryPlantStore(10**9, retain)
        for n, name in enumerate(names):
            store.create(10**11 + n, name, "fern")
        used.append(tracemalloc.get_traced_memory()[0])
        tracemalloc.stop()
        del store
    return (used[1] - used[0]) / plants


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else 5)
    seconds = args.seconds or (1 if args.smoke else 10)
    plants = 500 if args.smoke else 10_000
    directory = scratch("events")
    redis_process, sock = start_redis(directory)
    on_redis = {"PLANTS_STORE_URL": f"unix://{sock}", "WEB_CONCURRENCY": "1"}
    servers = {
        "memory, feed on": gunicorn("memory-on"),
        "memory, feed off": gunicorn("memory-off", {"PLANTS_EVENTS_RETAIN": "0"}),
        "redis, feed on": gunicorn("redis-on", {**on_redis, "PLANTS_STORE_PREFIX": "on"}),
        "redis, feed off": gunicorn(
            "redis-off", {**on_redis, "PLANTS_STORE_PREFIX": "off", "PLANTS_EVENTS_RETAIN": "0"}
        ),
    }
    problems: list[str] = []
    runs: dict[str, list[dict]] = {}
    id_base = 0
    results: dict = {"rounds": rounds, "seconds": seconds, "connections": args.connections, "plants": plants}
    try:
        paths = {}
        for name, server in servers.items():
            server.start()
            put_plants(server.port, 7 * 10**12, plants)
            if "feed on" in name:
                paths[name] = page_paths(server, directory)
        # The first round warms up, but not in a smoke run, which only checks that each serves.
        for round_number in range(int(args.smoke), rounds + 1):
            calls = {}
            for name, server in servers.items():
                workloads = [("create", "create.lua", {})]
                if name in paths:
                    workloads += [
                        (f"page of {kind}", "paths.lua", {"BENCH_PATHS": str(paths[name][kind])})
                        for kind in ("events", "plants")
                    ]
                for work, script, env in workloads:
                    id_base += 10**13
                    calls[(name, work)] = functools.partial(
                        wrk, server, script, 1 if round_number == 0 else seconds, args.connections,
                        {"BENCH_ID_BASE": str(id_base), **env}, redis_process.pid,
                    )  # fmt: skip
            # A smoke run has each workload on every server at once: it only shows that each serves.
            for (name, work), run in by_work(calls, args.smoke).items():
                if failed(run):
                    problems.append(f"{name}: {work}: {run}")
                if round_number:
                    runs.setdefault(f"{name}: {work}", []).append(run)
        for name in ("memory, feed on", "redis, feed on"):
            id_base += 10**13
            results[f"follower lag, {name}"] = follower_lag(servers[name], seconds, args.connections, id_base)
    finally:
        stop_all(servers.values())
    try:
        results["redis direct"] = redis_direct(sock, 5_000 if args.smoke else 100_000)
    finally:
        redis_process.terminate()
        redis_process.wait()
    results["memory bytes per event"] = memory_bytes_per_event(5_000 if args.smoke else 100_000)
    for name, name_runs in runs.items():
        results[name] = {key: spread(name_runs, key) for key in SIDE_BY_SIDE}
    median = {name: results[name]["rps"]["median"] for name in runs}
    results["ratios"] = {}
    for store in ("memory", "redis"):
        results["ratios"][f"{store}: create, feed on / off"] = (
            median[f"{store}, feed on: create"] / median[f"{store}, feed off: create"]
        )
        results["ratios"][f"{store}: page of 100 events / page of 100 plants"] = (
            median[f"{store}, feed on: page of events"] / median[f"{store}, feed on: page of plants"]
        )
    cpu = {name: results[name]["redis_cpu_us_per_request"]["median"] for name in runs}
    results["ratios"]["redis CPU per create: feed on / off"] = (
        cpu["redis, feed on: create"] / cpu["redis, feed off: create"]
    )
    return finish(results, problems, report, args.json)


def report(results: dict) -> str:
    lines = [
        f"{results['rounds']} interleaved rounds of {results['seconds']:g} s, wrk -t1 "
        f"-c{results['connections']}, one worker per server; {results['plants']:,} plants preloaded; "
        "median (min to max).",
        "",
        *side_by_side_table(results),
    ]
    lines += ["", "| ratio | value |", "|---|---:|"]
    lines += [f"| {name} | {value:.3f} |" for name, value in results["ratios"].items()]
    lines += [
        "",
        "| follower | creates/s | polls with events | lag median (ms) | lag max (ms) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, found in results.items():
        if name.startswith("follower lag"):
            lag = [
                f"{found[key]:.0f}" if found[key] is not None else "-"
                for key in ("lag_median_ms", "lag_max_ms")
            ]
            lines.append(
                f"| {name[14:]} | {found['creates_per_s']:.0f} | {found['polls']} | {lag[0]} | {lag[1]} |"
            )
    direct = results["redis direct"]
    lines += [
        "",
        "Redis driven directly (creates from 16 threads, so that it is busy), feed off / on: all CPU per "
        f"create {direct['cpu per create, off (us)']:.1f} / {direct['cpu per create, on (us)']:.1f} µs "
        f"({direct['cpu per create, on (us)'] / direct['cpu per create, off (us)']:.3f}x); the script's "
        f"{direct['script per create, off (us)']:.1f} / {direct['script per create, on (us)']:.1f} µs "
        f"({direct['script per create, on (us)'] / direct['script per create, off (us)']:.3f}x).",
        "",
        f"Bytes per retained event: Redis `used_memory` {direct['bytes per event']:.0f} B, "
        f"memory store {results['memory bytes per event']:.0f} B (the Python heap).",
        "",
        validity(results, "VALID: every answer had its status."),
    ]
    return "\n".join(lines)
