"""A/B: the working tree against a git revision, every write, side by side in interleaved rounds.

Run it for every change to a write path (CONTRIBUTING.md).

    python -m bench ab                     # against main: 3 rounds of 5 s per workload
    python -m bench ab --ref HEAD~1 --rounds 5 --seconds 10
    python -m bench ab --smoke             # a second per workload
    python -m bench ab --gthread --floor   # also gunicorn's stock gthread worker, and the bare
                                           # Flask floor (bench/apps/floor.py) on each tree's worker

For each tree (the ref checked out in a temporary `git worktree`), the order of the trees turned
each round:
- the worker's req/s and its CPU per request (/proc: what a busy machine moves least), each as
  the median of the rounds with the lowest and highest, through HTTP, one gunicorn worker per
  store (memory, and Redis on a unix socket), pinned to CPU 0 with wrk on CPU 1: the create,
  and where both trees have them a PUT that renames and a merge PATCH;
- Redis's CPU per write with the tree's store driven directly from 16 threads, so that Redis is
  busy (a nearly idle Redis spends most of its CPU waking up): all of it (`INFO cpu`) and the
  script's own (`INFO commandstats`), for creates of sequential and of random ids, a replay, a get,
  pages, a rename and the delete, after a preload of 100,000 plants; and Redis's bytes per plant
  (bench/harness/direct.py).

It prints each figure for both trees and the ratio working tree / ref.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
from pathlib import Path

from bench.harness import BENCH, ROOT, SERVER_CPU
from bench.harness.load import by_work, failed, put_plants, wrk
from bench.harness.report import benchmark_parser, finish, show_spread, spread, validity
from bench.harness.servers import PYTHON, floor, gunicorn, scratch, start_redis, stop_all, worktree

FIRST = 7 * 10**12


def direct(tree: Path, sock: Path, count: int, preload: int) -> dict:
    """Redis's CPU per operation with the store of `tree` driven directly (its `app` first on the path)."""
    result = subprocess.run(
        ["taskset", "-c", SERVER_CPU, PYTHON, str(BENCH / "harness" / "direct.py"), "--socket", str(sock),
         "--count", str(count), "--preload", str(preload)],
        capture_output=True, text=True, check=False, timeout=600, env={**os.environ, "PYTHONPATH": str(tree)},
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"{tree}: the store driven directly failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--ref", default="main", help="the git ref to compare with (default main)")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--gthread", action="store_true", help="also the working tree on stock gthread")
    parser.add_argument("--floor", action="store_true", help="also bench/apps/floor.py on each tree's worker")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else 3)
    seconds = args.seconds or (1 if args.smoke else 5)
    plants = 300 if args.smoke else 5_000
    # A smoke run's direct drive only has to report each figure: 500 writes of each kind on 300
    # plants (two pages' worth) take 1.7 s a tree where 2,000 on 1,000 took 3.5.
    count = 500 if args.smoke else 20_000
    preloaded = 300 if args.smoke else 100_000
    stack = contextlib.ExitStack()
    ref_tree = stack.enter_context(worktree(args.ref))
    trees = {"working tree": ROOT, args.ref: ref_tree}
    contestants = [(label, tree, {}) for label, tree in trees.items()]
    if args.gthread:
        contestants.append(("gthread", ROOT, {"GUNICORN_WORKER_CLASS": "gthread"}))
    redis_process, sock = start_redis(scratch("ab"))
    servers = {}
    for label, tree, env in contestants:
        servers[(label, "memory")] = gunicorn(f"{label} memory", env, cwd=tree)
        on_redis = {**env, "PLANTS_STORE_URL": f"unix://{sock}", "WEB_CONCURRENCY": "1"}
        on_redis["PLANTS_STORE_PREFIX"] = f"ab{len(servers)}"
        servers[(label, "redis")] = gunicorn(f"{label} redis", on_redis, cwd=tree)
        if args.floor:
            servers[(label, "floor")] = floor(f"{label} floor", env, cwd=tree)
    problems: list[str] = []
    runs: dict[str, list[dict]] = {}
    directs: dict[str, list[dict]] = {label: [] for label in trees}
    id_base = 0
    try:
        for (_, store), server in servers.items():
            server.start()
            if store != "floor":  # the floor answers any POST, and nothing else
                put_plants(server.port, FIRST, plants)
        workloads = [("create", "create.lua", {})]
        workloads += [(mode, "changes.lua", {"BENCH_MODE": mode}) for mode in ("put", "patch")]
        # The first round warms up, but not in a smoke run, which only checks that each serves.
        for round_number in range(int(args.smoke), rounds + 1):
            # Each round turns the order (A B, then B A), so that neither tree always runs on a
            # Redis the other has just filled and emptied.
            turn = -1 if round_number % 2 else 1
            calls, named = {}, {}
            for (label, store), server in list(servers.items())[::turn]:
                named[f"{label} {store}"] = (label, store)
                for work, script, env in workloads if store != "floor" else workloads[:1]:
                    id_base += 10**13
                    env = {
                        **env,
                        "BENCH_ID_BASE": str(id_base),
                        "BENCH_FIRST": str(FIRST),
                        "BENCH_COUNT": str(plants),
                    }
                    run_seconds = 1 if round_number == 0 else seconds
                    calls[(f"{label} {store}", work)] = functools.partial(
                        wrk, server, script, run_seconds, args.connections, env
                    )
            # A smoke run has each workload on every server at once: it only shows that each serves.
            for (server_name, work), run in by_work(calls, args.smoke).items():
                label, store = named[server_name]
                if failed(run):
                    problems.append(f"{label} {store}: {work}: {run}")
                if round_number:
                    runs.setdefault(f"{store}: {work}: {label}", []).append(run)
            if round_number:
                for label, tree in list(trees.items())[::turn]:
                    directs[label].append(direct(tree, sock, count, preloaded))
    finally:
        stop_all(servers.values())
        redis_process.terminate()
        redis_process.wait()
        stack.close()
    results: dict = {"ref": args.ref, "rounds": rounds, "seconds": seconds}
    results |= {"http": {}, "cpu": {}, "redis": {}}
    for name, name_runs in runs.items():
        results["http"][name] = spread(name_runs, "rps")
        # The worker's CPU per request (/proc): what a busy machine's req/s hide.
        results["cpu"][name] = spread(name_runs, "cpu_us_per_request")
    for label, found in directs.items():
        for write in found[0]:
            for key in ("redis_cpu_us", "script_us", "bytes"):
                if all(key in one.get(write, {}) for one in found):
                    results["redis"][f"{write}: {key}: {label}"] = spread([one[write] for one in found], key)
    results["ratios"] = {}
    for section in ("http", "cpu", "redis"):
        for name in list(results[section]):
            if name.endswith(": working tree"):
                for other_label, suffix in ((args.ref, ""), ("gthread", " (against gthread)")):
                    other = name.replace(": working tree", f": {other_label}")
                    if other in results[section] and results[section][other]["median"]:
                        results["ratios"][f"{section}: {name[: -len(': working tree')]}{suffix}"] = (
                            results[section][name]["median"] / results[section][other]["median"]
                        )
    return finish(results, problems, report, args.json)


def report(results: dict) -> str:
    ref = results["ref"]
    lines = [
        f"Working tree against {ref}: {results['rounds']} interleaved rounds "
        f"of {results['seconds']:g} s; medians.",
        "",
        f"| figure | working tree (lowest to highest round) | {ref} | ratio of medians |",
        "|---|---:|---:|---:|",
    ]
    units = (("http", "req/s"), ("cpu", "worker CPU µs/request"), ("redis", "µs per write; bytes per plant"))
    for section, unit in units:
        for name, found in results[section].items():
            if name.endswith(": working tree"):
                base = name[: -len(": working tree")]
                other = results[section].get(f"{base}: {ref}")
                ratio = results["ratios"].get(f"{section}: {base}", float("nan"))
                shown = show_spread(other) if other else "-"
                lines.append(f"| {section}: {base} ({unit}) | {show_spread(found)} | {shown} | {ratio:.3f} |")
                stock = results[section].get(f"{base}: gthread")
                if stock:
                    ratio = results["ratios"].get(f"{section}: {base} (against gthread)", float("nan"))
                    lines.append(
                        f"| {section}: {base} ({unit}), against gthread | {found['median']:.1f} "
                        f"| {stock['median']:.1f} | {ratio:.3f} |"
                    )
    lines += ["", validity(results, "VALID: every answer had its status.")]
    return "\n".join(lines)
