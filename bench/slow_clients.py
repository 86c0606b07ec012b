"""Slow and hostile clients against one worker, with a probe timing an honest client's answers.

    python -m bench slow-clients                  # memory store, 30 s
    python -m bench slow-clients --store redis    # one Redis (2 request threads)
    python -m bench slow-clients --smoke          # 3 s

The attack, held for the whole run, all from one thread on a selector:
- 50 connections dribbling a request's head, one byte at a time;
- 20 dribbling a body (`Content-Length: 1000`), half with a valid token and half with a bad one;
- 10 pipelining 20 requests for the API page's Swagger bundle and never reading;
- 1,000 idle connections.
A connection the service closes is opened again. The probe sends `GET /healthz` and
`POST /plants`, each on a new connection, every 0.25 s. The goal: every probe answered within
100 ms at p99, none over 1 s. tests/integration/test_slow_clients.py runs the same attack, shorter,
and asserts no figure: every probe answered with the slow clients' read timeout an hour.
"""

from __future__ import annotations

import http.client
import json
import threading
import time

from bench.harness import TOKEN
from bench.harness.load import Probes, attack, attackers
from bench.harness.report import benchmark_parser, save
from bench.harness.servers import RedisServer, gunicorn, scratch


def _probe_once(port: int, token: str, plant_id: int) -> list[tuple[str, float, int]]:
    timings = []
    for method, path, body in (
        ("GET", "/healthz", None),
        ("POST", "/plants", {"id": plant_id, "name": "probe"}),
    ):
        started = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        try:
            conn.request(method, path, body=json.dumps(body) if body else None, headers=headers)
            response = conn.getresponse()
            response.read()
            status = response.status
        except OSError as exc:
            status = -1
            timings.append((f"{method} {path}: {type(exc).__name__}", time.monotonic() - started, status))
            continue
        finally:
            conn.close()
        timings.append((f"{method} {path}", time.monotonic() - started, status))
    return timings


def hold(
    port: int,
    seconds: float,
    token: str = TOKEN,
    idle: int = 1000,
    header_dribblers: int = 50,
    body_dribblers: int = 20,
    pipeliners: int = 10,
    settle: float = 2.0,
) -> Probes:
    """Attack the service on `port` for `seconds` while probing it; the probes' timings."""
    result = Probes()
    stop = threading.Event()
    crowd = attackers(token, header_dribblers, body_dribblers, pipeliners)
    attacking = threading.Thread(target=attack, args=(port, crowd, idle, stop, result), daemon=True)
    attacking.start()
    time.sleep(settle)  # every attacker connected and started
    ends = time.monotonic() + seconds
    plant_id = 0
    while time.monotonic() < ends:
        plant_id += 1
        for label, elapsed, status in _probe_once(port, token, plant_id):
            result.latencies_ms.append(elapsed * 1000)
            if status != 200:
                result.failures.append(f"{label}: {status}")
        time.sleep(0.25)
    stop.set()
    attacking.join(timeout=10)
    return result


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--store", choices=["memory", "redis"], default="memory")
    args = parser.parse_args()
    seconds = args.seconds or (3.0 if args.smoke else 30.0)
    env = {}
    redis = None
    if args.store == "redis":
        redis = RedisServer(scratch("slow-clients"))
        env["PLANTS_STORE_URL"] = redis.unix_url
    server = gunicorn("slow clients", env, args=("--worker-connections", "1000"), pin=False)
    try:
        result = hold(server.start().port, seconds)
    finally:
        server.stop()
        if redis is not None:
            redis.stop()
    summary = {"store": args.store, "seconds": seconds, **result.summary()}
    print(json.dumps(summary, indent=2))
    save(summary, "slow_clients", args.json)
    return 0
