"""A Redis Cluster partitioned for real, under writers: what is acknowledged, refused and lost.

    python -m bench partitions            # 60 s per fault, each twice from scratch (about 10 minutes)
    python -m bench partitions --smoke    # 20 s per fault, once (or python -m bench.partitions)

Needs root (network namespaces and tc). Each run starts from scratch a cluster of 3 primaries
with --replicas each, every node in a network namespace of its own on a bridge (tests/netns.py,
addresses in 198.18.0.0/24, an `unreachable` guard route in the root namespace), with
--node-timeout, and gunicorn with 2 workers, PLANTS_STORE_MIN_REPLICAS=--min-replicas and the
1 s store timeout. Four writers PUT their plants in turn, every name unique (tests/partition_run.py).
After a third of the run one primary suffers one fault for --fault-seconds:

- link down: its link is down (the kernel fails sends at once);
- packets dropped: every packet to or from it is dropped (TCP queues and retransmits);
- primary-replica dropped: the packets between it and one replica only;
- flapping: 5 x (1 s dropped, 1 s passing).

Afterwards every plant and the whole change feed are read back. "Acknowledged then lost" counts
the writes answered 200 or 201 that the plant no longer reflects; the feed must hold each
acknowledged write once, in order. "Longest a shard took no write" is the longest time between
two acknowledged writes of one shard's plants (or the last one and the end). Results go to stdout
as Markdown and to bench/results/partitions-TIME.json (or --json).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench.harness.report import benchmark_parser, finish, validity
from tests import netns, partition_run
from tests.load import redis_gunicorn

PREFIX = "bench-partitions"
FOLLOWED = "faulted shard's first write after its replica's promotion s"


def one_run(fault: str, args: argparse.Namespace, seconds: float) -> dict:
    """A fresh cluster and gunicorn, `fault` after a third of `seconds`; the phase's figures."""
    directory = Path(tempfile.mkdtemp(prefix="bench-partitions-"))
    cluster = netns.NamespacedCluster(
        directory, primaries=3, replicas=args.replicas, node_timeout_ms=args.node_timeout
    )
    try:
        server = redis_gunicorn(
            {
                "PLANTS_STORE_URL": cluster.url,
                "PLANTS_STORE_PREFIX": PREFIX,
                "PLANTS_STORE_MIN_REPLICAS": str(args.min_replicas),
            }
        )
        try:
            fault_s = 1.0 if fault == "flapping" else args.fault_seconds
            span = 2 * partition_run.FLAPS * fault_s if fault == "flapping" else fault_s
            phase = partition_run.run_phase(
                cluster,
                server.port,
                PREFIX,
                fault,
                first_plant=1,
                fault_s=fault_s,
                before_s=seconds / 3,
                after_s=max(seconds * 2 / 3 - span, 1.0),
            )
            # Whatever the fault left (a failover's old primary rejoining) settles before the check.
            healthy = True
            try:
                cluster.wait_until_healthy(primaries=3, timeout=60)
            except TimeoutError:
                healthy = False
            result = {**phase.summary(), "healthy again": healthy}
            result["verdict"] = partition_run.verdict(server.port, phase.answers)
            return result
        finally:
            server.stop()
    finally:
        cluster.close()


def cell(runs: list[dict], key: str, unit: str = "") -> str:
    values = [run[key] for run in runs]
    if all(isinstance(v, int) for v in values):
        return " / ".join(f"{v:,}" for v in values)
    return " / ".join("-" if v is None else f"{v}{unit}" for v in values)


def report(results: dict) -> str:
    s = results["settings"]
    lines = [
        f"3 primaries x {s['replicas']} replica(s), cluster-node-timeout {s['node_timeout']} ms, "
        f"PLANTS_STORE_MIN_REPLICAS={s['min_replicas']}, 2 gunicorn workers, 4 writers, "
        f"{s['seconds']:g} s per run, fault {s['fault_seconds']:g} s; runs: {results['rounds']}",
        "",
        "| fault | acknowledged | 503 | longest a shard took no write | acknowledged then lost "
        "| replica promoted after | shard's first write after it |",
        "|---|---|---|---|---|---|---|",
    ]
    for fault, runs in results["runs"].items():
        lost = [run["verdict"]["acknowledged then lost"] for run in runs]
        lines.append(
            f"| {fault} | {cell(runs, 'acknowledged')} | {cell(runs, '503')} "
            f"| {cell(runs, 'longest a shard took no write s', ' s')} | {' / '.join(map(str, lost))} "
            f"| {cell(runs, 'replica promoted after s', ' s')} "
            f"| {cell(runs, FOLLOWED, ' s')} |"
        )
    lines += ["", validity(results, "VALID: no acknowledged write lost, the feed whole and in order, no 500")]
    return "\n".join(lines)


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--replicas", type=int, default=1, help="replicas per primary (default 1)")
    parser.add_argument("--min-replicas", type=int, default=1, help="PLANTS_STORE_MIN_REPLICAS (default 1)")
    parser.add_argument("--node-timeout", type=int, default=3000, help="cluster-node-timeout, ms (3000)")
    parser.add_argument("--fault-seconds", type=float, default=8.0, help="how long a fault lasts (8)")
    faults = list(partition_run.FAULTS)
    parser.add_argument("--faults", nargs="+", choices=faults, default=faults, help="which (all)")
    args = parser.parse_args()
    why_not = netns.available()
    if why_not:
        print(f"network namespaces: {why_not}", file=sys.stderr)
        return 2
    rounds = args.rounds or (1 if args.smoke else 2)
    seconds = args.seconds or (20.0 if args.smoke else 60.0)
    results: dict = {
        "rounds": rounds,
        "settings": {
            "replicas": args.replicas,
            "min_replicas": args.min_replicas,
            "node_timeout": args.node_timeout,
            "seconds": seconds,
            "fault_seconds": args.fault_seconds,
        },
        "runs": {fault: [] for fault in args.faults},
    }
    problems: list[str] = []
    started = time.monotonic()
    for round_ in range(rounds):
        for fault in args.faults:
            run = one_run(fault, args, seconds)
            results["runs"][fault].append(run)
            problems += [f"{fault}, run {round_ + 1}: {name} {n}" for name, n in run["verdict"].items() if n]
    results["elapsed_s"] = round(time.monotonic() - started)
    return finish(results, problems, report, args.json)


if __name__ == "__main__":
    sys.exit(main())
