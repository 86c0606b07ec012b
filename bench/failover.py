"""Acknowledged creates a Redis Cluster failover loses, with and without PLANTS_STORE_MIN_REPLICAS.

    python -m bench failover            # 3 runs of each scenario (a few minutes)
    python -m bench failover --smoke    # 1 run of each

Each run starts a fresh cluster of the tests' own (3 primaries, a replica each, no persistence, a
1 s cluster-node-timeout) and gunicorn with 2 workers, sends creates of new ids from 4 threads,
then fails one primary:

- "kill -9": the primary is killed; its replica is promoted.
- "replica cut off, then kill -9": the replica is stopped (SIGSTOP) for 1.5 s, so the replication
  stream stops reaching it, as in a network partition (the kernel's socket buffer still takes
  the first bytes); then the primary is killed, the replica resumed and promoted.

Once the cluster is whole again (the killed node rejoins as a replica), every create that was
answered 200 is read back through the store; the ones not found were lost.
"""

from __future__ import annotations

import signal
import time

from bench.harness.report import benchmark_parser, finish, validity
from bench.harness.servers import RedisClusterServers, scratch
from tests.conftest import cluster_settings
from tests.load import SHORT_TIMEOUTS, CreateLoad, open_store, redis_gunicorn


def one_run(scenario: str, min_replicas: int) -> dict:
    cluster = RedisClusterServers(scratch("failover"))
    settings = {**cluster_settings(cluster), **SHORT_TIMEOUTS, "PLANTS_STORE_MIN_REPLICAS": str(min_replicas)}
    server = redis_gunicorn(settings)
    load = CreateLoad(server.port, limit=10**9)
    try:
        load.wait_for(500)
        victim = cluster.primaries()[0]
        replica = cluster.replica_of(victim)
        if scenario == "replica cut off, then kill -9":
            replica.signal(signal.SIGSTOP)
            time.sleep(1.5)
        victim.kill()
        replica.signal(signal.SIGCONT)
        deadline = time.monotonic() + 30
        while not replica.command("ROLE").startswith("master"):
            assert time.monotonic() < deadline, "no failover"
            time.sleep(0.05)
        load.wait_for(200)
    finally:
        answers = load.stop()
        server.stop()
    victim.start()
    cluster.wait_until_healthy()
    store = open_store(settings)
    acknowledged = [plant_id for plant_id, status, _, _ in answers if status == 200]
    lost = sum(1 for plant_id in acknowledged if store.get(plant_id) is None)
    store.close()
    cluster.stop()
    statuses: dict[int, int] = {}
    for _, status, _, _ in answers:
        statuses[status] = statuses.get(status, 0) + 1
    return {"acknowledged": len(acknowledged), "lost": lost, "statuses": statuses}


def main() -> int:
    parser = benchmark_parser(__doc__)
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.smoke else 3)
    results: dict = {"rounds": rounds, "runs": {}}
    problems: list[str] = []
    for scenario in ("kill -9", "replica cut off, then kill -9"):
        for min_replicas in (0, 1):
            name = f"{scenario}, PLANTS_STORE_MIN_REPLICAS={min_replicas}"
            results["runs"][name] = runs = [one_run(scenario, min_replicas) for _ in range(rounds)]
            for run in runs:
                if set(run["statuses"]) - {200, 503}:
                    problems.append(f"{name}: {run['statuses']}")
                if min_replicas and run["lost"]:
                    problems.append(f"{name}: lost {run['lost']} acknowledged creates")
    return finish(results, problems, report, args.json)


def report(results: dict) -> str:
    rows = [
        f"| {name} | {', '.join(str(run['lost']) for run in runs)} "
        f"| {', '.join(str(run['acknowledged']) for run in runs)} "
        f"| {', '.join(str(run['statuses'].get(503, 0)) for run in runs)} |"
        for name, runs in results["runs"].items()
    ]
    return "\n".join(
        [
            f"Versions: {results['versions']}",
            f"{results['rounds']} run(s) per scenario; each: 3+3 cluster on loopback, gunicorn 2 workers, "
            "4 client threads.",
            "",
            "| scenario | acknowledged creates lost, per run | acknowledged | 503 answers |",
            "|---|---|---|---|",
            *rows,
            "",
            validity(results, "VALID: only 200 and 503, and nothing lost with PLANTS_STORE_MIN_REPLICAS=1."),
        ]
    )
