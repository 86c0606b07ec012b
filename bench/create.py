"""Creates on each store, with metrics and rate limits on and off, against the FastAPI peer.

    python -m bench create             # 5 interleaved rounds of 10 s (a few minutes)
    python -m bench create --ref main  # and the limits-on servers of another revision beside
    python -m bench create --smoke     # a second per contestant

Contestants (gunicorn with the packaged configuration, servers on CPU 0; wrk and redis-server on
CPU 1, interleaved rounds, medians):

- memory store, 1 worker, metrics on (the default) and off;
- Redis store (unix socket), 1 worker, metrics on and off;
- both stores with a per-token rate limit that is never reached;
- Redis store, 2 workers, on both CPUs (the scaling this 2-core machine allows);
- the peer: FastAPI + redis.asyncio + hiredis, one process, the same one-script round trip.

It reads CPU time per create from /proc for the worker and for redis-server (the scaling model:
N workers give min(N x the worker's rate, Redis's rate)), and Redis's `used_memory` per plant
after storing plants with the benchmark's names and tags.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import random

import redis

from bench.harness import CLIENT_CPU
from bench.harness.load import failed, fill_store, together, wrk
from bench.harness.report import benchmark_parser, finish, median_of, validity
from bench.harness.servers import GUNICORN, Server, gunicorn, peer, scratch, start_redis, stop_all, worktree

NAMES = ["Boston fern", "Aloe vera", "Snake plant", "Golden pothos", "Peace lily", "Spider plant",
         "Monstera deliciosa", "Rubber plant", "Jade plant", "Calathea"]  # fmt: skip
TAGS = ["fern", "succulent", "tropical", "vine", "flowering"]
# A per-token limit that the benchmark never reaches: its whole cost, and no 429.
NEVER_REACHED = {"PLANTS_RATE_LIMIT": "1000000/second"}
KEYS = ("rps", "p50_us", "p99_us", "cpu_us_per_request", "redis_cpu_us_per_request")


def used_memory_per_plant(sock: str, plants: int) -> float:
    """Redis's `used_memory` per plant, `plants` stored with the benchmark's names and tags."""
    client = redis.Redis(unix_socket_path=sock)
    client.flushall()
    before = client.info("memory")["used_memory"]
    rng = random.Random(4)
    fill_store(
        f"unix://{sock}",
        "memory",
        ((10**11 + n, f"{rng.choice(NAMES)} {n % 100000:05d}", rng.choice(TAGS)) for n in range(plants)),
    )
    used = client.info("memory")["used_memory"] - before
    client.flushall()
    return used / plants


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--threads", default="4", help="request threads per worker (GUNICORN_THREADS)")
    parser.add_argument("--ref", help="a git revision: its limits-on servers run beside")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else 5)
    seconds = args.seconds or (1 if args.smoke else 10)
    plants = 5_000 if args.smoke else 1_000_000
    redis_process, sock = start_redis(scratch("create"))
    common = {"GUNICORN_THREADS": args.threads, "PLANTS_MAX_PLANTS": str(10**9)}
    on_redis = {**common, "PLANTS_STORE_URL": f"unix://{sock}"}
    results: dict = {"mode": "smoke" if args.smoke else "full", "rounds": rounds, "seconds": seconds,
                     "connections": args.connections, "threads": args.threads}  # fmt: skip
    problems: list[str] = []
    with contextlib.ExitStack() as stack:
        contestants = {
            "memory": gunicorn("memory", common),
            "memory, metrics off": gunicorn("memory, metrics off", {**common, "PLANTS_METRICS": "false"}),
            "redis": gunicorn("redis", on_redis),
            "redis, metrics off": gunicorn("redis, metrics off", {**on_redis, "PLANTS_METRICS": "false"}),
            "memory, limits on": gunicorn("memory, limits on", {**common, **NEVER_REACHED}),
            "redis, limits on": gunicorn("redis, limits on", {**on_redis, **NEVER_REACHED}),
            "peer": peer("peer", True, {**on_redis, "PLANTS_STORE_PREFIX": "peer"}),
            "redis, 2 workers": Server(
                "redis, 2 workers", ["taskset", "-c", f"0,{CLIENT_CPU}", *GUNICORN, "wsgi:app"],
                {**on_redis, "WEB_CONCURRENCY": "2"},
            ),
        }  # fmt: skip
        if args.ref:
            tree = stack.enter_context(worktree(args.ref))
            for store, env in (("memory", common), ("redis", on_redis)):
                name = f"{store}, limits on ({args.ref})"
                contestants[name] = gunicorn(name, {**env, **NEVER_REACHED}, cwd=tree)
        stack.callback(lambda: stop_all(contestants.values()))
        for server in contestants.values():
            server.start()
        id_bases = itertools.count(10**13, 10**13)  # next() is atomic: runs may be in threads

        def run(server: Server, run_seconds: float = seconds) -> dict:
            env = {"BENCH_ID_BASE": str(next(id_bases))}
            return wrk(server, "create.lua", run_seconds, args.connections, env, redis_process.pid)

        # The first runs warm up, but not in a smoke run, which only checks that each serves.
        for server in contestants.values() if not args.smoke else ():
            run(server, 1)
        runs: dict[str, list[dict]] = {name: [] for name in contestants}
        for _ in range(rounds):
            if args.smoke:  # every contestant at once: a smoke run only shows that each serves
                found = together(functools.partial(run, server) for server in contestants.values())
                for name, one in zip(contestants, found, strict=True):
                    runs[name].append(one)
                continue
            for name, server in contestants.items():
                runs[name].append(run(server))
        for name, name_runs in runs.items():
            problems += [f"{name}: {one}" for one in name_runs if failed(one)]
            results[name] = {key: median_of(name_runs, key) for key in KEYS}
    try:
        results["used_memory_per_plant"] = used_memory_per_plant(str(sock), plants)
        results["plants"] = plants
    finally:
        redis_process.terminate()
        redis_process.wait(15)
    worker_us = results["redis"]["cpu_us_per_request"]
    redis_us = results["redis"]["redis_cpu_us_per_request"]

    def ratio(name: str, base: str) -> float:
        return results[name]["rps"] / results[base]["rps"]

    results["ratios"] = {
        "redis_to_memory_per_core": ratio("redis", "memory"),
        "redis_to_peer": ratio("redis", "peer"),
        "metrics_on_to_off_memory": ratio("memory", "memory, metrics off"),
        "metrics_on_to_off_redis": ratio("redis", "redis, metrics off"),
        "limits_on_to_off_memory": ratio("memory, limits on", "memory"),
        "limits_on_to_off_redis": ratio("redis, limits on", "redis"),
        **{f"{name} / off": ratio(name, name.split(",")[0]) for name in results if name.endswith(")")},
        "two_workers_to_one": ratio("redis, 2 workers", "redis"),
    }
    results["model"] = {
        "worker_cpu_us_per_create": worker_us,
        "redis_cpu_us_per_create": redis_us,
        "projected_rps": {n: min(n * 1e6 / worker_us, 1e6 / redis_us) for n in (1, 2, 4, 8, 16)},
    }
    return finish(results, problems, report, args.json)


def report(results: dict) -> str:
    ratios, model = results["ratios"], results["model"]
    names = [name for name, found in results.items() if isinstance(found, dict) and "rps" in found]
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
            *(f"| {name} | {value:.2f} | |" for name, value in ratios.items() if name.endswith(") / off")),
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
