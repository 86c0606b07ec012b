"""Benchmark of the shared store and of metrics, side by side in one run.

    python bench/shared_store.py            # full run (a few minutes)
    python bench/shared_store.py --smoke    # about a second per contestant; what CI runs

Contestants (gunicorn with the packaged configuration, servers on CPU 0; wrk and redis-server on
CPU 1, interleaved rounds, medians):

- memory store, 1 worker, metrics on (the default) and off;
- Redis store (unix socket), 1 worker, metrics on and off;
- both stores with a per-token rate limit that is never reached;
- Redis store, 2 workers, on both CPUs (the real scaling run this 2-core machine allows);
- the peer: FastAPI + redis.asyncio + hiredis, one process, the same one-script round trip.

It also reads CPU time per create from /proc for the worker and for redis-server (the scaling
model) and Redis's `used_memory` per stored plant after preloading plants with the benchmark's
names and tags through the service's own script.
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.store.redis.groups import Groups, encode
from app.store.redis.lua import CREATE
from bench.run import (
    CLIENT_CPU,
    TICK,
    Server,
    benchmark_parser,
    finish,
    median_of,
    show_spread,
    validity,
    wrk,
)

NAMES = ["Boston fern", "Aloe vera", "Snake plant", "Golden pothos", "Peace lily", "Spider plant",
         "Monstera deliciosa", "Rubber plant", "Jade plant", "Calathea"]  # fmt: skip
TAGS = ["fern", "succulent", "tropical", "vine", "flowering"]
# A per-token limit that the benchmark never reaches: its whole cost, and no 429.
NEVER_REACHED = {"PLANTS_RATE_LIMIT": "1000000/second"}


def redis_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


#: What a run beside redis-server reports: req/s and the CPU per request of each side.
SIDE_BY_SIDE = ("rps", "cpu_us_per_request", "redis_cpu_us_per_request")
SIDE_BY_SIDE_HEADER = [
    "| workload | req/s | worker CPU / request (µs) | redis-server CPU / request (µs) |",
    "|---|---:|---:|---:|",
]


def wrk_beside_redis(
    server: Server, script: str, seconds: float, connections: int, env: dict[str, str], redis_pid: int
) -> dict:
    """One wrk run, with redis-server's CPU per request over it (from /proc): so that the Redis
    side of each request is counted, not only the worker's."""
    before = redis_cpu_seconds(redis_pid)
    run = wrk(server, script, seconds, connections, env)
    run["redis_cpu_us_per_request"] = (redis_cpu_seconds(redis_pid) - before) * 1e6 / max(run["requests"], 1)
    return run


def side_by_side_rows(results: dict) -> list[str]:
    """A table row for each workload of `results` (median, min to max), after SIDE_BY_SIDE_HEADER."""
    return [
        f"| {name} | " + " | ".join(show_spread(found[key]) for key in SIDE_BY_SIDE) + " |"
        for name, found in results.items()
        if isinstance(found, dict) and "rps" in found
    ]


def start_redis(directory: Path, *options: str) -> tuple[subprocess.Popen, Path]:
    """A redis-server on CPU 1 and a unix socket, without persistence; `options` are more of its settings."""
    sock = directory / "redis.sock"
    process = subprocess.Popen(
        ["taskset", "-c", CLIENT_CPU, "redis-server", "--port", "0", "--unixsocket", str(sock),
         "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", str(directory), *options],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 15
    while True:
        try:
            redis.Redis(unix_socket_path=str(sock)).ping()
            return process, sock
        except redis.RedisError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def used_memory_per_plant(sock: Path, plants: int) -> float:
    """Preload `plants` with the benchmark's names and tags through the service's script."""
    client = redis.Redis(unix_socket_path=str(sock))
    client.flushall()
    before = client.info("memory")["used_memory"]
    script = client.register_script(CREATE)
    groups = Groups("memory", count=1, capacity=10**9, cluster=False)
    rng = random.Random(4)
    base = 10**11
    for start in range(0, plants, 10_000):
        with client.pipeline(transaction=False) as pipe:
            for n in range(start, min(start + 10_000, plants)):
                plant_id = base + n
                name = f"{rng.choice(NAMES)} {n % 100000:05d}"
                keys, args = groups.create_call(plant_id, encode(name, rng.choice(TAGS)))
                script(keys=keys, args=args, client=pipe)
            pipe.execute()
    used = client.info("memory")["used_memory"] - before
    client.flushall()
    return used / plants


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--threads", default="4", help="request threads per worker (GUNICORN_THREADS)")
    parser.add_argument("--compare-tree", type=Path, help="another checkout: its limits-on builds run too")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else 5)
    seconds = args.seconds or (1 if args.smoke else 10)
    plants = 5_000 if args.smoke else 1_000_000
    python = sys.executable
    gunicorn = [python, "-m", "gunicorn", "-c", "python:app.server.gunicorn_conf"]
    directory = Path(tempfile.mkdtemp(prefix="bench-redis-"))
    redis_process, sock = start_redis(directory)
    url = f"unix://{sock}"
    common = {"GUNICORN_THREADS": args.threads, "PLANTS_MAX_PLANTS": str(10**9)}
    on_redis = {**common, "PLANTS_STORE_URL": url}
    contestants = {
        "memory": Server("memory", gunicorn, common),
        "memory, metrics off": Server("memory, metrics off", gunicorn, {**common, "PLANTS_METRICS": "false"}),
        "redis": Server("redis", gunicorn, on_redis),
        "redis, metrics off": Server("redis, metrics off", gunicorn, {**on_redis, "PLANTS_METRICS": "false"}),
        "memory, limits on": Server("memory, limits on", gunicorn, {**common, **NEVER_REACHED}),
        "redis, limits on": Server("redis, limits on", gunicorn, {**on_redis, **NEVER_REACHED}),
        "peer": Server("peer", [python, "-m", "uvicorn", "bench.fastapi_redis_peer:app", "--workers", "1",
                                "--host", "127.0.0.1", "--port", "{port}", "--log-level", "warning"],
                       {**on_redis, "PLANTS_STORE_PREFIX": "peer"}),
    }  # fmt: skip
    if args.compare_tree:
        tree = args.compare_tree.resolve()
        contestants["memory, limits on (other tree)"] = Server(
            "memory, limits on (other tree)", gunicorn, {**common, **NEVER_REACHED}, cwd=tree
        )
        contestants["redis, limits on (other tree)"] = Server(
            "redis, limits on (other tree)", gunicorn, {**on_redis, **NEVER_REACHED}, cwd=tree
        )
    two_workers = Server(
        "redis, 2 workers", ["taskset", "-c", "0,1", *gunicorn], {**on_redis, "WEB_CONCURRENCY": "2"}
    )
    results: dict = {"mode": "smoke" if args.smoke else "full", "rounds": rounds, "seconds": seconds,
                     "connections": args.connections, "threads": args.threads}  # fmt: skip
    problems: list[str] = []
    id_base = 0
    try:
        for server in [*contestants.values(), two_workers]:
            server.start()

        def run(server: Server, run_seconds: float = seconds) -> dict:
            nonlocal id_base
            id_base += 10**13
            redis_before = redis_cpu_seconds(redis_process.pid)
            stats = wrk(server, "create.lua", run_seconds, args.connections, {"BENCH_ID_BASE": str(id_base)})
            stats["redis_cpu_us_per_request"] = (
                (redis_cpu_seconds(redis_process.pid) - redis_before) * 1e6 / max(stats["requests"], 1)
            )
            return stats

        for server in [*contestants.values(), two_workers]:
            run(server, 1)  # warm up
        runs: dict[str, list[dict]] = {name: [] for name in [*contestants, "redis, 2 workers"]}
        for _ in range(rounds):
            for name, server in contestants.items():
                runs[name].append(run(server))
            runs["redis, 2 workers"].append(run(two_workers))
        for name, name_runs in runs.items():
            for one in name_runs:
                if one.get("non2xx") or one["socket_errors"]:
                    problems.append(f"{name}: {one}")
            results[name] = {
                key: median_of(name_runs, key)
                for key in ("rps", "p50_us", "p99_us", "cpu_us_per_request", "redis_cpu_us_per_request")
            }
    finally:
        for server in [*contestants.values(), two_workers]:
            server.stop()
    try:
        results["used_memory_per_plant"] = used_memory_per_plant(sock, plants)
        results["plants"] = plants
    finally:
        redis_process.terminate()
        redis_process.wait(15)

    worker_us = results["redis"]["cpu_us_per_request"]
    redis_us = results["redis"]["redis_cpu_us_per_request"]
    results["ratios"] = {
        "redis_to_memory_per_core": results["redis"]["rps"] / results["memory"]["rps"],
        "redis_to_peer": results["redis"]["rps"] / results["peer"]["rps"],
        "metrics_on_to_off_memory": results["memory"]["rps"] / results["memory, metrics off"]["rps"],
        "metrics_on_to_off_redis": results["redis"]["rps"] / results["redis, metrics off"]["rps"],
        "limits_on_to_off_memory": results["memory, limits on"]["rps"] / results["memory"]["rps"],
        "limits_on_to_off_redis": results["redis, limits on"]["rps"] / results["redis"]["rps"],
        **{
            f"{name} / off": results[name]["rps"] / results[name.split(",")[0]]["rps"]
            for name in results
            if name.endswith("(other tree)")
        },
        "two_workers_to_one": results["redis, 2 workers"]["rps"] / results["redis"]["rps"],
    }
    results["model"] = {
        "worker_cpu_us_per_create": worker_us,
        "redis_cpu_us_per_create": redis_us,
        "projected_rps": {n: min(n * 1e6 / worker_us, 1e6 / redis_us) for n in (1, 2, 4, 8, 16)},
    }
    return finish(results, problems, report, args.json)


def report(results: dict) -> str:
    ratios, model = results["ratios"], results["model"]
    names = ["memory", "memory, metrics off", "memory, limits on", "redis", "redis, metrics off",
             "redis, limits on", "redis, 2 workers", "peer"]  # fmt: skip
    names += [name for name in results if name.endswith("(other tree)")]
    return "\n".join(
        [
            f"Versions: {results['versions']}",
            f"Mode: {results['mode']}; {results['rounds']} interleaved rounds of {results['seconds']:g} s, "
            f"wrk -t1 -c{results['connections']}, {results['threads']} threads per worker; server on CPU 0 "
            f"(2 workers: CPUs 0-1), wrk and redis-server on CPU {CLIENT_CPU}; medians.",
            "",
            "| contestant | req/s | p50 | p99 | server CPU / create | redis-server CPU / create |",
            "|---|---:|---:|---:|---:|---:|",
            *(
                f"| {name} | {results[name]['rps']:,.0f} | {results[name]['p50_us'] / 1000:.2f} ms "
                f"| {results[name]['p99_us'] / 1000:.2f} ms | {results[name]['cpu_us_per_request']:.0f} µs "
                f"| {results[name]['redis_cpu_us_per_request']:.0f} µs |"
                for name in names
            ),
            "",
            "| ratio | value | goal |",
            "|---|---:|---:|",
            f"| (a) Redis 1 worker / memory 1 worker | {ratios['redis_to_memory_per_core']:.2f} | ≥ 0.80 |",
            f"| (b) Redis 1 worker / FastAPI + redis.asyncio peer | {ratios['redis_to_peer']:.2f} | ≥ 1.0 |",
            f"| metrics on / off, memory | {ratios['metrics_on_to_off_memory']:.2f} | ≥ 0.95 |",
            f"| metrics on / off, Redis | {ratios['metrics_on_to_off_redis']:.2f} | ≥ 0.95 |",
            f"| rate limit never reached / off, memory | {ratios['limits_on_to_off_memory']:.2f} | ≥ 0.90 |",
            f"| rate limit never reached / off, Redis | {ratios['limits_on_to_off_redis']:.2f} | ≥ 0.85 |",
            *(f"| {name} | {value:.2f} | |" for name, value in ratios.items() if "(other tree)" in name),
            f"| Redis 2 workers / 1 worker (2 cores shared with wrk and Redis) "
            f"| {ratios['two_workers_to_one']:.2f} | |",
            f"| (d) Redis used_memory per plant ({results['plants']:,} plants) "
            f"| {results['used_memory_per_plant']:.0f} B | ≤ 64 B |",
            "",
            f"(c) Scaling model: a create costs {model['worker_cpu_us_per_create']:.0f} µs of worker CPU "
            f"and {model['redis_cpu_us_per_create']:.0f} µs of redis-server CPU; projected creates/s for N "
            "worker cores, min(N * worker rate, Redis rate): "
            + ", ".join(f"N={n}: {rps:,.0f}" for n, rps in model["projected_rps"].items()),
            "",
            validity(results),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
