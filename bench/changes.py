"""Changing a plant (PUT, a tag-moving PUT, PATCH) and a conditional GET's 304, against creates.

Side by side on each store, against the create and the plain GET.

    python -m bench changes            # 5 interleaved rounds of 10 s per workload
    python -m bench changes --smoke    # a second per workload

One gunicorn worker per store, pinned to CPU 0 with wrk on CPU 1, redis-server beside wrk (its
CPU per request is read from /proc, so Redis's own cost of each write is counted too). The
changes pick plants at random among PLANTS preloaded ones; creates make new ids.
"""

from __future__ import annotations

import functools

from bench.harness.load import by_work, failed, put_plants, wrk
from bench.harness.report import SIDE_BY_SIDE, benchmark_parser, finish, side_by_side_table, spread, validity
from bench.harness.servers import gunicorn, scratch, start_redis, stop_all

FIRST = 7 * 10**12
WORKLOADS = ("create", "put", "retag", "patch", "get", "get304")


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--plants", type=int, help="plants the changes pick from (default 10,000; smoke 500)")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else 5)
    seconds = args.seconds or (1 if args.smoke else 10)
    plants = args.plants or (500 if args.smoke else 10_000)
    redis_process, sock = start_redis(scratch("changes"))
    stores = {
        "memory": gunicorn("memory"),
        "redis": gunicorn("redis", {"PLANTS_STORE_URL": f"unix://{sock}", "WEB_CONCURRENCY": "1"}),
    }
    problems: list[str] = []
    runs: dict[str, list[dict]] = {f"{store}: {work}": [] for store in stores for work in WORKLOADS}
    id_base = 0
    try:
        for server in stores.values():
            server.start()
            put_plants(server.port, FIRST, plants)
        # The first round warms up, but not in a smoke run, which only checks that each serves.
        for round_number in range(int(args.smoke), rounds + 1):
            calls = {}
            for store, server in stores.items():
                for work in WORKLOADS:
                    id_base += 10**13
                    env = {"BENCH_ID_BASE": str(id_base), "BENCH_MODE": work, "BENCH_FIRST": str(FIRST),
                           "BENCH_COUNT": str(plants)}  # fmt: skip
                    script = "create.lua" if work == "create" else "changes.lua"
                    run_seconds = 1 if round_number == 0 else seconds
                    calls[(store, work)] = functools.partial(
                        wrk, server, script, run_seconds, args.connections, env, redis_process.pid
                    )
            # A smoke run has each workload on both stores at once: it only shows that each serves.
            for (store, work), run in by_work(calls, args.smoke).items():
                if failed(run):
                    problems.append(f"{store}: {work}: {run}")
                if round_number:
                    runs[f"{store}: {work}"].append(run)
    finally:
        stop_all(stores.values())
        redis_process.terminate()
        redis_process.wait()
    results: dict = {"rounds": rounds, "seconds": seconds, "connections": args.connections, "plants": plants}
    for name, name_runs in runs.items():
        results[name] = {key: spread(name_runs, key) for key in SIDE_BY_SIDE}
    results["ratios"] = {
        f"{store}: {work} / {base}": results[f"{store}: {work}"]["rps"]["median"]
        / results[f"{store}: {base}"]["rps"]["median"]
        for store in stores
        for work, base in (("put", "create"), ("retag", "create"), ("patch", "create"), ("get304", "get"))
    }
    for work in ("put", "retag", "patch"):
        results["ratios"][f"redis CPU: {work} / create"] = (
            results[f"redis: {work}"]["redis_cpu_us_per_request"]["median"]
            / results["redis: create"]["redis_cpu_us_per_request"]["median"]
        )
    return finish(results, problems, report, args.json)


def report(results: dict) -> str:
    lines = [
        f"{results['rounds']} interleaved rounds of {results['seconds']:g} s, wrk -t1 "
        f"-c{results['connections']}, one worker; changes over {results['plants']:,} plants; "
        "median (min to max).",
        "",
        *side_by_side_table(results),
    ]
    lines += ["", "| ratio | value |", "|---|---:|"]
    lines += [f"| {name} | {value:.3f} |" for name, value in results["ratios"].items()]
    lines += ["", validity(results, "VALID: every answer had its status.")]
    return "\n".join(lines)
