"""Benchmark: what webhooks cost. How fast one deliverer sends to one fast local receiver, with its
connection kept alive and without, what each delivery costs the deliverer's process and the store
(round trips, and redis-server's CPU), and what registered endpoints cost a create.

    python -m bench webhooks            # 3 rounds of 5,000 deliveries each way; creates: 3 rounds of 5 s
    python -m bench webhooks --smoke    # 1 round of 500 deliveries and 1 s rounds; what CI runs

The deliveries: a deliverer in this process (as a gunicorn worker's thread runs it) on a real
redis-server, to a receiver in its own process that answers 204 at once, side by side in
interleaved rounds: a new connection per attempt (keep-alive off) and the endpoint's connection
kept alive (the default). The deliverer's CPU is this process's while it drains. Every store call
the deliverer makes is counted, by kind.

The creates, side by side: one gunicorn worker on the same Redis (CPU 0, wrk on CPU 1), with no
endpoint, then with 10 endpoints registered whose deliveries run in `python -m app.webhooks` (CPU
1, as an operator who runs the deliverer apart would), then with 10 endpoints delivered by the
worker itself (the default). A create's own instructions with 10 endpoints are
bench/instructions.py's `create-hooked`.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from app import create_app
from app.extension import plants_state
from app.webhooks import Deliverer, user_agent
from bench.harness import CLIENT_CPU, ROOT, TOKEN
from bench.harness.load import wrk_beside_redis
from bench.harness.receiver import start_receiver
from bench.harness.report import benchmark_parser, finish, show_spread, spread
from bench.harness.servers import Server, cpu_seconds, free_port, start_redis

HEADERS = {"Authorization": f"Bearer {TOKEN}"}
ENDPOINTS = 10


class Counted:
    """Wraps an object and counts the calls of its methods, by name."""

    def __init__(self, inner: object, counts: collections.Counter) -> None:
        self._inner, self._counts = inner, counts

    def __getattr__(self, name: str) -> object:
        value = getattr(self._inner, name)
        if not callable(value):
            return value

        def counted(*args: object, **kwargs: object) -> object:
            self._counts[name] += 1
            return value(*args, **kwargs)

        return counted


def deliveries(sock: Path, events: int, *, keep_alive: bool) -> dict:
    """One deliverer, one receiver, `events` events waiting: the rate, the deliverer's CPU and the
    store's cost."""
    port = free_port()
    receiver = start_receiver(port)
    settings = {
        "PLANTS_API_TOKENS": TOKEN,
        "PLANTS_STORE_URL": f"unix://{sock}",
        "PLANTS_STORE_PREFIX": f"bench-{os.getpid()}-{time.monotonic_ns()}",
        "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1",
        "PLANTS_WEBHOOKS_DELIVER": False,
        # A busy machine (other benchmarks beside) must not fail the preload's creates.
        "PLANTS_STORE_TIMEOUT": 10.0,
    }
    try:
        app = create_app(settings)
        client = app.test_client()
        response = client.post("/webhooks", json={"url": f"http://127.0.0.1:{port}/hook"}, headers=HEADERS)
        assert response.status_code == 201, response.get_data()
        state = plants_state(app)
        store = state.store
        for number in range(events):
            store.create(number, f"Fern {number}", None)
        counts: collections.Counter = collections.Counter()
        counted = Counted(store, counts)
        counted.endpoints = Counted(store.endpoints, counts)  # type: ignore[attr-defined]
        deliverer = Deliverer(
            counted,
            dataclasses.replace(state.settings, webhooks_deliver=True),
            user_agent=user_agent(),
            keep_alive=keep_alive,
        )
        redis_pid = int(redis.Redis(unix_socket_path=str(sock)).info("server")["process_id"])
        endpoint = store.endpoints.all()[0]
        now = store.events_now()
        cpu_before, started = cpu_seconds(redis_pid), time.perf_counter()
        own_before = time.process_time()
        deliverer.start()
        # This thread's look every 20 ms is counted in the process's CPU too: one GET of a hash.
        while (current := store.endpoints.get(endpoint.id)) is not None and current.position != now:
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        own_cpu = time.process_time() - own_before
        redis_cpu = cpu_seconds(redis_pid) - cpu_before
        deliverer.stop()
        attempts = store.endpoints.attempts(endpoint.id)
        assert all('"status":204' in attempt.replace(" ", "") for attempt in attempts), attempts[:3]
        # The coordinator's look every 0.1 s (the feed's position, the endpoints) is not per delivery.
        drain = {name: counts[name] for name in ("lease", "renew", "ack", "release", "feed_entries", "get")}
        return {
            "keep_alive": keep_alive,
            "events": events,
            "seconds": elapsed,
            "per_second": events / elapsed,
            "deliverer_cpu_us_per_delivery": own_cpu * 1e6 / events,
            "store_calls": dict(counts),
            "drain_round_trips_per_delivery": sum(drain.values()) / events,
            "acks_per_delivery": counts["ack"] / events,
            "leases_per_delivery": (counts["lease"] + counts["renew"]) / events,
            "redis_cpu_us_per_delivery": redis_cpu * 1e6 / events,
        }
    finally:
        receiver.terminate()
        receiver.wait()


def creates(sock: Path, directory: Path, rounds: int, seconds: float) -> dict:
    """Creates with no endpoint, 10 delivered apart, and 10 delivered by the worker, side by side."""
    redis_pid = int(redis.Redis(unix_socket_path=str(sock)).info("server")["process_id"])
    receiver_port = free_port()
    receiver = start_receiver(receiver_port)
    results: dict[str, list[dict]] = {"none": [], "apart": [], "in-worker": []}
    try:
        for round_number in range(rounds):
            for kind in results:
                prefix = f"bench-{kind}-{round_number}-{time.monotonic_ns()}"
                env = {
                    "PLANTS_STORE_URL": f"unix://{sock}",
                    "PLANTS_STORE_PREFIX": prefix,
                    "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1",
                    "PLANTS_WEBHOOKS_DELIVER": "false" if kind == "apart" else "true",
                    "PLANTS_STORE_TIMEOUT": "10",
                    "GUNICORN_THREADS": "2",
                }
                server = Server(kind, [sys.executable, "-m", "gunicorn"], env=env).start()
                apart = None
                try:
                    if kind != "none":
                        register(server.port, receiver_port)
                    if kind == "apart":
                        apart = subprocess.Popen(
                            ["taskset", "-c", CLIENT_CPU, sys.executable, "-m", "app.webhooks"],
                            cwd=ROOT, env={**os.environ, "PLANTS_API_TOKENS": TOKEN, **env},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        )  # fmt: skip
                    results[kind].append(
                        wrk_beside_redis(server, "create.lua", seconds, 8, {"BENCH_ID_BASE": "0"}, redis_pid)
                    )
                finally:
                    if apart is not None:
                        apart.terminate()
                        apart.wait()
                    server.stop()
    finally:
        receiver.terminate()
        receiver.wait()
    return {
        kind: {key: spread(runs, key) for key in ("rps", "cpu_us_per_request", "redis_cpu_us_per_request")}
        for kind, runs in results.items()
    } | {
        "ratios": {
            kind: sorted(
                run["rps"] / base["rps"] for run, base in zip(results[kind], results["none"], strict=True)
            )
            for kind in ("apart", "in-worker")
        }
    }


def register(port: int, receiver_port: int) -> None:
    import http.client
    import json

    for number in range(ENDPOINTS):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        body = json.dumps({"url": f"http://127.0.0.1:{receiver_port}/hook/{number}"})
        connection.request(
            "POST", "/webhooks", body=body, headers={**HEADERS, "Content-Type": "application/json"}
        )
        response = connection.getresponse()
        response.read()
        assert response.status == 201, response.status
        connection.close()


#: The two ways of sending, side by side: a connection per attempt, and kept alive.
WAYS = {"new connection per attempt": False, "kept alive": True}


def main() -> int:
    parser = benchmark_parser(__doc__)
    args = parser.parse_args()
    events, rounds, seconds = (500, 1, 1.0) if args.smoke else (5000, 3, 5.0)
    rounds, seconds = args.rounds or rounds, args.seconds or seconds
    with tempfile.TemporaryDirectory() as directory:
        process, sock = start_redis(Path(directory))
        try:
            runs: dict[str, list[dict]] = {way: [] for way in WAYS}
            for _ in range(rounds):
                for way, keep_alive in WAYS.items():
                    runs[way].append(deliveries(sock, events, keep_alive=keep_alive))
            results = {
                "deliveries": {way: _deliveries_summary(found) for way, found in runs.items()},
                "creates": creates(sock, Path(directory), rounds, seconds),
            }
        finally:
            process.terminate()
            process.wait()
    problems = [
        f"{way}: a delivery cost the store more than one lease and one acknowledgement"
        for way, found in results["deliveries"].items()
        if found["acks_per_delivery"] > 1.0 or found["leases_per_delivery"] > 1.0
    ]
    return finish(results, problems, report, getattr(args, "json", None))


def _deliveries_summary(runs: list[dict]) -> dict:
    """The rounds' medians (and spread) of one way of sending; the store's counts of its last round."""
    last = runs[-1]
    return {
        "events": last["events"],
        "rounds": len(runs),
        **{
            key: spread(runs, key)
            for key in ("per_second", "deliverer_cpu_us_per_delivery", "redis_cpu_us_per_delivery")
        },
        "store_calls": last["store_calls"],
        "drain_round_trips_per_delivery": last["drain_round_trips_per_delivery"],
        "acks_per_delivery": last["acks_per_delivery"],
        "leases_per_delivery": last["leases_per_delivery"],
    }


def report(results: dict) -> str:
    found = results["deliveries"]
    first = next(iter(found.values()))
    lines = [
        f"Deliveries: {first['events']:,} events to one receiver, {first['rounds']} interleaved rounds"
        " each way (median, min to max):",
        "",
        "| sending | deliveries/s | deliverer CPU / delivery (µs) | redis-server CPU / delivery (µs) |",
        "|---|---:|---:|---:|",
    ]
    for way, row in found.items():
        lines.append(
            f"| {way} | {show_spread(row['per_second'], ',.0f')}"
            f" | {show_spread(row['deliverer_cpu_us_per_delivery'], '.0f')}"
            f" | {show_spread(row['redis_cpu_us_per_delivery'], '.1f')} |"
        )
    kept = found["kept alive"]
    lines += [
        "",
        f"Store round trips per delivery while draining: {kept['drain_round_trips_per_delivery']:.3f}"
        f" (acknowledgements {kept['acks_per_delivery']:.3f}, leases {kept['leases_per_delivery']:.4f}).",
        f"Every store call (kept alive, last round): {kept['store_calls']}.",
        "",
        "| creates | req/s | worker CPU / request (µs) | redis-server CPU / request (µs) |",
        "|---|---:|---:|---:|",
    ]
    for kind, label in (("none", "no endpoint"), ("apart", "10 endpoints, delivered apart"),
                        ("in-worker", "10 endpoints, delivered by the worker")):  # fmt: skip
        row = results["creates"][kind]
        lines.append(
            f"| {label} | {row['rps']['median']:,.0f} | {row['cpu_us_per_request']['median']:.0f}"
            f" | {row['redis_cpu_us_per_request']['median']:.0f} |"
        )
    for kind, ratios in results["creates"]["ratios"].items():
        lines.append(f"\n{kind} / none, per round: {', '.join(f'{ratio:.3f}' for ratio in ratios)}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
