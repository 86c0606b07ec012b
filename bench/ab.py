"""A/B: the working tree against a git ref, side by side on this machine, interleaved round by round,
for every write. Run it for every change to a write path (CONTRIBUTING.md).

    python bench/ab.py                     # against main: 3 rounds of 5 s per workload
    python bench/ab.py --ref HEAD~1 --rounds 5 --seconds 10
    python bench/ab.py --smoke             # a second per workload; what CI runs
    python bench/ab.py --gthread --floor   # also gunicorn's stock gthread worker, and the bare
                                           # Flask floor (bench/floor.py) on each tree's worker

For each tree (the ref checked out in a temporary `git worktree`), the order of the trees turned
each round:
- the worker's req/s through HTTP, one gunicorn worker per store (memory, and Redis on a unix
  socket), pinned to CPU 0 with wrk on CPU 1: the create, and where both trees have them a PUT
  that renames and a merge PATCH;
- Redis's CPU per write with the tree's store driven directly from 16 threads, so that Redis is
  busy (a nearly idle Redis spends most of its CPU waking up): all of it (`INFO cpu`) and the
  script's own (`INFO commandstats`), for creates of sequential and of random ids, a replay, a get,
  pages, a rename and the delete, after a preload of 100,000 plants; and Redis's bytes per plant
  (bench/ab_direct.py).

It prints each figure for both trees and the ratio working tree / ref.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.run import ROOT, SERVER_CPU, TOKEN, Server, benchmark_parser, finish, spread, validity, wrk
from bench.shared_store import start_redis

FIRST = 7 * 10**12
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def preload(server: Server, plants: int) -> bool:
    """POST the plants the changes pick from; whether the tree serves PUT (False: a 405)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    for plant_id in range(FIRST, FIRST + plants):
        body = json.dumps({"id": plant_id, "name": "Plant", "tag": "fern"})
        connection.request("POST", "/plants", body, HEADERS)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"preload answered {response.status}")
    connection.request("PUT", f"/plants/{FIRST}", json.dumps({"name": "Plant", "tag": "fern"}), HEADERS)
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status == 200


def direct(tree: Path, sock: Path, count: int, preload: int) -> dict:
    result = subprocess.run(
        ["taskset", "-c", SERVER_CPU, sys.executable, str(ROOT / "bench" / "ab_direct.py"),
         "--tree", str(tree),
         "--socket", str(sock),
         "--count", str(count), "--preload", str(preload)],
        capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--ref", default="main", help="the git ref to compare with (default main)")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--gthread", action="store_true", help="also the working tree on stock gthread")
    parser.add_argument("--floor", action="store_true", help="also bench/floor.py on each tree's worker")
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else 3)
    seconds = args.seconds or (1 if args.smoke else 5)
    plants = 300 if args.smoke else 5_000
    count = 2_000 if args.smoke else 20_000
    preloaded = 1_000 if args.smoke else 100_000
    directory = Path(tempfile.mkdtemp(prefix="bench-ab-"))
    ref_tree = directory / "ref"
    subprocess.run(["git", "worktree", "add", "--detach", str(ref_tree), args.ref], cwd=ROOT, check=True,
                   capture_output=True)  # fmt: skip
    trees = {"working tree": ROOT, args.ref: ref_tree}
    contestants = [(label, tree, {}) for label, tree in trees.items()]
    if args.gthread:
        contestants.append(("gthread", ROOT, {"GUNICORN_WORKER_CLASS": "gthread"}))
    gunicorn = [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"]
    redis_process, sock = start_redis(directory)
    servers = {}
    for label, tree, env in contestants:
        servers[(label, "memory")] = Server(f"{label} memory", gunicorn, env, cwd=tree)
        on_redis = {**env, "PLANTS_STORE_URL": f"unix://{sock}", "WEB_CONCURRENCY": "1"}
        on_redis["PLANTS_STORE_PREFIX"] = f"ab{len(servers)}"
        servers[(label, "redis")] = Server(f"{label} redis", gunicorn, on_redis, cwd=tree)
        if args.floor:
            floor = [*gunicorn[:-1], "bench.floor:app"]
            servers[(label, "floor")] = Server(f"{label} floor", floor, env, cwd=tree)
    problems: list[str] = []
    runs: dict[str, list[dict]] = {}
    directs: dict[str, list[dict]] = {label: [] for label in trees}
    id_base = 0
    try:
        changes = True
        for (_, store), server in servers.items():
            server.start()
            if store != "floor":  # the floor answers any POST, and nothing else
                changes = preload(server, plants) and changes
        workloads = [("create", "create.lua", {})]
        if changes:
            workloads += [(mode, "changes.lua", {"BENCH_MODE": mode}) for mode in ("put", "patch")]
        for round_number in range(rounds + 1):  # the first round warms up
            # Each round turns the order (A B, then B A), so that neither tree always runs on a
            # Redis the other has just filled and emptied.
            turn = -1 if round_number % 2 else 1
            for (label, store), server in list(servers.items())[::turn]:
                for work, script, env in workloads if store != "floor" else workloads[:1]:
                    id_base += 10**13
                    env = {
                        **env,
                        "BENCH_ID_BASE": str(id_base),
                        "BENCH_FIRST": str(FIRST),
                        "BENCH_COUNT": str(plants),
                    }
                    run = wrk(server, script, 1 if round_number == 0 else seconds, args.connections, env)
                    if run.get("non2xx") or run.get("unexpected") or run["socket_errors"]:
                        problems.append(f"{label} {store}: {work}: {run}")
                    if round_number:
                        runs.setdefault(f"{store}: {work}: {label}", []).append(run)
            if round_number:
                for label, tree in list(trees.items())[::turn]:
                    directs[label].append(direct(tree, sock, count, preloaded))
    finally:
        for server in servers.values():
            server.stop()
        redis_process.terminate()
        redis_process.wait()
        subprocess.run(["git", "worktree", "remove", "--force", str(ref_tree)], cwd=ROOT, check=False)
    results: dict = {"ref": args.ref, "rounds": rounds, "seconds": seconds, "http": {}, "redis": {}}
    for name, name_runs in runs.items():
        results["http"][name] = spread(name_runs, "rps")
    for label, found in directs.items():
        for write in found[0]:
            for key in ("redis_cpu_us", "script_us", "bytes"):
                if all(key in one.get(write, {}) for one in found):
                    results["redis"][f"{write}: {key}: {label}"] = spread([one[write] for one in found], key)
    results["ratios"] = {}
    for section in ("http", "redis"):
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
        f"| figure | working tree | {ref} | ratio |",
        "|---|---:|---:|---:|",
    ]
    for section, unit in (("http", "req/s"), ("redis", "µs per write; bytes per plant")):
        for name, found in results[section].items():
            if name.endswith(": working tree"):
                base = name[: -len(": working tree")]
                other = results[section].get(f"{base}: {ref}")
                ratio = results["ratios"].get(f"{section}: {base}", float("nan"))
                shown = f"{other['median']:.1f}" if other else "-"
                lines.append(
                    f"| {section}: {base} ({unit}) | {found['median']:.1f} | {shown} | {ratio:.3f} |"
                )
                stock = results[section].get(f"{base}: gthread")
                if stock:
                    ratio = results["ratios"].get(f"{section}: {base} (against gthread)", float("nan"))
                    lines.append(
                        f"| {section}: {base} ({unit}), against gthread | {found['median']:.1f} "
                        f"| {stock['median']:.1f} | {ratio:.3f} |"
                    )
    lines += ["", validity(results, "VALID: every answer had its status.")]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
