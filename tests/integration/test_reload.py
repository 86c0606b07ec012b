"""A reload (SIGHUP, what `systemctl reload` sends) under systemd's socket activation, while clients
create: no request fails, and every plant acknowledged before, during and after it is still there,
on the default memory store too (app/server/handoff.py)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import call
from tests.servers import TOKEN, RedisServer, SocketActivated

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
CLIENTS = 3

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-socket-activate") is None, reason="needs systemd-socket-activate (systemd)"
)


def service_env(**settings: str) -> dict[str, str]:
    """What a unit's Environment= would give: no inherited PLANTS_* or gunicorn variables."""
    keep = ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV")
    return {
        **{name: os.environ[name] for name in keep if name in os.environ},
        "PLANTS_API_TOKENS": TOKEN,
        **settings,
    }


def creator(
    port: int, first: int, acknowledged: list[int], failures: list[str], stop: threading.Event
) -> None:
    """One plant per connection, as a client without a pool does; anything but a 200 is a failure."""
    plant_id = first
    while not stop.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("POST", "/plants", body=json.dumps({"id": plant_id, "name": "Fern"}), headers=AUTH)
            response = conn.getresponse()
            body = response.read()
            if response.status == 200:
                acknowledged.append(plant_id)
            else:
                failures.append(f"{plant_id}: {response.status} {body[:200]!r}")
        except OSError as exc:
            failures.append(f"{plant_id}: {exc!r}")
        finally:
            conn.close()
        plant_id += CLIENTS


def worker_pids(master: int) -> set[str]:
    return set(Path(f"/proc/{master}/task/{master}/children").read_text().split())


def reload_under_load(server: SocketActivated, reloads: int = 2) -> list[int]:
    """SIGHUP `reloads` times while CLIENTS clients create; the acknowledged ids."""
    acknowledged: list[int] = []
    failures: list[str] = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=creator, args=(server.port, first, acknowledged, failures, stop))
        for first in range(1, CLIENTS + 1)
    ]
    for thread in threads:
        thread.start()
    try:
        for _ in range(reloads):
            time.sleep(0.5)
            before, count = worker_pids(server.process.pid), len(acknowledged)
            server.process.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 60
            # Reloaded: a new worker alone, and serving creates again.
            while not (worker_pids(server.process.pid) - before and len(acknowledged) > count + 20):
                assert time.monotonic() < deadline, server.output()[-3000:]
                time.sleep(0.05)
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert failures == [], server.output()[-3000:]
    assert acknowledged  # and some after each reload (the loop above waits for them)
    return acknowledged


def assert_all_readable(server: SocketActivated, acknowledged: list[int]) -> None:
    conn = server.connection()
    missing = []
    for plant_id in acknowledged:
        conn.request("GET", f"/plants/{plant_id}", headers=AUTH)
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            missing.append((plant_id, response.status))
    conn.close()
    assert missing == []


def gunicorn_command() -> list[str]:
    return [sys.executable, "-m", "gunicorn", "-c", "python:app.server.gunicorn_conf"]


def test_a_reload_on_the_memory_store_fails_nothing_and_keeps_every_plant(tmp_path):
    server = SocketActivated(gunicorn_command(), service_env(), cwd=tmp_path)
    try:
        hook = {"url": "http://no-such-host.invalid/hook"}
        status, _, body = call(server.connection(), "POST", "/webhooks", hook, AUTH)
        assert status == 201, body
        endpoint = json.loads(body)["id"]
        for plant_id in (-3, -2, -1):
            assert (
                call(server.connection(), "POST", "/plants", {"id": plant_id, "name": "Moss"}, AUTH)[0] == 200
            )
        status, _, body = call(server.connection(), "GET", "/plants?limit=2", headers=AUTH)
        cursor = json.loads(body)["next"]
        acknowledged = reload_under_load(server)
        assert_all_readable(server, acknowledged)
        # The webhook endpoints went over too, and a cursor made before is still good.
        assert call(server.connection(), "GET", f"/webhooks/{endpoint}", headers=AUTH)[0] == 200
        status, _, body = call(server.connection(), "GET", f"/plants?limit=1&after={cursor}", headers=AUTH)
        assert (status, json.loads(body)["plants"]) == (200, [{"id": -1, "name": "Moss"}])
        # The feed went over with the plants: one created event per plant, from the first.
        status, _, body = call(server.connection(), "GET", "/events?limit=1000", headers=AUTH)
        assert status == 200
        events = json.loads(body)["events"]
        assert [event["type"] for event in events] == ["plant.created"] * min(1000, len(acknowledged) + 3)
        assert {event["plant"]["id"] for event in events} <= {*acknowledged, -3, -2, -1}
    finally:
        server.stop()
    assert "took over" in server.output()


def test_a_reload_on_redis_keeps_gunicorns_overlap_and_fails_nothing(tmp_path):
    redis = RedisServer(tmp_path)
    server = SocketActivated(
        gunicorn_command(), service_env(PLANTS_STORE_URL=redis.url, WEB_CONCURRENCY="2"), cwd=tmp_path
    )
    try:
        acknowledged = reload_under_load(server, reloads=1)
        assert_all_readable(server, acknowledged)
    finally:
        server.stop()
        redis.stop()
