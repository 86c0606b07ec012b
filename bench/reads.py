"""Reads (get, pages, a rare tag's pages) on a small and a large store, against creates.

    python -m bench reads                 # full run: 1,000,000 plants per store
    python -m bench reads --ref main      # and the creates of another revision beside
    python -m bench reads --smoke         # a second per contestant

Each store (memory, and Redis on a unix socket) gets two servers of one worker: a small store of
1,000 plants and a large one (1,000,000). Every 100th plant has the tag `rare` (1%), the others one
of five tags. Servers on CPU 0; wrk and redis-server on CPU 1; interleaved rounds, medians.

Measured per store: creates (new ids), `GET /plants/{id}` of stored plants, a page of 100
(`limit=100` after cursors spread over the store), and a page of 100 filtered by `rare`. Server CPU
per request is the worker's, plus redis-server's on Redis. Bytes per plant: Redis `used_memory`,
and the memory store's structures under tracemalloc at the same size.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import random
import tracemalloc
from pathlib import Path
from urllib.parse import quote

import redis

from app.store import MemoryPlantStore
from bench.harness.load import failed, fill_store, get_json, together, wrk
from bench.harness.report import benchmark_parser, finish, median_of
from bench.harness.servers import Server, gunicorn, scratch, start_redis, stop_all, worktree

BASE = 5 * 10**15
NAMES = ["Boston fern", "Aloe vera", "Snake plant", "Golden pothos", "Peace lily"]
TAGS = ["fern", "succulent", "tropical", "vine", "flowering"]


def plant(n: int) -> tuple[int, str, str]:
    """The n-th preloaded plant, as bench/lua/preload.lua makes it."""
    return BASE + n, f"{NAMES[n % len(NAMES)]} {n % 100000:05d}", "rare" if n % 100 == 0 else TAGS[n % 5]


def preload_redis(sock: Path, prefix: str, plants: int) -> float:
    """Preload through the service's own store; Redis's used_memory per plant it cost."""
    client = redis.Redis(unix_socket_path=str(sock))
    before = client.info("memory")["used_memory"]
    fill_store(f"unix://{sock}", prefix, (plant(n) for n in range(plants)))
    return (client.info("memory")["used_memory"] - before) / plants


def preload_http(server: Server, plants: int, run_s: float = 5) -> None:
    """Preload through the service's creates, in runs of `run_s`: wrk runs for all of -d even once
    its thread has stopped, so short runs, each capped at what is left, bound the idle time."""
    stored = first = 0
    while stored < plants:
        stats = wrk(server, "preload.lua", run_s, 8, {
            "BENCH_BASE": str(BASE), "BENCH_FIRST": str(first), "BENCH_LIMIT": str(plants - stored)
        })  # fmt: skip
        if failed(stats) or not stats["requests"]:
            raise RuntimeError(f"preloading {server.name} failed: {stats}")
        stored += stats["requests"]
        first += stats["requests"] + 100  # past any request still in flight when the run stopped


def memory_store_bytes_per_plant(plants: int) -> float:
    """The memory store's own structures (dicts, sorted lists, names), traced by tracemalloc."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    store = MemoryPlantStore(plants)
    for n in range(plants):
        store.create(*plant(n))
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(store) == plants
    return used / plants


def walk(server: Server, query: str, step: int) -> tuple[list[str], list[int]]:
    """The cursors of a walk of `query` in pages of `step`, and the ids it saw."""
    cursors, ids, after = [], [], None
    while True:
        suffix = f"&after={quote(after)}" if after else ""
        page = get_json(server.port, f"/plants?{query}&limit={step}{suffix}")
        ids += [item["id"] for item in page["plants"]]
        if "next" not in page:
            return cursors, ids
        after = page["next"]
        cursors.append(after)


def page_paths(cursors: list[str], query: str, step: int, wanted: int) -> list[str]:
    """Paths of the first page of 100 and of pages after up to `wanted` of `cursors`, spread over
    the walk (in a smoke run's small stores there may be none)."""
    # The last cursors may lead to a short page: every page measured holds 100 plants.
    cursors = cursors[: max(1, len(cursors) - max(1, 100 // step))]
    every = max(1, len(cursors) // wanted)
    first = f"/plants?{query}&limit=100"
    return [first, *(f"{first}&after={quote(cursor)}" for cursor in cursors[::every])]


def ratio(value: float, base: float) -> float:
    """value / base; NaN when a smoke run's second saw no CPU tick of the base (a busy machine)."""
    return value / base if base else float("nan")


def one_per_server(workloads: dict[str, tuple[Server, str, list[str] | None]]) -> list[list[str]]:
    """The workloads' names in batches, in their order, each batch with one workload per server."""
    batches: list[list[str]] = []
    for name, (server, _, _) in workloads.items():
        batch = next((b for b in batches if all(workloads[other][0] is not server for other in b)), None)
        if batch is None:
            batch = []
            batches.append(batch)
        batch.append(name)
    return batches


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--plants", type=int, help="plants in each large store (default 1,000,000)")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--ref", help="a git revision: its creates run beside")
    parser.add_argument("--only", help="run only the workloads whose name contains this (e.g. create)")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else 3)
    seconds = args.seconds or (1 if args.smoke else 10)
    small, large = (200, 2_000) if args.smoke else (1_000, args.plants or 1_000_000)
    directory = scratch("reads")
    redis_process, sock = start_redis(directory)
    common = {"GUNICORN_THREADS": "4", "PLANTS_MAX_PLANTS": str(10**9)}
    on_redis = {**common, "PLANTS_STORE_URL": f"unix://{sock}"}
    servers = {
        "memory, small": gunicorn("memory, small", common),
        "memory, large": gunicorn("memory, large", common),
        "redis, small": gunicorn("redis, small", {**on_redis, "PLANTS_STORE_PREFIX": "small"}),
        "redis, large": gunicorn("redis, large", {**on_redis, "PLANTS_STORE_PREFIX": "large"}),
    }
    creators = {
        "memory": gunicorn("memory creates", common),
        "redis": gunicorn("redis creates", {**on_redis, "PLANTS_STORE_PREFIX": "creates"}),
    }
    stack = contextlib.ExitStack()
    if args.ref:
        tree = stack.enter_context(worktree(args.ref))
        creators["memory (other tree)"] = gunicorn(f"memory creates, {args.ref}", common, cwd=tree)
        creators["redis (other tree)"] = gunicorn(
            f"redis creates, {args.ref}", {**on_redis, "PLANTS_STORE_PREFIX": "other"}, cwd=tree
        )
    everything = [*servers.values(), *creators.values()]
    results: dict = {"mode": "smoke" if args.smoke else "full", "rounds": rounds, "seconds": seconds,
                     "connections": args.connections, "small": small, "large": large}  # fmt: skip
    problems: list[str] = []
    id_bases = itertools.count(10**13, 10**13)
    try:
        for server in everything:
            server.start()
        for name, server in servers.items():
            plants = small if name.endswith("small") else large
            if name.startswith("redis"):
                results[f"used_memory_per_plant, {name}"] = preload_redis(sock, name.split(", ")[1], plants)
            else:
                preload_http(server, plants, 1 if args.smoke else 5)
        rng = random.Random(3)
        workloads: dict[str, tuple[Server, str, list[str] | None]] = {}
        for store in ("memory", "redis"):
            workloads[f"{store}: create"] = (creators[store], "create.lua", None)
            if f"{store} (other tree)" in creators:
                workloads[f"{store}: create (other tree)"] = (
                    creators[f"{store} (other tree)"],
                    "create.lua",
                    None,
                )
            for size in ("small", "large"):
                server = servers[f"{store}, {size}"]
                step = 100 if size == "small" else 1000
                cursors, ids = walk(server, "", step)
                gets = [f"/plants/{plant_id}" for plant_id in rng.sample(ids, min(1000, len(ids)))]
                workloads[f"{store}: get, {size}"] = (server, "paths.lua", gets)
                workloads[f"{store}: page, {size}"] = (
                    server,
                    "paths.lua",
                    page_paths(cursors, "", step, 200),
                )
            cursors, _ = walk(servers[f"{store}, large"], "tags=rare", 100)
            workloads[f"{store}: rare page, large"] = (
                servers[f"{store}, large"],
                "paths.lua",
                page_paths(cursors, "tags=rare", 100, 200),
            )

        def run(name: str, run_seconds: float = seconds) -> dict:
            server, script, paths = workloads[name]
            env = {}
            if paths is None:
                env["BENCH_ID_BASE"] = str(next(id_bases))  # next() is atomic: runs may be in threads
            else:
                path_file = directory / f"{abs(hash(name))}.paths"
                path_file.write_text("\n".join(paths) + "\n")
                env["BENCH_PATHS"] = str(path_file)
            stats = wrk(server, script, run_seconds, args.connections, env, redis_process.pid)
            if not name.startswith("redis"):
                stats["redis_cpu_us_per_request"] = 0.0
            stats["server_cpu_us_per_request"] = (
                stats["cpu_us_per_request"] + stats["redis_cpu_us_per_request"]
            )
            return stats

        if args.only:
            workloads = {name: workload for name, workload in workloads.items() if args.only in name}
        # The first runs warm up, but not in a smoke run, which only checks that each serves.
        for name in workloads if not args.smoke else ():
            run(name, 1)
        runs: dict[str, list[dict]] = {name: [] for name in workloads}
        for _ in range(rounds):
            if (
                args.smoke
            ):  # the workloads of different servers at once: a smoke run only shows that each serves
                for batch in one_per_server(workloads):
                    found = together(functools.partial(run, name) for name in batch)
                    for name, one in zip(batch, found, strict=True):
                        runs[name].append(one)
                continue
            for name in workloads:
                runs[name].append(run(name))
        for name, name_runs in runs.items():
            problems += [f"{name}: {one}" for one in name_runs if failed(one)]
            results[name] = {
                key: median_of(name_runs, key)
                for key in ("rps", "p50_us", "p99_us", "cpu_us_per_request", "server_cpu_us_per_request")
            }
    finally:
        stop_all(everything)
        redis_process.terminate()
        redis_process.wait(15)
        stack.close()
    if args.only:
        return finish(results, problems, report, args.json)
    results[f"memory store bytes per plant at {large}"] = memory_store_bytes_per_plant(large)
    ratios = {}
    for store in ("memory", "redis"):
        cpu = {name: results[f"{store}: {name}"]["server_cpu_us_per_request"]
               for name in ("create", "page, large", "page, small", "rare page, large")}  # fmt: skip
        ratios[f"{store}: get / create (req/s, large store)"] = ratio(
            results[f"{store}: get, large"]["rps"], results[f"{store}: create"]["rps"]
        )
        ratios[f"{store}: page of 100, large / create (server CPU)"] = ratio(
            cpu["page, large"], cpu["create"]
        )
        ratios[f"{store}: page of 100, large / small (server CPU)"] = ratio(
            cpu["page, large"], cpu["page, small"]
        )
        ratios[f"{store}: 1% tag page / page (server CPU, large)"] = ratio(
            cpu["rare page, large"], cpu["page, large"]
        )
        if f"{store}: create (other tree)" in results:
            ratios[f"{store}: create / other tree's create (req/s)"] = (
                results[f"{store}: create"]["rps"] / results[f"{store}: create (other tree)"]["rps"]
            )
    results["ratios"] = ratios
    return finish(results, problems, report, args.json)


GOALS = {
    "get / create (req/s, large store)": ">= 1.0",
    "page of 100, large / create (server CPU)": "<= 3",
    "page of 100, large / small (server CPU)": "<= 1.2",
    "1% tag page / page (server CPU, large)": "<= 2",
    "create / other tree's create (req/s)": ">= 0.97",
}


def report(results: dict) -> str:
    lines = [
        f"# Readable store: {results['mode']} run, {results['rounds']} rounds of {results['seconds']:.0f} s, "
        f"stores of {results['small']:,} and {results['large']:,} plants",
        "",
        "| workload | req/s | p50 (ms) | p99 (ms) | server CPU per request (µs) |",
        "|---|---|---|---|---|",
    ]
    for name, value in results.items():
        if isinstance(value, dict) and "rps" in value:
            lines.append(
                f"| {name} | {value['rps']:,.0f} | {value['p50_us'] / 1000:.2f} "
                f"| {value['p99_us'] / 1000:.2f} "
                f"| {value['server_cpu_us_per_request']:.0f} |"
            )
    lines += ["", "| ratio | measured | goal |", "|---|---|---|"]
    for name, value in results.get("ratios", {}).items():
        lines.append(f"| {name} | {value:.2f} | {GOALS[name.split(': ', 1)[1]]} |")
    lines += ["", "| bytes per plant | measured |", "|---|---|"]
    for name, value in results.items():
        if "per plant" in name or "per_plant" in name:
            lines.append(f"| {name} | {value:.1f} |")
    lines.append("")
    lines.append("valid" if results["valid"] else "INVALID: " + "; ".join(results["problems"]))
    return "\n".join(lines)
