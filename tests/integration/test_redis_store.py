"""The shared store on a real redis-server: many workers and masters, capacity, faults, durability."""

from __future__ import annotations

import gc
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from app import create_app
from app.extension import plants_state
from app.server.settings_check import checked_settings
from app.store import CreateOutcome, Page, Plant
from app.store.migrate import migrate
from app.store.redis.groups import Groups, encode
from app.store.redis.lua import CREATE, LEAF_SIZE
from tests.conftest import redis_settings, settings_for_store
from tests.helpers import assert_error, call, error_of, walk_pages
from tests.load import (
    AUTH,
    SHORT_TIMEOUTS,
    CreateLoad,
    assert_only_200_and_503,
    create,
    open_store,
    redis_gunicorn,
)
from tests.servers import ROOT, TOKEN, RedisServer, free_port


@pytest.mark.parametrize("shared", ["redis", "cluster"])
def test_two_masters_with_two_workers_each_give_each_id_one_owner(request, shared):
    settings = settings_for_store(request, shared)
    servers = [redis_gunicorn(settings), redis_gunicorn(settings)]
    try:
        ids = range(9000, 9040)
        # Per id: 4 contenders with the same plant (one 200 creates, the others replay it) and
        # 4 with names of their own (409), spread over both masters and their workers.
        jobs = [
            (servers[n % 2].port, {"id": plant_id, "name": "same" if n < 4 else f"own-{n}"})
            for plant_id in ids
            for n in range(8)
        ]
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda job: (job[1], create(*job)), jobs))
        by_id: dict[int, Counter] = {plant_id: Counter() for plant_id in ids}
        for plant, (status, headers, body) in answers:
            by_id[plant["id"]][(status, plant["name"] == "same")] += 1
            if status == 409:
                assert_error(status, headers, body, 409)
        for plant_id, counts in by_id.items():
            # The winner is the first writer: either all 4 "same" got 200 (one created, three
            # replayed) and the 4 others 409, or one "own" won and the 7 others got 409.
            assert counts[(200, True)] + counts[(200, False)] in (1, 4), (plant_id, counts)
            assert sum(counts.values()) == 8
            assert counts[(200, False)] <= 1
            if counts[(200, False)]:
                assert counts[(409, True)] == 4
            else:
                assert counts[(200, True)] == 4
        store = open_store(settings)
        assert len(store) == len(ids)
        for plant_id in ids:
            assert store.get(plant_id) is not None
        store.close()
    finally:
        for server in servers:
            server.stop()


def test_capacity_holds_exactly_across_workers(redis_server):
    settings = redis_settings(redis_server)
    server = redis_gunicorn(settings, PLANTS_MAX_PLANTS="25")
    try:
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda n: create(server.port, {"id": n, "name": "Fern"}), range(60)))
        statuses = Counter(status for status, _, _ in answers)
        assert statuses == {200: 25, 507: 35}
        for status, headers, body in answers:
            if status == 507:
                assert_error(status, headers, body, 507)
        assert len(open_store(settings)) == 25
    finally:
        server.stop()


@pytest.fixture
def own_redis(tmp_path):
    """A redis-server of its own, with the shipped deploy/redis.conf (append-only, fsync always)."""
    server = RedisServer(tmp_path, config_file=ROOT / "deploy" / "redis.conf")
    yield server
    server.stop()


@pytest.mark.parametrize("fault", ["hung", "stopped"])
def test_a_redis_fault_mid_load_is_503_then_recovers(own_redis, fault):
    settings = redis_settings(own_redis)
    server = redis_gunicorn(settings, workers=1, **SHORT_TIMEOUTS)
    load = CreateLoad(server.port)
    try:
        load.wait_for(50)
        if fault == "hung":
            own_redis.signal(signal.SIGSTOP)
        else:
            own_redis.stop()
        during = load.count()
        load.wait_for(20)  # answered while Redis cannot answer
        status, headers, body = call(server.connection(), "GET", "/readyz")
        assert_error(status, headers, body, 503)
        assert headers["Retry-After"] == "1"
        if fault == "hung":
            own_redis.signal(signal.SIGCONT)
        else:
            own_redis.start()
        deadline = time.monotonic() + 10
        while call(server.connection(), "GET", "/readyz")[0] != 200:
            assert time.monotonic() < deadline, "the service did not become ready again by itself"
            time.sleep(0.05)
        ready_from = load.issued()
        load.wait_for(50)
    finally:
        answers = load.stop()
        server.stop()
    statuses = assert_only_200_and_503(answers)
    assert Counter(status for _, status, _, _ in answers[during : during + 20])[503] >= 1
    # A create in flight when Redis went away may answer 503 late (once its outcome is settled);
    # every create started after /readyz said ready again answers 200.
    after = [(plant_id, status) for plant_id, status, _, _ in answers if plant_id > ready_from]
    assert after, "no create was started after the service was ready again"
    assert all(status == 200 for _, status in after), after
    assert "Traceback" not in server.output()
    assert statuses[200] >= 100


def test_kill_9_loses_no_acknowledged_create_with_appendfsync_always(own_redis):
    assert own_redis.command("CONFIG", "GET", "appendfsync").split() == ["appendfsync", "always"]
    settings = redis_settings(own_redis)
    server = redis_gunicorn(settings, workers=2, **SHORT_TIMEOUTS)
    load = CreateLoad(server.port)
    try:
        load.wait_for(300)
        own_redis.kill()
        load.wait_for(10)
        own_redis.start()  # replays its append-only file
    finally:
        answers = load.stop()
        server.stop()
    assert_only_200_and_503(answers)
    acknowledged = [plant_id for plant_id, status, _, _ in answers if status == 200]
    assert len(acknowledged) >= 300
    store = open_store(settings)
    for plant_id in acknowledged:
        assert store.get(plant_id) == Plant(f"Plant {plant_id}")
    store.close()


def test_a_service_restart_keeps_every_plant(redis_server):
    settings = redis_settings(redis_server)
    server = redis_gunicorn(settings)
    try:
        for plant_id in range(20):
            assert create(server.port, {"id": plant_id, "name": "Fern", "tag": "fern"})[0] == 200
    finally:
        server.stop()
    server = redis_gunicorn(settings)
    try:
        for plant_id in range(20):
            assert create(server.port, {"id": plant_id, "name": "Fern", "tag": "fern"})[0] == 200
            assert_error(*create(server.port, {"id": plant_id, "name": "Other"}), 409)
    finally:
        server.stop()


def test_the_service_starts_while_redis_is_down_and_serves_once_it_is_up(tmp_path):
    redis = RedisServer(tmp_path)
    redis.stop()
    settings = redis_settings(redis)
    server = redis_gunicorn(settings, workers=1)
    try:
        assert_error(*call(server.connection(), "GET", "/readyz"), 503)
        status, headers, body = create(server.port, {"id": 1, "name": "Fern"})
        assert_error(status, headers, body, 503)
        assert headers["Retry-After"] == "1"
        redis.start()
        assert call(server.connection(), "GET", "/readyz")[:1] == (200,)
        assert create(server.port, {"id": 1, "name": "Fern"})[0] == 200
    finally:
        server.stop()
        redis.stop()


#: The ACL rules docs/operations.md gives the service's Redis user.
SERVICE_ACL = ("~*", "&*", "+@all", "-@dangerous", "+info")


def test_a_redis_user_with_the_documented_acl_runs_every_part_of_the_service(tmp_path):
    """The documented rules, with the rate limits, the feed's listener and webhooks on: ready, a
    write and the feed served, and no command of any process or thread refused (Redis's ACL LOG)."""
    redis = RedisServer(tmp_path)
    try:
        redis.command("ACL", "SETUSER", "plants", "on", ">pw", *SERVICE_ACL)
        settings = {
            **redis_settings(redis),
            "PLANTS_STORE_URL": f"redis://plants:pw@127.0.0.1:{redis.port}/0",
            "PLANTS_RATE_LIMIT": "100/second",
            "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1",
        }
        server = redis_gunicorn(settings, workers=1)
        try:
            status, _, body = call(server.connection(), "GET", "/readyz")
            assert (status, json.loads(body)) == (200, {"status": "ok"})
            endpoint = {"url": f"http://127.0.0.1:{free_port()}/hook"}
            assert call(server.connection(), "POST", "/webhooks", endpoint, AUTH)[0] == 201
            assert create(server.port, {"id": 1, "name": "Fern"})[0] == 200
            status, _, body = call(server.connection(), "GET", "/events?wait=1", headers=AUTH)
            types = [event["type"] for event in json.loads(body)["events"]]
            assert (status, types) == (200, ["plant.created"])
            time.sleep(0.5)  # the deliverer's attempt and the listener's reads
        finally:
            server.stop()
        assert redis.command("ACL", "LOG") == ""
    finally:
        redis.stop()


READ_ONLY = (
    "The plant store is a read-only replica, which takes none of this request's writes (a change, or a"
    " rate limit's count): retries meet the same refusal until its operator points the service at the"
    " primary (PLANTS_STORE_URL). Nothing was changed."
)


def test_a_read_only_replica_is_503_saying_no_retry_will_write(redis_server, tmp_path):
    """A replica does not become writable by a retry: the 503 says what it is and who can act,
    not "retry shortly"; its reads are still answered."""
    replica = RedisServer(tmp_path, "--replicaof", "127.0.0.1", str(redis_server.port))
    server = redis_gunicorn(redis_settings(replica), workers=1)
    try:
        status, headers, body = create(server.port, {"id": 1, "name": "Fern"})
        message = assert_error(status, headers, body, 503)["message"]
        assert message == READ_ONLY
        assert headers["Retry-After"] == "60"
        status, _, _ = call(server.connection(), "GET", "/plants", headers=AUTH)
        assert status == 200
    finally:
        server.stop()
        replica.stop()
    said = "is a read-only replica, which takes no write: set PLANTS_STORE_URL to its primary"
    assert said in server.output()


def test_with_rate_limits_a_read_only_replica_refuses_reads_too_saying_why(redis_server, tmp_path):
    """A rate limit's count is a write: with limits on, a read meets the replica's refusal too."""
    replica = RedisServer(tmp_path, "--replicaof", "127.0.0.1", str(redis_server.port))
    try:
        settings = {"PLANTS_API_TOKENS": TOKEN, "PLANTS_RATE_LIMIT": "100/second", **redis_settings(replica)}
        app = create_app(settings)
        answer = app.test_client().get("/plants", headers=AUTH)
        plants_state(app).close()
        assert (answer.status_code, answer.json["message"]) == (503, READ_ONLY)
    finally:
        replica.stop()


def test_redis_out_of_memory_is_507(tmp_path):
    redis = RedisServer(tmp_path, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
    try:
        app = create_app({"PLANTS_API_TOKENS": TOKEN, **redis_settings(redis)})
        client = app.test_client()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        statuses = Counter()
        for plant_id in range(20_000):
            response = client.post("/plants", json={"id": plant_id, "name": "x" * 150}, headers=auth)
            statuses[response.status_code] += 1
            if response.status_code != 200:
                assert response.status_code == 507
                assert response.json["error"] == 507
                break
        assert statuses[507] == 1
        assert statuses[200] > 100
    finally:
        redis.stop()


def _limited_client(redis: RedisServer):
    """A test client of the service on `redis`, with both rate limits on."""
    settings = {
        **redis_settings(redis),
        "PLANTS_RATE_LIMIT": "1000/second",
        "PLANTS_AUTH_FAILURE_LIMIT": "100/minute",
    }
    return create_app({"PLANTS_API_TOKENS": TOKEN, **settings}).test_client()


def test_redis_out_of_memory_with_rate_limits_still_reads_deletes_and_refuses_as_usual(tmp_path):
    """At maxmemory the rate limits' counters cannot be written: each request goes on uncounted
    (it was 503 for every request, reads and the deletes that make room included)."""
    redis = RedisServer(tmp_path, "--maxmemory-policy", "noeviction")
    try:
        client = _limited_client(redis)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for plant_id in (1, 2):
            assert (
                client.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=auth).status_code == 200
            )
        redis.command("CONFIG", "SET", "maxmemory", "1")
        assert client.get("/plants/1", headers=auth).status_code == 200
        assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth).status_code == 200
        full = client.post("/plants", json={"id": 3, "name": "Fern"}, headers=auth)
        assert (full.status_code, full.json["error"]) == (507, 507)
        changed = client.patch("/plants/1", json={"name": "Fir"}, headers=auth)
        assert (changed.status_code, changed.json["error"]) == (507, 507)
        assert "this change" in changed.json["message"]
        assert client.get("/plants/1", headers=auth).json == {"name": "Fern"}
        assert client.delete("/plants/2", headers=auth).status_code == 204
        assert client.get("/plants/1", headers={"Authorization": "Bearer wrong"}).status_code == 401
        redis.command("CONFIG", "SET", "maxmemory", "0")
        response = client.post("/plants", json={"id": 3, "name": "Fern"}, headers=auth)
        assert response.status_code == 200
        assert response.headers["RateLimit-Limit"] == "1000"
    finally:
        redis.stop()


def test_redis_out_of_memory_with_rate_limits_warns_once_not_once_a_request(tmp_path, caplog):
    """Each request that goes on uncounted is counted in one warning a minute: a warning a request,
    from any client, a token or none, doubled the log for as long as Redis stayed full."""
    redis = RedisServer(tmp_path, "--maxmemory-policy", "noeviction")
    try:
        client = _limited_client(redis)
        redis.command("CONFIG", "SET", "maxmemory", "1")
        with caplog.at_level("WARNING", logger="app.auth.rate_limits"):
            for n in range(30):
                token = TOKEN if n % 2 else "wrong"
                assert client.get("/plants/1", headers={"Authorization": f"Bearer {token}"}).status_code in (
                    401,
                    404,
                )
        (warning,) = [
            record.getMessage() for record in caplog.records if "Redis is full" in record.getMessage()
        ]
        assert "1 request(s) went on uncounted" in warning
    finally:
        redis.stop()


def test_redis_out_of_memory_still_reads_the_feed_before_its_cursor_key_exists(tmp_path):
    """The feed's cursors are signed with a secret kept in Redis, made by the first read that needs
    it. At maxmemory Redis refuses to store it: the feed is read all the same (it was 507), its
    cursors followed, and once Redis has room the secret this process used is the one kept, so
    the cursors it handed out stay good."""
    redis = RedisServer(tmp_path, "--maxmemory-policy", "noeviction")
    try:
        settings = {"PLANTS_API_TOKENS": TOKEN, **redis_settings(redis)}
        client = create_app(settings).test_client()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth).status_code == 200
        redis.command("CONFIG", "SET", "maxmemory", "1")
        first = client.get("/events?limit=1", headers=auth)
        assert first.status_code == 200, first.json
        assert [event["plant"]["id"] for event in first.json["events"]] == [1]
        following = client.get(f"/events?after={first.json['next']}", headers=auth)
        assert (following.status_code, following.json["events"]) == (200, [])
        ticket = client.post("/events/tickets", headers=auth)
        assert ticket.status_code == 200, ticket.json
        full = client.post("/plants", json={"id": 2, "name": "Fir"}, headers=auth)
        assert (full.status_code, full.json["error"]) == (507, 507)
        redis.command("CONFIG", "SET", "maxmemory", "0")
        assert client.post("/plants", json={"id": 2, "name": "Fir"}, headers=auth).status_code == 200
        later = client.get(f"/events?after={first.json['next']}", headers=auth)
        assert later.status_code == 200, later.json
        assert [event["plant"]["id"] for event in later.json["events"]] == [2]
        # Another process (a new app) finds that secret in Redis: the cursor is good there too.
        other = create_app(settings).test_client()
        assert other.get(f"/events?after={first.json['next']}", headers=auth).json == later.json
    finally:
        redis.stop()


def test_every_worker_of_a_started_service_signs_with_one_cursor_secret_at_redis_maxmemory(tmp_path):
    """The start (gunicorn's master) makes the cursor secret while Redis has room: at maxmemory
    later, each worker still reads that one secret, and a page's cursor, a feed's cursor and a watch
    ticket made by one worker are taken by another (each signed its own, and refused the others')."""
    redis = RedisServer(tmp_path, "--maxmemory-policy", "noeviction")
    apps = []
    try:
        settings = {"PLANTS_API_TOKENS": TOKEN, **redis_settings(redis)}
        checked_settings(settings)  # as the master does before it forks the workers
        apps += [create_app(settings) for _ in range(2)]
        first, second = (app.test_client() for app in apps)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for plant_id in (1, 2):
            assert (
                first.post("/plants", json={"id": plant_id, "name": "Fern"}, headers=auth).status_code == 200
            )
        redis.command("CONFIG", "SET", "maxmemory", "1")
        page = first.get("/plants?limit=1", headers=auth).json["next"]
        following = second.get(f"/plants?limit=1&after={page}", headers=auth)
        assert following.status_code == 200, following.json
        assert [plant["id"] for plant in following.json["plants"]] == [2]
        feed = first.get("/events?limit=1", headers=auth).json["next"]
        assert second.get(f"/events?after={feed}", headers=auth).status_code == 200
        ticket = first.post("/events/tickets", headers=auth).json["ticket"]
        assert second.get(f"/events?after=now&wait=1&ticket={ticket}").status_code == 200
    finally:
        for app in apps:
            plants_state(app).close()  # the long-poll's listener ends with its app, before its Redis
        redis.stop()


def test_readiness_at_redis_maxmemory_stays_200_and_says_the_store_is_full(tmp_path):
    """Reads and deletes still work at maxmemory, so the instance stays in its load balancer (every
    instance shares the one full Redis); the body says the store is full, for the operator."""
    redis = RedisServer(tmp_path, "--maxmemory-policy", "noeviction")
    try:
        client = create_app({"PLANTS_API_TOKENS": TOKEN, **redis_settings(redis)}).test_client()
        assert client.get("/readyz").json == {"status": "ok"}
        redis.command("CONFIG", "SET", "maxmemory", "1")
        full = client.get("/readyz")
        assert full.status_code == 200
        assert (full.json["status"], full.json["full"]) == ("degraded", True)
        assert "maxmemory" in full.json["message"]
        assert "507" in full.json["message"]
        redis.command("CONFIG", "SET", "maxmemory", "0")
        assert client.get("/readyz").json == {"status": "ok"}
    finally:
        redis.stop()


def test_readiness_says_when_redis_evicts_the_plants_at_its_maxmemory(tmp_path):
    """With an `allkeys-*` maxmemory-policy Redis drops keys at its maxmemory instead of refusing
    the write: plants answered 200 vanish, and the feed with them, while /readyz said "ok". It
    stays 200 (the policy is the same for every instance) but says so, for the operator."""
    redis = RedisServer(tmp_path, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
    try:
        client = create_app({"PLANTS_API_TOKENS": TOKEN, **redis_settings(redis)}).test_client()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for plant_id in range(3000):
            response = client.post("/plants", json={"id": plant_id, "name": "x" * 150}, headers=auth)
            assert response.status_code == 200
        # Redis evicts sampled keys, not the oldest: some of those answered 200 are gone.
        gone = [n for n in range(0, 3000, 30) if client.get(f"/plants/{n}", headers=auth).status_code == 404]
        assert gone
        evicting = client.get("/readyz")
        assert evicting.status_code == 200
        assert (evicting.json["status"], evicting.json["evicting"]) == ("degraded", "allkeys-lru")
        assert "noeviction" in evicting.json["message"]
        redis.command("CONFIG", "SET", "maxmemory-policy", "noeviction")
        assert "evicting" not in client.get("/readyz").json
    finally:
        redis.stop()


def _migrated(settings: dict[str, str], status: int = 0) -> str:
    """`python -m app.store.migrate` run as the operator runs it, with the service's settings:
    what it said (on stderr when it failed)."""
    env = {**os.environ, **settings, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "app.store.migrate"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == status, result.stderr
    return result.stdout if status == 0 else result.stderr


def _stored_ids(settings: dict[str, str]) -> list[int]:
    """The ids of the plants a single Redis's buckets hold, in order."""
    client = redis.Redis.from_url(settings["PLANTS_STORE_URL"])
    try:
        buckets = client.scan_iter(match="{" + settings["PLANTS_STORE_PREFIX"] + "}:b:*", count=1000)
        return sorted(int(field) for bucket in buckets for field in client.hkeys(bucket))
    finally:
        client.close()


def test_once_redis_keeps_every_key_a_list_missing_its_mark_names_the_migration_not_1_0_0(tmp_path, caplog):
    """Redis evicted keys before its policy was set to noeviction (its INFO counts them), and the
    mark is gone: the 503 still says Redis evicted keys, and the log what to run, not that the
    store was written by 1.0.0; the migration writes the mark again."""
    server = RedisServer(tmp_path, "--maxmemory", "2mb", "--maxmemory-policy", "volatile-lru")
    try:
        settings = redis_settings(server)
        client = create_app({"PLANTS_API_TOKENS": TOKEN, **settings}).test_client()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for plant_id in range(50):
            assert client.post("/plants", json={"id": plant_id, "name": "x"}, headers=auth).status_code == 200
        # Keys that expire, of no store, fill Redis: its policy evicts them (and no plant's key).
        filler = redis.Redis.from_url(settings["PLANTS_STORE_URL"])
        try:
            for n in range(400):
                filler.set(f"filler:{n}", "y" * 10_000, ex=3600)
        finally:
            filler.close()
        assert server.command("INFO", "stats").count("evicted_keys:0") == 0
        server.command("CONFIG", "SET", "maxmemory-policy", "noeviction")
        server.command("DEL", "{" + settings["PLANTS_STORE_PREFIX"] + "}:layout")
        refused = client.get("/plants", headers=auth)
        message = error_of(refused, 503)["message"]
        assert "Redis evicted" in message
        assert "then run `python -m app.store.migrate` once" in message
        assert "evicted_keys:" in caplog.text
        assert "run `python -m app.store.migrate` once" in caplog.text
        assert "1.0.0" not in caplog.text
        # Below what Redis holds, as eviction can leave it: the migration's writes need room.
        server.command("CONFIG", "SET", "maxmemory", "1mb")
        assert "raise maxmemory" in _migrated(settings, status=1)
        server.command("CONFIG", "SET", "maxmemory", "0")
        _migrated(settings)
        page = client.get("/plants?limit=100", headers=auth)
        assert [plant["id"] for plant in page.json["plants"]] == list(range(50))
    finally:
        server.stop()


def test_a_list_after_redis_evicted_the_stores_layout_says_so_and_the_migration_mends_it(tmp_path, caplog):
    """An `allkeys-*` policy can evict `:layout`, the mark that the indexes hold every plant
    (written once, by the first create, so the least recently used): a page then meets the check
    for a 1.0.0 store. Its 503 names the eviction and both steps, in order: set the policy
    (a migration meanwhile would index the plants left while Redis went on evicting), then run
    the migration. Once the policy is set the 503 says the same without the first step (it is
    not taken for a 1.0.0 store's); the migration writes the mark again, and the plants that
    remain are listed."""
    redis = RedisServer(tmp_path, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
    try:
        settings = redis_settings(redis)
        layout = "{" + settings["PLANTS_STORE_PREFIX"] + "}:layout"
        client = create_app({"PLANTS_API_TOKENS": TOKEN, **settings}).test_client()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        refused = None
        for plant_id in range(20000):
            response = client.post("/plants", json={"id": plant_id, "name": "x" * 150}, headers=auth)
            assert response.status_code == 200
            if plant_id % 100 == 0 and redis.command("EXISTS", layout) == "0":
                # The page judges the mark by its first group's count, which Redis may have
                # evicted too (that page then reads as if nothing were missing): write on.
                refused = client.get("/plants", headers=auth)
                if refused.status_code == 503:
                    break
        assert redis.command("EXISTS", layout) == "0"
        assert refused is not None
        message = error_of(refused, 503)["message"]
        assert refused.headers["Retry-After"] == "60"
        assert "Redis evicted" in message
        assert "maxmemory-policy noeviction and give Redis room" in message
        assert "then run `python -m app.store.migrate` once" in message
        assert "upgrade" not in message
        assert "maxmemory-policy allkeys-lru" in caplog.text
        assert "1.0.0" not in caplog.text
        # Once Redis keeps every key, the missing mark is the migration's to write again.
        redis.command("CONFIG", "SET", "maxmemory-policy", "noeviction")
        redis.command("CONFIG", "SET", "maxmemory", "8mb")  # room for the indexes
        assert _migrated(settings).startswith("Plant Store migrate: indexed ")
        assert client.get("/plants", headers=auth).status_code == 200
        # Every plant that remains, once, in order (a page may come short: an index member whose
        # plant Redis evicted is passed over).
        store = open_store(settings)
        listed: list[int] = []
        after = None
        try:
            while after is not None or not listed:
                page = store.page(after, 1000)
                listed += [plant_id for plant_id, _, _ in page.plants]
                after = page.next
        finally:
            store.close()
        assert listed == _stored_ids(settings)
    finally:
        redis.stop()


def test_the_start_warns_of_a_redis_that_evicts_keys_and_serves_on(tmp_path):
    """gunicorn's start reads the store's readiness: a Redis with an `allkeys-*` policy is a
    WARNING in its log (an operator reads the log at a start, not /readyz), and the service starts."""
    redis = RedisServer(tmp_path, "--maxmemory", "1gb", "--maxmemory-policy", "allkeys-lfu")
    server = redis_gunicorn(redis_settings(redis), workers=1)
    try:
        status, _, body = call(server.connection(), "GET", "/readyz")
        assert (status, json.loads(body)["evicting"]) == (200, "allkeys-lfu")
    finally:
        server.stop()
        redis.stop()
    (warning,) = [line for line in server.output().splitlines() if "evicts keys" in line]
    assert "[WARNING]" in warning
    assert "maxmemory-policy allkeys-lfu" in warning
    assert "noeviction" in warning


def test_the_script_is_loaded_again_after_script_flush(redis_server):
    """EVALSHA first; on NOSCRIPT (a Redis restart or failover empties the script cache) it loads again."""
    settings = redis_settings(redis_server)
    store = open_store(settings)

    def script_loads() -> int:
        stats = redis_server.command("INFO", "commandstats")
        line = next((line for line in stats.splitlines() if line.startswith("cmdstat_script|load:")), "")
        return int(line.split("calls=")[1].split(",")[0]) if line else 0

    try:
        assert store.create(1, "Fern", None) is CreateOutcome.CREATED
        assert redis_server.command("SCRIPT", "FLUSH") == "OK"
        loads = script_loads()
        assert store.create(2, "Fern", None) is CreateOutcome.CREATED
        assert script_loads() == loads + 1
        assert store.create(1, "Other", None) is CreateOutcome.CONFLICT
        assert script_loads() == loads + 1  # loaded once, then EVALSHA again
    finally:
        store.close()


def test_connections_redis_closed_are_made_again_without_an_error(own_redis):
    """Each request thread holds its connection between calls (app/compat/redis.py). When Redis closes
    them (a restart, its idle `timeout`, CLIENT KILL), the next write and read on every thread
    reconnect and answer: nothing is lost and nothing is refused."""
    store = open_store(redis_settings(own_redis))
    # The first four creates wait for each other, so that each of the four threads makes one and
    # holds a connection (without it, a busy machine can let one thread take two of them).
    together = threading.Barrier(4)

    def fern(plant_id: int) -> CreateOutcome:
        if plant_id < 4:
            together.wait(timeout=10)
        return store.create(plant_id, "Fern", "green")

    try:
        with ThreadPoolExecutor(4) as pool:
            assert set(pool.map(fern, range(8))) == {CreateOutcome.CREATED}
            killed = int(own_redis.command("CLIENT", "KILL", "TYPE", "normal"))
            assert killed >= 4
            assert set(pool.map(fern, range(8, 16))) == {CreateOutcome.CREATED}
            own_redis.command("CLIENT", "KILL", "TYPE", "normal")
            found = list(pool.map(store.get, range(16)))
        assert found == [Plant("Fern", "green")] * 16
        assert len(store) == 16
    finally:
        store.close()


def test_a_thread_per_request_reuses_connections_rather_than_opening_one_each(own_redis):
    """`flask run` starts a thread per request: each thread's held connection goes back to the pool
    when the thread ends, so 200 short-lived threads leave Redis with a few clients, not 200."""
    store = open_store(redis_settings(own_redis))
    try:
        for plant_id in range(200):
            thread = threading.Thread(target=store.create, args=(plant_id, "Fern", None))
            thread.start()
            thread.join()
        gc.collect()
        clients = int(own_redis.command("INFO", "clients").split("connected_clients:")[1].split()[0])
        assert clients <= 5  # redis-cli's own, and the few the store keeps
        assert len(store) == 200
        assert store.get(199) == Plant("Fern", None)
    finally:
        store.close()


def test_indexes_stay_small_listpack_leaves_and_leave_no_key_behind(redis_server):
    """Thousands of creates and deletes over many leaves: pages equal a sorted dict throughout, every
    leaf stays a listpack of fewer than LEAF_SIZE members, and deleting everything leaves only the
    counters (and the feed's empty stream)."""
    settings = redis_settings(redis_server)
    store = open_store(settings)
    prefix = "{" + settings["PLANTS_STORE_PREFIX"] + "}"
    client = redis.Redis.from_url(settings["PLANTS_STORE_URL"])
    rng = random.Random(7)
    model: dict[int, Plant] = {}
    try:
        for step in range(6000):
            if model and rng.random() < 0.3:
                plant_id = rng.choice(list(model))
                assert store.delete(plant_id)
                del model[plant_id]
            else:
                plant_id = rng.choice([rng.randint(-(2**63), 2**63 - 1), rng.randint(-2000, 2000)])
                tag = rng.choice([None, "fern", "palm", "a:b {c}"])
                if plant_id not in model:
                    assert store.create(plant_id, f"n{plant_id}", tag) is CreateOutcome.CREATED
                    model[plant_id] = Plant(f"n{plant_id}", tag)
            if step % 1500 == 1499:
                assert walk_pages(store, 37) == sorted(model.items())
                assert walk_pages(store, 50, ["fern", "a:b {c}"]) == sorted(
                    (key, plant) for key, plant in model.items() if plant.tag in ("fern", "a:b {c}")
                )
        leaves = list(client.scan_iter(match=f"{prefix}:l:*", count=1000))
        assert len(leaves) > 20  # several leaves per index: splits happened
        for leaf in leaves:
            assert client.zcard(leaf) < LEAF_SIZE
            assert client.object("encoding", leaf) == b"listpack"
        for plant_id in list(model):
            assert store.delete(plant_id)
        assert store.page(None, 10) == Page([], None)
        left = sorted(client.scan_iter(match=f"{prefix}:*", count=1000))
        # With the feed off, the last write left its mark on the feed's stream, which holds no event.
        assert left == [f"{prefix}:{key}".encode() for key in ("count", "events", "layout")]
        assert client.xlen(f"{prefix}:events") == 0
        assert client.get(f"{prefix}:count") == b"0"
    finally:
        store.close()
        client.close()


def test_leaves_written_with_128_members_are_read_and_split_at_their_next_insert(redis_server):
    """A store written before leaves held fewer than LEAF_SIZE members (up to 127): its pages are
    whole, and a write into such a leaf splits it, so every leaf ends under LEAF_SIZE."""
    settings = redis_settings(redis_server)
    store = open_store(settings)
    prefix = "{" + settings["PLANTS_STORE_PREFIX"] + "}"
    client = redis.Redis.from_url(settings["PLANTS_STORE_URL"])
    shipped = f"local LEAF_SIZE = {LEAF_SIZE}\n"
    older = client.register_script(CREATE.replace(shipped, "local LEAF_SIZE = 128\n"))
    rng = random.Random(11)
    model: dict[int, Plant] = {}
    try:
        for plant_id in rng.sample(range(-5000, 5000), 600):
            tag = rng.choice([None, "fern"])
            keys, args = store.groups.create_call(plant_id, encode(f"n{plant_id}", tag))
            assert older(keys, args) == 0
            model[plant_id] = Plant(f"n{plant_id}", tag)
        leaves = list(client.scan_iter(match=f"{prefix}:l:*", count=1000))
        assert max(client.zcard(leaf) for leaf in leaves) >= LEAF_SIZE  # as the older store left them
        assert walk_pages(store, 37) == sorted(model.items())
        for plant_id in rng.sample(range(-5000, 5000), 1500):
            if plant_id in model and rng.random() < 0.5:
                assert store.delete(plant_id)
                del model[plant_id]
            elif plant_id not in model:
                assert store.create(plant_id, f"n{plant_id}", "fern") is CreateOutcome.CREATED
                model[plant_id] = Plant(f"n{plant_id}", "fern")
        assert walk_pages(store, 37) == sorted(model.items())
        assert walk_pages(store, 50, ["fern"]) == sorted(
            (key, plant) for key, plant in model.items() if plant.tag == "fern"
        )
        for leaf in client.scan_iter(match=f"{prefix}:l:*", count=1000):
            assert client.zcard(leaf) < LEAF_SIZE
            assert client.object("encoding", leaf) == b"listpack"
    finally:
        store.close()
        client.close()


@pytest.mark.parametrize(
    ("argument", "status", "said"), [("--help", 0, "usage:"), ("--dry-run", 2, "usage:")]
)
def test_the_migration_asked_for_help_or_with_an_unknown_option_touches_no_store(
    redis_server, argument, status, said
):
    """`--help` (what a stranger runs first) and an option it does not have (`--dry-run`) are
    answered by the command itself: neither may run the migration, which writes to the store."""
    settings = redis_settings(redis_server)
    env = {**os.environ, **settings, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "app.store.migrate", argument],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == status, result.stderr
    assert said in (result.stdout if status == 0 else result.stderr)
    assert "indexed" not in result.stdout
    client = redis.Redis.from_url(settings["PLANTS_STORE_URL"])
    try:
        assert client.keys(f"{{{settings['PLANTS_STORE_PREFIX']}}}*") == []
    finally:
        client.close()


def test_a_1_0_0_store_is_listed_after_the_migration_and_not_before(redis_server, caplog):
    """Plants written in 1.0.0's layout (buckets and a count, no index): pages answer 503 and name
    the fix; `python -m app.store.migrate` indexes them, once, however often it runs."""
    settings = redis_settings(redis_server)
    prefix = "{" + settings["PLANTS_STORE_PREFIX"] + "}"
    client = redis.Redis.from_url(settings["PLANTS_STORE_URL"])
    groups = Groups(settings["PLANTS_STORE_PREFIX"], count=1, capacity=1000, cluster=False)
    old = {
        plant_id: Plant(f"old {plant_id}", "fern" if plant_id % 3 else None) for plant_id in range(-150, 250)
    }
    for plant_id, plant in old.items():
        client.hset(groups.bucket_key(plant_id), str(plant_id), encode(*plant))
    client.set(f"{prefix}:count", len(old))
    app = create_app({"PLANTS_API_TOKENS": TOKEN, **settings})
    http = app.test_client()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    refused = http.get("/plants", headers=auth)
    assert_error(refused.status_code, refused.headers, refused.get_data(), 503)
    assert refused.headers["Retry-After"] == "60"
    assert "migrate" not in refused.json["message"]  # the operator's business; the log names it
    assert "run `python -m app.store.migrate` once" in caplog.text
    # Reads, creates and deletes work before the migration.
    assert http.get("/plants/5", headers=auth).json == {"name": "old 5", "tag": "fern"}
    assert http.post("/plants", json={"id": 1000, "name": "new"}, headers=auth).status_code == 200
    assert http.delete("/plants/-150", headers=auth).status_code == 204
    del old[-150]
    old[1000] = Plant("new")
    env = {**os.environ, **settings, "PYTHONPATH": str(ROOT)}
    for _ in range(2):
        result = subprocess.run(
            [sys.executable, "-m", "app.store.migrate"], env=env, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("Plant Store migrate: indexed ")
    store = open_store(settings)
    try:
        assert walk_pages(store, 64) == sorted(old.items())
        assert walk_pages(store, 64, ["fern"]) == sorted((k, p) for k, p in old.items() if p.tag == "fern")
        assert len(store) == len(old)
    finally:
        store.close()
        client.close()
    page = http.get("/plants?limit=3", headers=auth)
    assert [item["id"] for item in page.json["plants"]] == [-149, -148, -147]


def test_a_plant_changed_while_the_migration_reads_its_bucket_is_indexed_as_it_now_is(redis_server):
    """The migration reads a batch of buckets, then indexes each: a plant the service changes (or
    deletes and creates again) in between is indexed with its stored value, not the one read."""
    settings = redis_settings(redis_server)
    prefix = settings["PLANTS_STORE_PREFIX"]
    client = redis.Redis.from_url(settings["PLANTS_STORE_URL"])
    groups = Groups(prefix, count=1, capacity=1000, cluster=False)
    for plant_id in range(10):
        client.hset(groups.bucket_key(plant_id), str(plant_id), encode(f"old {plant_id}", "fern"))
    client.set("{" + prefix + "}:count", 10)
    http = create_app({"PLANTS_API_TOKENS": TOKEN, **settings}).test_client()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    writes = []

    def write_between_the_read_and_the_index() -> None:
        if not writes:
            writes.append(http.patch("/plants/5", json={"tag": "palm"}, headers=auth).status_code)
            writes.append(http.delete("/plants/7", headers=auth).status_code)
            writes.append(http.post("/plants", json={"id": 7, "name": "new 7"}, headers=auth).status_code)

    class Racing(redis.Redis):
        def pipeline(self, *args, **kwargs):
            pipe = super().pipeline(*args, **kwargs)
            execute = pipe.execute

            def execute_then_write(*args, **kwargs):
                read = execute(*args, **kwargs)
                write_between_the_read_and_the_index()
                return read

            pipe.execute = execute_then_write
            return pipe

    racing = Racing.from_url(settings["PLANTS_STORE_URL"])
    store = open_store(settings)
    try:
        migrate(racing, prefix)
        assert writes == [200, 204, 200]
        now = {plant_id: Plant(f"old {plant_id}", "fern") for plant_id in range(10)}
        now[5] = Plant("old 5", "palm")
        now[7] = Plant("new 7")
        assert walk_pages(store, 64) == sorted(now.items())
        assert walk_pages(store, 64, ["fern"]) == sorted((k, p) for k, p in now.items() if p.tag == "fern")
        assert walk_pages(store, 64, ["palm"]) == [(5, now[5])]
    finally:
        store.close()
        racing.close()
        client.close()


def test_the_migration_refuses_the_memory_store_in_one_line():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PLANTS_STORE_URL": "memory://"}
    result = subprocess.run(
        [sys.executable, "-m", "app.store.migrate"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr == (
        "Plant Store migrate: configuration error: PLANTS_STORE_URL names the memory store, "
        "which needs no migration\n"
    )


def test_a_full_store_takes_exactly_one_create_after_one_delete_across_workers(redis_server):
    settings = redis_settings(redis_server)
    server = redis_gunicorn(settings, PLANTS_MAX_PLANTS="20")
    try:
        for plant_id in range(20):
            assert create(server.port, {"id": plant_id, "name": "Fern"})[0] == 200
        assert_error(*create(server.port, {"id": 99, "name": "Fern"}), 507)
        status, _, body = call(server.connection(), "DELETE", "/plants/7", None, AUTH)
        assert (status, body) == (204, b"")
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda n: create(server.port, {"id": n, "name": "New"}), range(100, 132)))
        assert Counter(status for status, _, _ in answers) == {200: 1, 507: 31}
        store = open_store(settings)
        assert len(store) == 20
        assert len(walk_pages(store, 100)) == 20
        store.close()
    finally:
        server.stop()


def test_min_replicas_on_a_single_redis_waits_for_its_replica(tmp_path):
    """PLANTS_STORE_MIN_REPLICAS on one Redis with a replica: 200 once the replica has the
    create; 503 (reason "replication") while the replica cannot confirm; never 500."""
    (tmp_path / "primary").mkdir()
    (tmp_path / "replica").mkdir()
    primary = RedisServer(tmp_path / "primary")
    replica = RedisServer(tmp_path / "replica", "--replicaof", "127.0.0.1", str(primary.port))
    try:
        deadline = time.monotonic() + 15
        while "master_link_status:up" not in replica.command("INFO", "replication"):
            assert time.monotonic() < deadline, "the replica did not sync"
            time.sleep(0.05)
        app = create_app({"PLANTS_API_TOKENS": TOKEN, "PLANTS_STORE_URL": primary.url,
                          "PLANTS_STORE_MIN_REPLICAS": 1, "PLANTS_STORE_TIMEOUT": 0.5})  # fmt: skip
        http = app.test_client()
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert http.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth).status_code == 200
        assert replica.command("HGET", "{plants}:b:1", "1") == "4:Fern"
        replica.signal(signal.SIGSTOP)
        try:
            refused = http.post("/plants", json={"id": 2, "name": "Palm"}, headers=auth)
            assert refused.status_code == 503
            assert refused.headers["Retry-After"] == "1"
            assert "replicas did not confirm" in refused.json["message"]
        finally:
            replica.signal(signal.SIGCONT)
        assert http.post("/plants", json={"id": 2, "name": "Palm"}, headers=auth).status_code == 200
        app.extensions["plants"].store.close()
    finally:
        replica.stop()
        primary.stop()


def test_a_forked_process_writes_on_connections_of_its_own(request):
    """A worker forked from a process that already wrote holds none of its parent's connections:
    parent and child writing at once each read their own answers."""
    store = open_store(settings_for_store(request, "redis"))
    assert store.create(1, "parent", None) is CreateOutcome.CREATED  # a connection now held
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        ids = range(1000, 1300)
        ok = all(store.create(i, f"child {i}", None) is CreateOutcome.CREATED for i in ids)
        ok = ok and all(store.get(i) == Plant(f"child {i}", None) for i in ids)
        os.write(writer, b"1" if ok else b"0")
        os._exit(0)
    os.close(writer)
    try:
        for plant_id in range(2000, 2300):
            assert store.create(plant_id, f"parent {plant_id}", None) is CreateOutcome.CREATED
            assert store.get(plant_id) == Plant(f"parent {plant_id}", None)
        assert os.read(reader, 1) == b"1"
    finally:
        os.waitpid(child, 0)
        os.close(reader)
        store.close()
