"""The four attacks on the worker's HTTP framing, as an adversary reproduced them, held against
a real gunicorn while an honest client probes `/healthz` (bench/attacks.py): one default worker
on memory, and two workers on Redis.

Each must leave the probe answered before the attackers' deadlines (all probes but one under 1 s,
half the 2 s read timeout a held thread would wait out, and none waiting one out), with no failed
probe, and the workers idle (under a quarter of a core, where a turning loop takes a whole one) in
the second after the attack ends: no connection the attack left behind keeps a loop turning.
These are behaviours with room for a slow machine under load; the figures (100 ms at p99, 0.7% of
a core) are `python -m bench attacks`'s, in bench/README.md.
"""

from __future__ import annotations

import pytest

from bench.attacks import ATTACKS, idle_cpu_share, run
from tests.conftest import redis_settings
from tests.servers import TOKEN, Gunicorn

#: Seconds a worker waits for a request's bytes: what a thread held by an attacker would cost a probe.
READ_TIMEOUT = 2
PROMPT_MS = 500 * READ_TIMEOUT
IDLE_CPU_SHARE = 0.25
SECONDS = 4.0
#: Probed for `SECONDS`, and on (up to three times as long) until this many probes are in.
PROBES = 20


@pytest.fixture(scope="module", params=["memory", "redis"])
def attacked(request):
    env = {"GUNICORN_READ_TIMEOUT": str(READ_TIMEOUT), "PLANTS_API_TOKENS": TOKEN}
    workers = 1
    if request.param == "redis":
        workers = 2
        env.update(redis_settings(request.getfixturevalue("redis_server")), WEB_CONCURRENCY="2")
    server = Gunicorn(env=env)
    yield server, workers
    server.stop()


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_honest_client_is_answered_promptly_and_the_worker_idles_after(attacked, attack):
    server, workers = attacked
    options = {"connections": 1000 * workers} if attack in ("half-open", "dribble") else {}
    outcome = run(attack, server.port, server.process.pid, SECONDS, min_probes=PROBES, **options)
    summary = outcome.summary()
    assert summary["failure_count"] == 0, summary
    assert summary["probes"] >= PROBES, summary
    # One probe of the twenty may meet the loaded machine's stall (1.4 s seen under `-n 3` beside a
    # busy core), never a held thread's read timeout; the rest are prompt.
    assert sorted(outcome.probe.latencies_ms)[-2] < PROMPT_MS, summary
    assert summary["max_ms"] < 1000 * READ_TIMEOUT, summary
    assert outcome.idle_cpu_share < IDLE_CPU_SHARE, summary
    assert "Traceback" not in server.output()


def test_a_thousand_idle_connections_cost_the_workers_no_cpu(attacked):
    server, _ = attacked
    assert idle_cpu_share(server.port, server.process.pid, connections=1000, seconds=2.0) < IDLE_CPU_SHARE
