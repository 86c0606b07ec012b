"""The store on a Redis Cluster against one Redis, per worker, and the shard scaling model.

    python -m bench cluster            # full run (about ten minutes)
    python -m bench cluster --smoke    # about a second per contestant

Servers are the tests' own (tests/servers.py): one redis-server, a cluster of 3 primaries with a
replica each, and for the scaling model a cluster of 6 primaries; every redis-server is moved to
CPU 1 beside wrk, the service's workers run on CPU 0 (two workers: CPUs 0-1). Contestants, in
interleaved rounds:

- 1 worker on one Redis (TCP) and 1 worker on the 3-shard cluster: the per-worker cost of the
  cluster path (worker CPU per create) and each tier's CPU per create;
- 2 workers on one Redis, 2 workers on the 3-shard cluster, and the FastAPI + redis.asyncio peer
  with 2 workers on one Redis: what this 2-core machine gives, reported as the spread of rounds;
- 1 worker on the 6-shard cluster: its Redis CPU per create, for the model.

The model: a create costs W µs of worker CPU and R µs of the primaries' CPU in all, spread
evenly over S shards, so N workers give min(N * 1e6/W, S * 1e6/R) creates/s. (Replicas, on
machines of their own in production, are reported apart.)
"""

from __future__ import annotations

from bench.harness import CLIENT_CPU
from bench.harness.load import failed, wrk
from bench.harness.report import benchmark_parser, finish, show_spread, spread, validity
from bench.harness.servers import (
    GUNICORN,
    RedisClusterServers,
    RedisServer,
    Server,
    cpu_seconds,
    peer,
    pin_to_client_cpu,
    scratch,
)


def nodes_cpu_seconds(nodes: list[RedisServer]) -> float:
    return cpu_seconds(*(node.process.pid for node in nodes if node.process))


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else 3)
    seconds = args.seconds or (1 if args.smoke else 10)
    directory = scratch("cluster")
    for name in ("one", "three", "six"):
        (directory / name).mkdir()
    single = RedisServer(directory / "one", "--appendonly", "no")
    three = RedisClusterServers(directory / "three")
    six = RedisClusterServers(directory / "six", nodes=6, replicas=0)
    # The model counts the primaries: in production each replica has a machine of its own.
    tiers = {"one": [single], "three": three.primaries(), "six": six.nodes}
    replicas = [node for node in three.nodes if node not in tiers["three"]]
    for node in [single, *three.nodes, *six.nodes]:
        pin_to_client_cpu(node.process.pid)  # type: ignore[union-attr]
    common = {"GUNICORN_THREADS": "4", "PLANTS_MAX_PLANTS": str(10**9)}
    urls = {"one": single.url, "three": three.url, "six": six.url}

    def service(name: str, tier: str, workers: int = 1) -> tuple[Server, str]:
        argv = [*GUNICORN, "wsgi:app"]
        if workers > 1:
            argv = ["taskset", "-c", f"0,{CLIENT_CPU}", *argv]
        env = {**common, "PLANTS_STORE_URL": urls[tier], "WEB_CONCURRENCY": str(workers)}
        return Server(name, argv, env), tier

    peer_env = {
        "PLANTS_STORE_URL": urls["one"],
        "PLANTS_STORE_PREFIX": "peer",
        "PLANTS_MAX_PLANTS": str(10**9),
    }
    contestants = {
        "1 worker, one Redis": service("one", "one"),
        "1 worker, 3 shards": service("three", "three"),
        "1 worker, 6 shards": service("six", "six"),
        "2 workers, one Redis": service("one x2", "one", 2),
        "2 workers, 3 shards": service("three x2", "three", 2),
        "peer, 2 workers, one Redis": (peer("peer", True, peer_env, workers=2), "one"),
    }
    results: dict = {"mode": "smoke" if args.smoke else "full", "rounds": rounds, "seconds": seconds,
                     "connections": args.connections}  # fmt: skip
    problems: list[str] = []
    id_base = 0
    try:
        for server, _ in contestants.values():
            server.start()

        def run(server: Server, tier: str, run_seconds: float = seconds) -> dict:
            nonlocal id_base
            id_base += 10**13
            before, replicas_before = nodes_cpu_seconds(tiers[tier]), nodes_cpu_seconds(replicas)
            stats = wrk(server, "create.lua", run_seconds, args.connections, {"BENCH_ID_BASE": str(id_base)})
            requests = max(stats["requests"], 1)
            stats["redis_cpu_us_per_request"] = (nodes_cpu_seconds(tiers[tier]) - before) * 1e6 / requests
            replica_seconds = nodes_cpu_seconds(replicas) - replicas_before if tier == "three" else 0
            stats["replica_cpu_us_per_request"] = replica_seconds * 1e6 / requests
            return stats

        for server, tier in contestants.values():
            run(server, tier, 1)  # warm up: scripts loaded, slot maps read, pools filled
        runs: dict[str, list[dict]] = {name: [] for name in contestants}
        for _ in range(rounds):
            for name, (server, tier) in contestants.items():
                runs[name].append(run(server, tier))
        for name, name_runs in runs.items():
            for one in name_runs:
                if failed(one):
                    problems.append(f"{name}: {one}")
            results[name] = {
                key: spread(name_runs, key)
                for key in ("rps", "p99_us", "cpu_us_per_request", "redis_cpu_us_per_request",
                            "replica_cpu_us_per_request")
            }  # fmt: skip
    finally:
        for server, _ in contestants.values():
            server.stop()
        for cluster in (three, six):
            cluster.stop()
        single.stop()

    def median(name: str, key: str) -> float:
        return results[name][key]["median"]

    worker_us = median("1 worker, one Redis", "cpu_us_per_request")
    cluster_worker_us = median("1 worker, 3 shards", "cpu_us_per_request")
    results["ratios"] = {
        "cluster_per_worker_cpu": worker_us / cluster_worker_us,
        "cluster_per_worker_rps": median("1 worker, 3 shards", "rps") / median("1 worker, one Redis", "rps"),
        "two_workers_cluster_to_one_redis": median("2 workers, 3 shards", "rps")
        / median("2 workers, one Redis", "rps"),
        "two_workers_one_redis_to_peer": median("2 workers, one Redis", "rps")
        / median("peer, 2 workers, one Redis", "rps"),
    }
    model = {}
    for shards, name in ((1, "1 worker, one Redis"), (3, "1 worker, 3 shards"), (6, "1 worker, 6 shards")):
        redis_us = median(name, "redis_cpu_us_per_request")
        worker = median(name, "cpu_us_per_request")
        tier_rate = shards * 1e6 / redis_us
        model[shards] = {
            "worker_cpu_us": worker,
            "redis_cpu_us_in_all": redis_us,
            "redis_cpu_us_per_shard": redis_us / shards,
            "tier_rate": tier_rate,
            "workers_to_saturate": tier_rate / (1e6 / worker),
        }
    results["model"] = model
    return finish(results, problems, report, args.json)


def report(results: dict) -> str:
    ratios, model = results["ratios"], results["model"]
    names = [name for name in results if "worker" in name and isinstance(results[name], dict)]
    rows = []
    for name in names:
        row = results[name]
        rows.append(
            f"| {name} | {show_spread(row['rps'], ',.0f')} "
            f"| {row['p99_us']['median'] / 1000:.2f} ms | {row['cpu_us_per_request']['median']:.0f} µs "
            f"| {row['redis_cpu_us_per_request']['median']:.0f} µs "
            f"| {row['replica_cpu_us_per_request']['median']:.0f} µs |"
        )
    return "\n".join(
        [
            f"Versions: {results['versions']}",
            f"Mode: {results['mode']}; {results['rounds']} interleaved rounds of {results['seconds']:g} s, "
            f"wrk -t1 -c{results['connections']}; workers on CPU 0 (2 workers: CPUs 0-1), wrk and every "
            f"redis-server on CPU {CLIENT_CPU}; median (min to max).",
            "",
            "| contestant | creates/s | p99 | worker CPU / create | primaries' CPU / create, all shards "
            "| replicas' CPU / create |",
            "|---|---:|---:|---:|---:|---:|",
            *rows,
            "",
            "| ratio | value | goal |",
            "|---|---:|---:|",
            f"| per worker, cluster path / one Redis, by worker CPU per create "
            f"| {ratios['cluster_per_worker_cpu']:.2f} | ≥ 0.90 |",
            f"| per worker, cluster path / one Redis, by creates/s "
            f"| {ratios['cluster_per_worker_rps']:.2f} | |",
            f"| 2 workers: 3 shards / one Redis | {ratios['two_workers_cluster_to_one_redis']:.2f} | |",
            f"| 2 workers, one Redis / FastAPI + redis.asyncio peer, 2 workers "
            f"| {ratios['two_workers_one_redis_to_peer']:.2f} | |",
            "",
            "| shards | worker CPU / create | primaries' CPU / create (all) | per shard | tier's creates/s "
            "| workers to saturate it |",
            "|---:|---:|---:|---:|---:|---:|",
            *(
                f"| {shards} | {m['worker_cpu_us']:.0f} µs | {m['redis_cpu_us_in_all']:.0f} µs "
                f"| {m['redis_cpu_us_per_shard']:.0f} µs | {m['tier_rate']:,.0f} "
                f"| {m['workers_to_saturate']:.1f} |"
                for shards, m in model.items()
            ),
            "",
            validity(results),
        ]
    )
