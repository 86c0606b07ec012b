"""Forwarded client addresses and failed-login budgets: a client past the proxy, and a /48.

    python -m bench forwarded              # 20,000 requests an attack, memory store
    python -m bench forwarded --smoke      # 2,000
    python -m bench forwarded --requests 5000

One worker, PLANTS_TRUSTED_PROXIES=1 (as the Kubernetes manifest sets it) and
PLANTS_AUTH_FAILURE_LIMIT=30/minute; a client that reaches gunicorn directly, on 4 keep-alive
connections, sends bad tokens with:

- `junk`: a random 8 KB `X-Forwarded-For` each (counted as the peer's address);
- `invented`: a random IPv4 or IPv6 address each (each a client of its own, until the worker
  counts 10,000 in the window; then newcomers share one budget).

For each: the answers by status, and the worker's RSS before and after (the goal: at most
+16 MB over ~20,000 requests). Then `per-48`: one bad token from each of 40 /64s of one /48
(the /48's budget is four times the /64's: 120), answers by status. tests/integration/
test_forwarded_addresses.py asserts the behaviour; this measures the memory.
"""

from __future__ import annotations

import base64
import collections
import http.client
import ipaddress
import json
import os
import random
import threading
from collections.abc import Callable

from bench.harness.report import benchmark_parser, save
from bench.harness.servers import gunicorn

CONNECTIONS = 4


def _junk() -> str:
    return base64.b64encode(os.urandom(6000)).decode()  # 8,000 characters


def _invented() -> str:
    if random.random() < 0.5:
        return str(ipaddress.IPv4Address(random.getrandbits(32)))
    return str(ipaddress.IPv6Address(random.getrandbits(128)))


def _flood(port: int, requests: int, forwarded: Callable[[], str]) -> collections.Counter[int]:
    """`requests` bad-token GETs over CONNECTIONS keep-alive connections; the answers by status."""
    statuses: collections.Counter[int] = collections.Counter()
    lock = threading.Lock()

    def client(share: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        mine: collections.Counter[int] = collections.Counter()
        for _ in range(share):
            headers = {"Authorization": "Bearer guess", "X-Forwarded-For": forwarded()}
            try:
                conn.request("GET", "/plants", headers=headers)
                response = conn.getresponse()
                response.read()
                mine[response.status] += 1
            except (OSError, http.client.HTTPException):
                mine[-1] += 1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.close()
        with lock:
            statuses.update(mine)

    threads = [threading.Thread(target=client, args=(requests // CONNECTIONS,)) for _ in range(CONNECTIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def _attack(name: str, requests: int, forwarded: Callable[[], str]) -> dict:
    server = gunicorn(
        name,
        {"PLANTS_AUTH_FAILURE_LIMIT": "30/minute", "PLANTS_TRUSTED_PROXIES": "1", "WEB_CONCURRENCY": "1"},
    ).start()
    try:
        _flood(server.port, 200, lambda: "192.0.2.1")  # warm: every code path taken once
        before = server.worker_rss_bytes()
        statuses = _flood(server.port, requests, forwarded)
        after = server.worker_rss_bytes()
    finally:
        server.stop()
    return {
        "requests": sum(statuses.values()),
        "statuses": {str(status): count for status, count in sorted(statuses.items())},
        "rss_before_mb": round(before / 2**20, 1),
        "rss_after_mb": round(after / 2**20, 1),
        "rss_growth_mb": round((after - before) / 2**20, 1),
    }


def _per_48() -> dict:
    env = {"PLANTS_AUTH_FAILURE_LIMIT": "3/minute", "PLANTS_TRUSTED_PROXIES": "1"}
    server = gunicorn("per-48", env).start()
    try:
        statuses = collections.Counter(_refused(server.port, f"2001:db8:7:{n:x}::1") for n in range(40))
    finally:
        server.stop()
    answers = {str(status): count for status, count in sorted(statuses.items())}
    return {"per_64": "3/minute", "per_48": "12/minute", "statuses": answers}


def _refused(port: int, forwarded: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Authorization": "Bearer guess", "X-Forwarded-For": forwarded}
        conn.request("GET", "/plants", headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def main() -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--requests", type=int, default=None, help="requests an attack (20,000)")
    args = parser.parse_args()
    requests = args.requests or (2_000 if args.smoke else 20_000)
    results = {
        "junk": _attack("forwarded junk", requests, _junk),
        "invented": _attack("invented addresses", requests, _invented),
        "per-48": _per_48(),
    }
    print(json.dumps(results, indent=2))
    save(results, "forwarded", args.json)
    return 0
