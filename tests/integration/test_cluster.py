"""The store on a real Redis Cluster (3 primaries, 3 replicas): spread, capacity, failover, resharding.

The contract itself runs on the session's cluster in test_pages.py, test_read_delete.py and
test_contract.py. The fault tests here kill -9, stop and reshard nodes of a cluster of their own.
"""

from __future__ import annotations

import contextlib
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
from typing import Any

import pytest
from redis.cluster import NodesManager, RedisCluster
from redis.crc import key_slot

import app.compat.redis
from app import create_app
from app.extension import plants_state
from app.http.cursor import EVENTS, decode_cursor
from app.store import CreateOutcome, Plant, StoreFullError, StoreUnavailableError, store_from_url
from app.store.readiness import Readiness
from app.store.redis.groups import CLUSTER_GROUPS, Groups
from tests.conftest import cluster_settings
from tests.helpers import call, create_until_200, reloaded
from tests.load import AUTH, SHORT_TIMEOUTS, CreateLoad, assert_only_200_and_503, redis_gunicorn
from tests.receiver import Receiver
from tests.servers import (
    ROOT,
    TOKEN,
    Gunicorn,
    RedisClusterServers,
    RedisServer,
    cluster_node,
    free_port,
    self_signed_certificate,
)


def open_cluster_store(
    settings: dict[str, str], capacity: int = 1_000_000, min_replicas: int = 0, timeout: float = 1
):
    """`timeout`: short where a fault test waits for it; longer where a loaded machine only slows Redis."""
    url, prefix = settings["PLANTS_STORE_URL"], settings["PLANTS_STORE_PREFIX"]
    return store_from_url(
        url, capacity=capacity, prefix=prefix, connect_timeout=1, timeout=timeout, min_replicas=min_replicas
    )


def plants_per_primary(cluster: RedisClusterServers, store) -> Counter:
    """How many plants each primary holds: the counts of the groups whose slots it serves."""
    client = RedisCluster(host="127.0.0.1", port=cluster.primaries()[0].port)
    try:
        per_primary: Counter = Counter()
        for group in range(store.groups.count):
            key = store.groups.count_key(group)
            per_primary[client.get_node_from_key(key).port] += int(client.get(key) or 0)
        return per_primary
    finally:
        client.close()


def random_ids(seed: int, count: int) -> list[int]:
    rng = random.Random(seed)
    return list({rng.randrange(-(2**63), 2**63): None for _ in range(count)})


def test_random_ids_spread_over_the_primaries_within_20_percent(redis_cluster):
    store = open_cluster_store(cluster_settings(redis_cluster))
    ids = random_ids(18, 10_000)
    with ThreadPoolExecutor(8) as pool:
        outcomes = set(pool.map(lambda plant_id: store.create(plant_id, "Fern", None), ids))
        assert outcomes == {CreateOutcome.CREATED}
    per_primary = plants_per_primary(redis_cluster, store)
    assert len(per_primary) == 3
    assert sum(per_primary.values()) == len(ids) == len(store)
    for count in per_primary.values():
        assert 0.8 * len(ids) / 3 <= count <= 1.2 * len(ids) / 3, per_primary
    store.close()


def test_a_cluster_group_that_lost_its_mark_is_listed_again_after_the_migration(redis_cluster, caplog):
    """On a cluster, a group whose `:layout` mark is gone (an `allkeys-*` policy evicted it, and
    the operator has since set noeviction; here deleted) makes a list 503 naming the fix, in the
    answer and the log, not a 1.0.0 store (which never ran on a cluster); `python -m
    app.store.migrate`, with the service's settings, writes each group's mark again."""
    settings = cluster_settings(redis_cluster)
    app = create_app({"PLANTS_API_TOKENS": TOKEN, **settings})
    try:
        _listed_after_the_migration(app.test_client(), redis_cluster, settings, caplog)
    finally:
        plants_state(app).close()


def _listed_after_the_migration(
    client: Any, redis_cluster: RedisClusterServers, settings: dict[str, str], caplog: Any
) -> None:
    for plant_id in range(2 * CLUSTER_GROUPS):
        assert (
            client.post("/plants", json={"id": plant_id, "name": f"p{plant_id}"}, headers=AUTH).status_code
            == 200
        )
    cluster = RedisCluster(host="127.0.0.1", port=redis_cluster.primaries()[0].port)
    try:
        tag = Groups(settings["PLANTS_STORE_PREFIX"], count=CLUSTER_GROUPS, capacity=1, cluster=True).tags[0]
        assert cluster.delete(f"{tag}:layout") == 1
    finally:
        cluster.close()
    refused = client.get("/plants", headers=AUTH)
    assert refused.status_code == 503
    assert "then run `python -m app.store.migrate` once" in refused.json["message"]
    assert "run `python -m app.store.migrate` once" in caplog.text
    assert "1.0.0" not in caplog.text
    env = {**os.environ, **settings, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "app.store.migrate"], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Plant Store migrate: indexed {2 * CLUSTER_GROUPS} plants")
    listed: list[int] = []
    url = "/plants?limit=100"
    while url:
        page = client.get(url, headers=AUTH)
        assert page.status_code == 200, page.get_data()
        listed += [plant["id"] for plant in page.json["plants"]]
        cursor = page.json.get("next")
        url = f"/plants?limit=100&after={cursor}" if cursor else ""
    assert sorted(listed) == list(range(2 * CLUSTER_GROUPS))


def test_capacity_is_exact_per_group_and_the_store_refuses_within_the_documented_bound(redis_cluster):
    """README: each of the 24 groups holds at most its share of PLANTS_MAX_PLANTS, so the store
    never holds more than the capacity, holds exactly the capacity once every group is full, and
    with random ids first refuses a create once it holds at least capacity * (1 - 3 / sqrt(capacity / 24))."""
    capacity = 12_000
    # Sixteen thousand creates from eight threads: on CI's loaded machine one took past 1 s.
    store = open_cluster_store(cluster_settings(redis_cluster), capacity=capacity, timeout=10)
    ids = random_ids(1812, 16_000)
    answers: list[tuple[float, bool]] = []

    def attempt(plant_id: int) -> None:
        try:
            store.create(plant_id, "Fern", None)
            answers.append((time.monotonic(), True))
        except StoreFullError:
            answers.append((time.monotonic(), False))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(attempt, ids))
    answers.sort()
    created = [ok for _, ok in answers]
    assert len(store) == capacity == created.count(True)
    first_refusal = created.index(False)
    assert first_refusal >= capacity * (1 - 3 / (capacity / CLUSTER_GROUPS) ** 0.5), first_refusal
    per_group = Counter(store.groups.of(plant_id) for plant_id in ids if store.get(plant_id) is not None)
    assert [per_group[group] for group in range(CLUSTER_GROUPS)] == store.groups.quotas
    store.close()


@pytest.fixture(scope="module")
def fault_cluster(tmp_path_factory):
    """A cluster of this module's own: its tests kill, stop and reshard its nodes."""
    cluster = RedisClusterServers(tmp_path_factory.mktemp("fault-cluster"))
    yield cluster
    cluster.stop()


def wait_for_failover(cluster: RedisClusterServers, replica: RedisServer, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not replica.command("ROLE").startswith("master"):
        assert time.monotonic() < deadline, "the replica was not promoted"
        time.sleep(0.05)


def rejoin(cluster: RedisClusterServers, node: RedisServer) -> None:
    """Start a killed node again: it rejoins as a replica of the node promoted in its place."""
    node.start()
    cluster.wait_until_healthy()
    assert node.command("ROLE").startswith("slave")


def assert_readable(settings: dict[str, str], plant_ids: list[int]) -> None:
    store = open_cluster_store(settings)
    missing = [plant_id for plant_id in plant_ids if store.get(plant_id) != Plant(f"Plant {plant_id}")]
    store.close()
    assert missing == []


def test_kill_9_of_a_primary_with_min_replicas_loses_no_acknowledged_create(fault_cluster):
    settings = {**cluster_settings(fault_cluster), **SHORT_TIMEOUTS, "PLANTS_STORE_MIN_REPLICAS": "1"}
    server = redis_gunicorn(settings)
    load = CreateLoad(server.port)
    try:
        load.wait_for(300)
        victim = fault_cluster.primaries()[0]
        replica = fault_cluster.replica_of(victim)
        victim.kill()
        wait_for_failover(fault_cluster, replica)
        load.wait_for(100)
        rejoin(fault_cluster, victim)
        recovered = load.count()
        load.wait_for(300)
    finally:
        answers = load.stop()
        server.stop()
    statuses = assert_only_200_and_503(answers)
    assert statuses[503] >= 1  # the creates to the dead primary's groups, until the promotion
    assert_readable(settings, [plant_id for plant_id, status, _, _ in answers if status == 200])
    # Recovered by itself, with the same service processes: every create answers 200 again.
    assert {status for _, status, _, _ in answers[recovered + 50 :]} == {200}
    assert "Traceback" not in server.output()


def test_creates_answer_503_while_a_replica_cannot_confirm_then_survive_the_failover(fault_cluster):
    settings = {**cluster_settings(fault_cluster), **SHORT_TIMEOUTS, "PLANTS_STORE_MIN_REPLICAS": "1"}
    server = redis_gunicorn(settings)
    load = CreateLoad(server.port)
    victim = fault_cluster.primaries()[1]
    replica = fault_cluster.replica_of(victim)
    try:
        load.wait_for(200)
        replica.signal(signal.SIGSTOP)
        stopped_at = load.count()
        # Until a create its replica cannot confirm has been answered (within the store's timeout,
        # but after however long a loaded machine takes to send it).
        deadline = time.monotonic() + 30
        while not any(status == 503 for _, status, _, _ in load.answers[stopped_at:]):
            assert time.monotonic() < deadline, "no create answered 503 while the replica was stopped"
            time.sleep(0.05)
        time.sleep(0.5)  # and more of them, answered as that one was
        window = load.count()
        victim.kill()
        replica.signal(signal.SIGCONT)
        wait_for_failover(fault_cluster, replica)
        rejoin(fault_cluster, victim)
        recovered = load.count()
        load.wait_for(300)
    finally:
        replica.signal(signal.SIGCONT)
        answers = load.stop()
        server.stop()
    assert_only_200_and_503(answers)  # never a 500, and CreateLoad.stop saw every thread return
    stopped = Counter(status for _, status, _, _ in answers[stopped_at:window])
    assert stopped[503] >= 1, stopped
    for _, status, body, _ in answers[stopped_at:window]:
        if status == 503:
            assert "replicas did not confirm" in body["message"]
    assert_readable(settings, [plant_id for plant_id, status, _, _ in answers if status == 200])
    assert {status for _, status, _, _ in answers[recovered + 50 :]} == {200}
    assert "Traceback" not in server.output()


def test_a_walk_across_a_failover_answers_503_and_resumes_from_its_cursor(fault_cluster):
    settings = {**cluster_settings(fault_cluster), **SHORT_TIMEOUTS}
    store = open_cluster_store(settings, min_replicas=1)  # every plant is on a replica
    ids = list(range(600))
    for plant_id in ids:
        store.create(plant_id, f"Plant {plant_id}", None)
    store.close()
    server = redis_gunicorn(settings, workers=1)
    seen, answers, url, killed = [], Counter(), "/plants?limit=20", None
    try:
        while url:
            status, headers, body = call(server.connection(), "GET", url, None, AUTH)
            answers[status] += 1
            if status == 503:
                assert headers["Retry-After"] == "1"
                time.sleep(0.2)
                continue  # the same cursor again
            assert status == 200, body
            page = json.loads(body)
            seen += [item["id"] for item in page["plants"]]
            url = f"/plants?limit=20&after={page['next']}" if "next" in page else None
            if killed is None and len(seen) >= 200:
                killed = fault_cluster.primaries()[2]
                replica = fault_cluster.replica_of(killed)
                killed.kill()
        wait_for_failover(fault_cluster, replica)
        rejoin(fault_cluster, killed)
    finally:
        server.stop()
    assert sorted(seen) == ids  # every plant exactly once
    assert set(answers) <= {200, 503}


def tls_cluster_node(directory) -> tuple[RedisServer, int, Any]:
    """A Redis Cluster of one primary holding every slot, that clients reach over TLS only (its
    plain port is this test's), with a self-signed certificate (CN=localhost) as its own CA."""
    cert, key = self_signed_certificate(directory)
    tls_port = free_port()
    node = RedisServer(
        directory,
        *cluster_node(),
        *("--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key)),
        *("--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no", "--tls-cluster", "yes"),
    )
    node.command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
    deadline = time.monotonic() + 10
    while "cluster_state:ok" not in node.command("CLUSTER", "INFO") and time.monotonic() < deadline:
        time.sleep(0.05)
    return node, tls_port, cert


def test_rediss_cluster_takes_the_tls_options_that_rediss_takes(tmp_path):
    """`?ssl_ca_certs=` (a private CA) and `?ssl_check_hostname=false` (the node is announced by its
    address, the certificate names localhost) on `rediss+cluster://`, as on `rediss://`: the plants
    and the rate limits' counters both go over TLS. Without the CA the certificate is refused."""
    node, tls_port, cert = tls_cluster_node(tmp_path)
    try:
        base = f"rediss+cluster://127.0.0.1:{tls_port}"
        settings = {"PLANTS_API_TOKENS": "t"}
        url = f"{base}?ssl_ca_certs={cert}&ssl_check_hostname=false&ssl_cert_reqs=required"
        client = create_app(
            {**settings, "PLANTS_STORE_URL": url, "PLANTS_RATE_LIMIT": "100/second"}
        ).test_client()
        auth = {"Authorization": "Bearer t"}
        created = client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth)
        assert created.status_code == 200, created.json
        assert created.headers["RateLimit-Limit"] == "100"
        assert client.get("/plants/1", headers=auth).json == {"name": "Fern"}
        untrusted = create_app({**settings, "PLANTS_STORE_URL": base}).test_client()
        assert untrusted.get("/plants/1", headers=auth).status_code == 503
    finally:
        node.stop()


def test_the_feed_follows_a_failover_with_no_write_to_show_it_the_promoted_replica(fault_cluster):
    """A primary killed for good, and nothing written since: once its replica is promoted, the feed
    answers again. Only the feed reads the dead node's groups: no write's failure reads the slot
    map again for it (it answered 503 until a write reached one of those groups)."""
    server = redis_gunicorn({**cluster_settings(fault_cluster), **SHORT_TIMEOUTS}, workers=1)
    victim = fault_cluster.primaries()[0]
    replica = fault_cluster.replica_of(victim)
    try:
        status, _, body = call(server.connection(), "GET", "/events?after=now", None, AUTH)
        events = f"/events?after={json.loads(body)['next']}&limit=100"
        for plant_id in range(48):  # two in every bucket group
            plant = {"id": plant_id, "name": f"Plant {plant_id}"}
            assert call(server.connection(), "POST", "/plants", plant, AUTH)[0] == 200
        status, _, body = call(server.connection(), "GET", events, None, AUTH)
        assert status == 200, body  # every group's node is known to the worker
        victim.kill()
        wait_for_failover(fault_cluster, replica)
        promoted = time.monotonic()
        answers: Counter = Counter()
        while True:
            status, headers, body = call(server.connection(), "GET", events, None, AUTH)
            answers[status] += 1
            if status == 200 or time.monotonic() - promoted > 15:
                break
            assert status == 503, body
            assert headers["Retry-After"] == "1"
            time.sleep(0.5)
        assert status == 200, (answers, body)
        assert sorted(event["plant"]["id"] for event in json.loads(body)["events"]) == list(range(48))
    finally:
        server.stop()
        rejoin(fault_cluster, victim)
    assert "Traceback" not in server.output()


def hooks_primary(cluster: RedisClusterServers, prefix: str) -> RedisServer:
    """The primary that serves the webhook endpoints' slot."""
    client = RedisCluster(host="127.0.0.1", port=cluster.primaries()[0].port)
    try:
        port = client.get_node_from_key(f"{{{prefix}:hooks}}").port
    finally:
        client.close()
    return next(node for node in cluster.nodes if node.port == port)


def test_a_failover_that_loses_delivered_events_sends_only_the_new_ones(fault_cluster):
    """Without PLANTS_STORE_MIN_REPLICAS a promoted replica may lack the last writes of its primary
    (README): their events were delivered, and the endpoint's position is past its group's stream.
    The deliverer reads on from there: the events written since, each once; not the whole feed
    again under a false "fell behind the feed's retention" (it was, before)."""
    settings = {**cluster_settings(fault_cluster), **SHORT_TIMEOUTS}
    webhooks = {"PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1", "PLANTS_WEBHOOKS_RETRY_SCALE": "0.001"}
    receiver = Receiver(lambda delivery, number: (204, {}, 0.0))
    server = redis_gunicorn(settings, workers=1, **webhooks)
    hooks = hooks_primary(fault_cluster, settings["PLANTS_STORE_PREFIX"])
    victim = next(node for node in fault_cluster.primaries() if node is not hooks)
    replica = fault_cluster.replica_of(victim)
    try:
        status, _, body = call(server.connection(), "POST", "/webhooks", {"url": receiver.url}, AUTH)
        assert status == 201, body
        hook = json.loads(body)["id"]
        create_until_200(server, range(48), AUTH)  # two plants in every bucket group
        receiver.wait_for(48, timeout=30)
        # The replica hears nothing more: stopped, and its link cut, so that nothing sent later
        # waits in its socket to be read once it runs again.
        replica.signal(signal.SIGSTOP)
        victim.command("CLIENT", "KILL", "TYPE", "replica")
        create_until_200(server, range(48, 96), AUTH)
        delivered = len(receiver.wait_for(96, timeout=30))
        victim.kill()
        replica.signal(signal.SIGCONT)
        replica.command("CLUSTER", "FAILOVER", "TAKEOVER")
        wait_for_failover(fault_cluster, replica)
        create_until_200(server, range(200, 210), AUTH)
        kept = [call(server.connection(), "GET", f"/plants/{n}", None, AUTH)[0] for n in range(48, 96)]
        assert 404 in kept  # the promoted replica lacks some delivered plants: the case under test
        receiver.wait_for(delivered + 10, timeout=30)
        time.sleep(2)  # time for any more to come
        after = [delivery.event["data"]["id"] for delivery in receiver.deliveries[delivered:]]
        endpoint = json.loads(call(server.connection(), "GET", f"/webhooks/{hook}", None, AUTH)[2])
    finally:
        replica.signal(signal.SIGCONT)
        server.stop()
        receiver.stop()
        rejoin(fault_cluster, victim)
    assert sorted(after) == list(range(200, 210))
    assert endpoint["status"] == "enabled"
    assert endpoint["status_reason"] is None
    assert "Traceback" not in server.output()


@pytest.mark.parametrize("written", ["pa?ss#1", "pa%3Fss%231"], ids=["as-is", "percent-encoded"])
def test_the_rate_limits_reach_a_cluster_whose_password_holds_a_question_mark(tmp_path, written):
    """A cluster URL's password is what comes before its last `@` (a `?` in it too: the store takes
    it so), over TLS or not: the rate limits' connections use that password too (`limits`, given
    the URL, could not parse it, and its error quoted it, password and all)."""
    node, tls_port, cert = tls_cluster_node(tmp_path)
    try:
        node.command("ACL", "SETUSER", "plants", "on", ">pa?ss#1", "~*", "&*", "+@all")
        tls = f"?ssl_ca_certs={cert}&ssl_check_hostname=false"
        for url in (
            f"redis+cluster://plants:{written}@127.0.0.1:{node.port}",
            f"rediss+cluster://plants:{written}@127.0.0.1:{tls_port}{tls}",
        ):
            settings = {"PLANTS_API_TOKENS": "t", "PLANTS_STORE_URL": url, "PLANTS_RATE_LIMIT": "100/second"}
            created = (
                create_app(settings)
                .test_client()
                .put("/plants/1", json={"name": "Fern"}, headers={"Authorization": "Bearer t"})
            )
            assert created.status_code in (200, 201), created.json
            assert created.headers["RateLimit-Limit"] == "100"
    finally:
        node.stop()


def test_rate_limits_on_a_cluster_down_at_the_start_answer_503_then_count_once_it_is_up(tmp_path):
    """The app starts with its cluster down, rate limits on (`limits`' cluster storage reaches the
    cluster as it is made, and stopped the start): a request is the store's JSON 503 until the
    cluster is up, then is served and counted."""
    node = RedisServer(tmp_path, *cluster_node())
    node.command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
    node.stop()
    try:
        settings = {
            "PLANTS_API_TOKENS": "t",
            "PLANTS_STORE_URL": f"redis+cluster://127.0.0.1:{node.port}",
            "PLANTS_RATE_LIMIT": "100/second",
            "PLANTS_STORE_CONNECT_TIMEOUT": 0.5,
        }
        client = create_app(settings).test_client()
        auth = {"Authorization": "Bearer t"}
        refused = client.put("/plants/1", json={"name": "Fern"}, headers=auth)
        assert refused.status_code == 503
        assert refused.json["error"] == 503
        node.start()
        deadline = time.monotonic() + 10
        while (created := client.put("/plants/1", json={"name": "Fern"}, headers=auth)).status_code == 503:
            assert time.monotonic() < deadline, created.json
            time.sleep(0.1)
        assert created.status_code in (200, 201), created.json
        assert created.headers["RateLimit-Limit"] == "100"
        assert client.get("/plants/1", headers=auth).json == {"name": "Fern"}
    finally:
        node.stop()


def test_a_full_shard_answers_507(fault_cluster):
    settings = cluster_settings(fault_cluster)
    store = open_cluster_store(settings)
    primary = fault_cluster.primaries()[0]
    primary.command("CONFIG", "SET", "maxmemory", "1")
    try:
        client = RedisCluster(host="127.0.0.1", port=primary.port)
        on_primary = next(
            plant_id for plant_id in range(100)
            if client.get_node_from_key(store.groups.bucket_key(plant_id)).port == primary.port
        )  # fmt: skip
        client.close()
        with pytest.raises(StoreFullError):
            store.create(on_primary, "Fern", None)
        # /readyz's answer: every node serves, one is full.
        assert store.readiness() == Readiness(full=True)
    finally:
        primary.command("CONFIG", "SET", "maxmemory", "0")
    assert store.readiness() == Readiness()
    assert store.create(on_primary, "Fern", None) is CreateOutcome.CREATED
    store.close()


def test_readiness_names_a_node_that_evicts_keys_at_its_maxmemory(fault_cluster):
    """One primary with an `allkeys-*` policy drops its groups' plants at its maxmemory rather than
    refuse them: /readyz's answer says so, naming the policy."""
    store = open_cluster_store(cluster_settings(fault_cluster))
    primary = fault_cluster.primaries()[-1]
    primary.command("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
    primary.command("CONFIG", "SET", "maxmemory", "1gb")
    try:
        assert store.readiness() == Readiness(evicting="allkeys-lru")
    finally:
        primary.command("CONFIG", "SET", "maxmemory", "0")
        primary.command("CONFIG", "SET", "maxmemory-policy", "noeviction")
    assert store.readiness() == Readiness()
    store.close()


def test_resharding_under_load_loses_nothing_and_answers_no_500(fault_cluster):
    settings = {**cluster_settings(fault_cluster), **SHORT_TIMEOUTS}
    server = redis_gunicorn(settings)
    start = json.loads(call(server.connection(), "GET", "/events?after=now", None, AUTH)[2])["next"]
    load = CreateLoad(server.port)
    follower = FeedFollower(server, start)
    try:
        load.wait_for(500)
        source, target = fault_cluster.primaries()[:2]
        # 2,000 slots hold about 3 of the 24 groups (their slots are evenly spaced).
        subprocess.run(
            ["redis-cli", "--cluster", "reshard", f"127.0.0.1:{source.port}",
             "--cluster-from", fault_cluster.node_id(source), "--cluster-to", fault_cluster.node_id(target),
             "--cluster-slots", "2000", "--cluster-yes"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        load.wait_for(500)
    finally:
        answers = load.stop()
        followed = follower.stop()
        server.stop()
    statuses = assert_only_200_and_503(answers)
    acknowledged = [plant_id for plant_id, status, _, _ in answers if status == 200]
    assert_readable(settings, acknowledged)
    store = open_cluster_store(settings)
    # The feed, followed through the reshard, then to its end: every create exactly once.
    created = followed + [event.plant_id for event in follow_store(store, follower.position)]
    assert len(created) == len(set(created))
    assert set(acknowledged) <= set(created)
    walked, after = [], None
    while True:
        page = store.page(after, 100)
        walked += [plant_id for plant_id, _, _ in page.plants]
        if page.next is None:
            break
        after = page.next
    store.close()
    # The indexes moved whole with their plants: every acknowledged create is listed, once. A create
    # answered 503 may have landed too (docs/redis-cluster.md: a write whose store timed out, as
    # on a loaded machine); no other is listed.
    assert len(walked) == len(set(walked))
    assert set(acknowledged) <= set(walked)
    answered_503 = {plant_id: body for plant_id, status, body, _ in answers if status == 503}
    landed = sorted(set(walked) - set(acknowledged))
    assert set(landed) <= set(answered_503), [(plant_id, answered_503.get(plant_id)) for plant_id in landed]
    assert_readable(settings, landed)
    assert sorted(created) == sorted(walked)  # and the feeds with them
    assert statuses[200] >= 1000
    assert "Traceback" not in server.output()


class FeedFollower:
    """A thread following the feed through the service, page by page, retrying 503s."""

    def __init__(self, server: Gunicorn, position: str) -> None:
        self.position = position
        self.created: list[int] = []
        self._server = server
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            status, _, body = call(
                self._server.connection(), "GET", f"/events?limit=50&after={self.position}", None, AUTH
            )
            if status == 200:
                page = json.loads(body)
                self.created += [event["plant"]["id"] for event in page["events"]]
                self.position = page["next"]
            else:
                assert status == 503, body
            time.sleep(0.02)

    def stop(self) -> list[int]:
        self._stop.set()
        self._thread.join(30)
        return self.created


def follow_store(store: Any, cursor: str) -> list[Any]:
    """The rest of the feed after `cursor`, read from the store directly."""
    position = decode_cursor(store.cursor_key(), cursor, None, EVENTS)
    events = []
    while True:
        page = store.events(position, 1000)
        if not page.events:
            return events
        events += page.events
        position = page.next


def test_a_script_never_runs_while_its_groups_slot_migrates(fault_cluster):
    """Halfway through a move some of a group's keys are on each node. A write then waits (and
    answers 503 after a second) having written nothing on either node; once the slot is stable it
    lands."""
    store = open_cluster_store(cluster_settings(fault_cluster))
    assert store.create(0, "Fern", "fern") is CreateOutcome.CREATED  # group 0 has keys on its node
    slot = key_slot(store.groups.tags[0].encode())
    client = RedisCluster(host="127.0.0.1", port=fault_cluster.primaries()[0].port)
    port = client.get_node_from_key(store.groups.tags[0]).port
    client.close()
    source = next(node for node in fault_cluster.nodes if node.port == port)
    target = next(node for node in fault_cluster.primaries() if node is not source)
    target.command("CLUSTER", "SETSLOT", str(slot), "IMPORTING", fault_cluster.node_id(source))
    source.command("CLUSTER", "SETSLOT", str(slot), "MIGRATING", fault_cluster.node_id(target))

    def keys_in_slot() -> list[str]:
        return [node.command("CLUSTER", "COUNTKEYSINSLOT", str(slot)) for node in (source, target)]

    try:
        before = keys_in_slot()
        # Both in group 0. 24's bucket is new: Redis answers TRYAGAIN (one declared key is here,
        # one is not). 65536 shares plant 0's bucket: both keys are here and the script runs, so
        # its own probe must refuse it before it writes (its new tag's index is not here).
        for plant_id in (24, 65536):
            with pytest.raises(StoreUnavailableError) as raised:
                store.create(plant_id, "Palm", "palm")
            assert raised.value.reason == "cluster"
            assert store.get(plant_id) is None
        assert keys_in_slot() == before
        assert len(store) == 1
        assert store.get(0) == Plant("Fern", "fern")  # reads follow ASK as ever
    finally:
        for node in (source, target):
            node.command("CLUSTER", "SETSLOT", str(slot), "STABLE")
    assert store.create(24, "Palm", "palm") is CreateOutcome.CREATED
    assert sorted(plant_id for plant_id, _, _ in store.page(None, 10).plants) == [0, 24]
    store.close()


def test_a_create_answered_503_for_want_of_a_replica_answers_200_when_retried(fault_cluster):
    """The 503 says the write may have landed; the client's retry is safe and, once a replica
    confirms, answers 200 with the plant (the replay rewrites it, so WAIT covers it)."""
    store = open_cluster_store(cluster_settings(fault_cluster), min_replicas=1)
    client = RedisCluster(host="127.0.0.1", port=fault_cluster.primaries()[0].port)
    port = client.get_node_from_key(store.groups.bucket_key(7)).port
    client.close()
    replica = fault_cluster.replica_of(next(node for node in fault_cluster.nodes if node.port == port))
    # A plant of the same group first: the pages' entry of that group is confirmed now, so the
    # replica stopped below fails the create's own write (the pages' shard may be the same one).
    neighbour = next(i for i in range(8, 100_000) if store.groups.of(i) == store.groups.of(7))
    assert store.create(neighbour, "Moss", None) is CreateOutcome.CREATED
    replica.signal(signal.SIGSTOP)
    try:
        with pytest.raises(StoreUnavailableError) as raised:
            store.create(7, "Fern", None)
        assert raised.value.reason == "replication"
        assert raised.value.node == f"127.0.0.1:{port}"  # the primary whose replica did not confirm
    finally:
        replica.signal(signal.SIGCONT)
    # The resumed replica takes a moment to read its link again (longer on a loaded machine): a
    # client retries a 503 until one confirms, and the retry then finds the plant that had landed.
    deadline, outcome = time.monotonic() + 30, None
    while outcome is None and time.monotonic() < deadline:
        try:
            outcome = store.create(7, "Fern", None)
        except StoreUnavailableError as error:
            if error.reason != "replication":
                raise
            time.sleep(0.2)
    assert outcome is CreateOutcome.IDENTICAL  # it had landed on the primary
    assert store.create(7, "Palm", None) is CreateOutcome.CONFLICT
    assert store.get(7) == Plant("Fern")
    store.close()


def test_a_request_failing_on_a_stopped_primary_is_logged_naming_that_node(fault_cluster):
    """A primary stopped (SIGSTOP, shorter than a failover takes): a create of a plant it serves
    answers 503, and the log line says which node timed out, not the whole cluster's URL."""
    settings = {**cluster_settings(fault_cluster), **SHORT_TIMEOUTS}
    server = redis_gunicorn(settings, workers=1)
    victim = fault_cluster.primaries()[0]
    client = RedisCluster(host="127.0.0.1", port=victim.port)
    store = open_cluster_store(settings)
    groups = store.groups
    store.close()
    plant_id = next(
        plant_id
        for plant_id in range(CLUSTER_GROUPS)
        if client.get_node_from_key(groups.bucket_key(plant_id)).port == victim.port
    )
    client.close()
    try:
        # A plant on each node first, so that the worker knows the slot map before the stop.
        for first in range(CLUSTER_GROUPS):
            assert call(server.connection(), "POST", "/plants", {"id": first, "name": "Fern"}, AUTH)[0] == 200
        victim.signal(signal.SIGSTOP)
        try:
            # The same bucket group as `plant_id`: the group is the id's low 16 bits modulo 24.
            status, _, _ = call(
                server.connection(), "POST", "/plants", {"id": plant_id + 24_000, "name": "Fern"}, AUTH
            )
        finally:
            victim.signal(signal.SIGCONT)
        assert status == 503
    finally:
        server.stop()
    (line,) = [line for line in server.output().splitlines() if "The plant store" in line]
    assert f"The plant store's node 127.0.0.1:{victim.port} did not answer: timed out" in line
    assert fault_cluster.url not in line


def move_slot_whole(
    cluster: RedisClusterServers, slot: int, source: RedisServer, target: RedisServer
) -> None:
    """Move `slot` with its keys from `source` to `target`, as redis-cli's reshard does."""
    source_id, target_id = cluster.node_id(source), cluster.node_id(target)
    target.command("CLUSTER", "SETSLOT", str(slot), "IMPORTING", source_id)
    source.command("CLUSTER", "SETSLOT", str(slot), "MIGRATING", target_id)
    while keys := source.command("CLUSTER", "GETKEYSINSLOT", str(slot), "100").split():
        source.command("MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", "KEYS", *keys)
    others = [node for node in cluster.primaries() if node not in (source, target)]
    for node in (target, source, *others):
        node.command("CLUSTER", "SETSLOT", str(slot), "NODE", target_id)


@pytest.mark.parametrize("slot_map", ["redis-py's", "public"])
def test_a_write_follows_its_groups_slot_to_the_node_it_moved_to(fault_cluster, slot_map, monkeypatch):
    """The store's scripts bypass RedisCluster's routing, so a MOVED is theirs to follow: the
    slot is pointed at its new node (through RedisCluster's slot map, or, where redis-py's map is
    not as app/compat/redis.py expects, through a one-key read RedisCluster routes itself), and
    the write lands there."""
    with contextlib.ExitStack() as stack:
        if slot_map == "public":
            monkeypatch.setattr(NodesManager, "move_slot", lambda self: None)
            stack.enter_context(reloaded(app.compat.redis))
            monkeypatch.undo()
            assert not app.compat.redis.SLOT_MAP
        follow_the_moved_slot(fault_cluster)
    assert app.compat.redis.SLOT_MAP


def follow_the_moved_slot(fault_cluster: RedisClusterServers) -> None:
    """A group's slot moves whole to another primary between two writes of the group."""
    store = open_cluster_store(cluster_settings(fault_cluster))
    moved = None
    try:
        assert store.create(0, "Fern", "fern") is CreateOutcome.CREATED
        slot = key_slot(store.groups.tags[0].encode())
        port = store_node_port(fault_cluster, store.groups.tags[0])
        source = next(node for node in fault_cluster.nodes if node.port == port)
        target = next(node for node in fault_cluster.primaries() if node is not source)
        move_slot_whole(fault_cluster, slot, source, target)
        moved = (source, target)
        assert store.create(24, "Palm", "palm") is CreateOutcome.CREATED  # group 0, as plant 0
        assert store.get(0) == Plant("Fern", "fern")
        assert store.get(24) == Plant("Palm", "palm")
        assert source.command("CLUSTER", "COUNTKEYSINSLOT", str(slot)) == "0"
        assert int(target.command("CLUSTER", "COUNTKEYSINSLOT", str(slot))) > 0
    finally:
        store.close()
        if moved is not None:
            move_slot_whole(fault_cluster, slot, moved[1], moved[0])


def store_node_port(cluster: RedisClusterServers, key: str) -> int:
    """The port of the primary that serves `key`, by a fresh slot map."""
    client = RedisCluster(host="127.0.0.1", port=cluster.primaries()[0].port)
    try:
        return int(client.get_node_from_key(key).port)
    finally:
        client.close()
