"""The service's create against the floor (a bare Flask route) and the FastAPI peers, in one run.

    python -m bench floor            # full run (about 15 minutes: includes preloading 1,000,000 plants)
    python -m bench floor --smoke    # about a second per contestant
    python -m bench floor --rounds 5 --seconds 10 --plants 5000   # issue 55's figures, in one run

Contestants, one gunicorn worker each on the memory store (the peers: uvicorn, one process): the
service's create, the floor (bench/apps/floor.py, the speed limit of this stack), the bare FastAPI
peer (bench/apps/fastapi_peer.py, its access line off), the contract peer (bench/apps/
fastapi_contract_peer.py: the service's whole create contract in FastAPI, uvicorn's access line on
as it ships), the service with a store of `--plants` plants (its p99, and the worker's RSS per
plant), and the service's refusals (401, 400). Servers are pinned to CPU 0 and wrk to CPU 1.
Contestants run interleaved (A B C, A B C, ...) and the medians are reported with their spread
(the lowest and highest round). A ratio of the service to another contestant is taken in each
round, of the two runs next to each other, and reported as the median of the rounds' ratios
with their spread. A run in which any create is not 2xx (or any refusal has another status) is
invalid: it says so and exits 1.
"""

from __future__ import annotations

import functools
import itertools
import os
import platform
import statistics

from bench.harness import CLIENT_CPU, SERVER_CPU
from bench.harness.load import failed, together, wrk
from bench.harness.report import benchmark_parser, finish, median_of, show_spread, spread, validity
from bench.harness.servers import Server, floor, gunicorn, peer, stop_all


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--plants", type=int, help="plants preloaded for the memory and p99 figures "
                        "(default 1,000,000; smoke 5,000)")  # fmt: skip
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else 5)
    seconds = args.seconds or (1 if args.smoke else 10)
    plants = args.plants or (5_000 if args.smoke else 1_000_000)
    contestants = {
        "service": gunicorn("service"),
        "floor": floor("floor"),
        "peer": peer("peer", False),
        "contract_peer": peer("contract peer", False, contract=True, access_log=True),
    }
    # Room for the preload and the measured creates after it (the default capacity is 1,000,000).
    loaded = gunicorn("service, store preloaded", {"PLANTS_MAX_PLANTS": str(2 * plants + 10**6)})
    servers = [*contestants.values(), loaded]
    problems: list[str] = []
    results: dict = {"mode": "smoke" if args.smoke else "full", "rounds": rounds, "seconds": seconds,
                     "connections": args.connections, "plants": plants}  # fmt: skip
    try:
        for server in servers:
            server.start()
        id_bases = itertools.count(10**13, 10**13)  # next() is atomic: runs may be in threads

        def create_run(server: Server, run_seconds: float = seconds) -> dict:
            env = {"BENCH_ID_BASE": str(next(id_bases))}
            return wrk(server, "create.lua", run_seconds, args.connections, env)

        # Memory: RSS of the preloaded service's worker before and after `plants` creates.
        rss_before = loaded.worker_rss_bytes()
        stored = chunks = 0
        while stored < plants:
            chunks += 1
            # wrk runs for all of -d even once every thread has stopped: short runs, each
            # capped at what is left, bound the idle time.
            chunk = wrk(loaded, "create.lua", 1 if args.smoke else 5, args.connections, {
                "BENCH_LIMIT": str(plants - stored), "BENCH_ID_BASE": str(chunks * 10**9)
            })  # fmt: skip
            if failed(chunk) or not chunk["requests"]:
                problems.append(f"preload: {chunk}")
                break
            stored += chunk["requests"]
        results["bytes_per_plant"] = (loaded.worker_rss_bytes() - rss_before) / max(stored, 1)

        # The first runs warm up, but not in a smoke run, which only checks that each serves.
        for server in [*contestants.values(), loaded] if not args.smoke else ():
            create_run(server, 1)
        runs: dict[str, list[dict]] = {
            name: [] for name in [*contestants, "loaded", "refused_401", "refused_400"]
        }
        for _ in range(rounds):
            if args.smoke:  # every server's creates at once: a smoke run only shows that each serves
                named = {**contestants, "loaded": loaded}
                found = together(functools.partial(create_run, server) for server in named.values())
                for name, one in zip(named, found, strict=True):
                    runs[name].append(one)
            else:
                for name, server in contestants.items():
                    runs[name].append(create_run(server))
                runs["loaded"].append(create_run(loaded))
            for case in ("401", "400"):
                runs[f"refused_{case}"].append(
                    wrk(
                        contestants["service"], "refused.lua", seconds, args.connections, {"BENCH_CASE": case}
                    )
                )
        for name, name_runs in runs.items():
            problems += [f"{name}: {run}" for run in name_runs if failed(run)]
            results[name] = {
                key: median_of(name_runs, key) for key in ("rps", "p50_us", "p99_us", "cpu_us_per_request")
            }
            results[name]["spread"] = {key: spread(name_runs, key) for key in SPREAD}
            results[name]["runs"] = name_runs
    finally:
        stop_all(servers)

    service = results["service"]
    results["round_ratios"] = {
        f"service_to_{other}_{short}": round_ratios(service["runs"], results[other]["runs"], key)
        for other, _ in COMPARED
        for short, key in (("rps", "rps"), ("cpu", "cpu_us_per_request"))
    }
    results["ratios"] = {
        **{name: found["median"] for name, found in results["round_ratios"].items()},
        "service_to_peer_p99": service["p99_us"] / results["peer"]["p99_us"],
        "loaded_to_empty_p99": results["loaded"]["p99_us"] / service["p99_us"],
        "refused_401_to_create_rps": results["refused_401"]["rps"] / service["rps"],
        "refused_400_to_create_rps": results["refused_400"]["rps"] / service["rps"],
    }
    results["machine"] = f"{platform.machine()}, {os.cpu_count()} CPUs, Linux {platform.release()}, " + (
        f"Python {platform.python_version()}"
    )
    return finish(results, problems, report, args.json)


#: The figures reported with their spread across rounds.
SPREAD = ("rps", "cpu_us_per_request")
#: The ratios of the service's create to each other contestant's, per round, in the report.
COMPARED = (
    ("contract_peer", "the FastAPI contract peer (access line on)"),
    ("peer", "the bare FastAPI peer (access line off)"),
    ("floor", "the floor (bare Flask route)"),
)


def round_ratios(runs: list[dict], others: list[dict], key: str) -> dict[str, float]:
    """`key` of each round's run over the other contestant's run of the same round: the median
    of the rounds' ratios, and the lowest and highest (interleaved runs share the machine's mood)."""
    values = [run[key] / other[key] for run, other in zip(runs, others, strict=True)]
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def report(results: dict) -> str:
    rows = [
        ("service (create)", results["service"]),
        ("floor (bare Flask route)", results["floor"]),
        ("FastAPI peer (create)", results["peer"]),
        ("FastAPI contract peer (create, access line on)", results["contract_peer"]),
        (f"service, {results['plants']:,} plants stored", results["loaded"]),
        ("service, refused 401", results["refused_401"]),
        ("service, refused 400", results["refused_400"]),
    ]
    ratios = results["ratios"]
    lines = [
        f"Machine: {results['machine']}",
        f"Versions: {results['versions']}",
        f"Mode: {results['mode']}; {results['rounds']} interleaved rounds of {results['seconds']:g} s, "
        f"wrk -t1 -c{results['connections']}; server on CPU {SERVER_CPU}, wrk on CPU {CLIENT_CPU}; medians.",
        "",
        "| contestant | req/s (lowest to highest round) | p50 | p99 | server CPU / request, µs |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {name} | {show_spread(r['spread']['rps'], ',.0f')} | {r['p50_us'] / 1000:.2f} ms "
            f"| {r['p99_us'] / 1000:.2f} ms | {show_spread(r['spread']['cpu_us_per_request'], '.0f')} |"
            for name, r in rows
        ),
        "",
        "| the service's create against | req/s ratio (each round's) | CPU per create ratio (each round's) |",
        "|---|---:|---:|",
        *(
            f"| {label} | {show_spread(results['round_ratios'][f'service_to_{other}_rps'], '.2f')} "
            f"| {show_spread(results['round_ratios'][f'service_to_{other}_cpu'], '.2f')} |"
            for other, label in COMPARED
        ),
        "",
        "| ratio | value |",
        "|---|---:|",
        f"| create p99 / FastAPI peer p99 | {ratios['service_to_peer_p99']:.2f} |",
        f"| p99 with {results['plants']:,} plants / p99 near-empty | {ratios['loaded_to_empty_p99']:.2f} |",
        f"| refused 401 throughput / create | {ratios['refused_401_to_create_rps']:.2f} |",
        f"| refused 400 throughput / create | {ratios['refused_400_to_create_rps']:.2f} |",
        f"| bytes per stored plant (RSS delta / {results['plants']:,}) | {results['bytes_per_plant']:.0f} |",
        "",
        validity(results, "VALID: every create was 2xx and every refusal had its status."),
    ]
    return "\n".join(lines)
