"""Writes whose bytes arrive late, and a cluster partitioned for real.

README ("Running with Redis") and docs/redis-cluster.md: a write that answered 503 took effect
within PLANTS_STORE_TIMEOUT of its start, or never; so it never lands after a later write that
answered 200. Here a proxy between the service and Redis holds one write's bytes until after a
later write of the same plant succeeded, then delivers them.
"""

from __future__ import annotations

import time

import pytest
from redis.cluster import RedisCluster

from app.store.redis.groups import CLUSTER_GROUPS, Groups
from tests import netns, partition_run
from tests.conftest import cluster_settings, redis_settings
from tests.load import redis_gunicorn
from tests.proxy import HoldingProxy
from tests.servers import RedisClusterServers

TIMEOUTS = {"PLANTS_STORE_TIMEOUT": 0.5, "PLANTS_STORE_CONNECT_TIMEOUT": 0.5}
PLANT = 7


@pytest.fixture
def store_settings():
    """Each test gives its own store through a proxy (make_app's settings)."""
    return {}


def put(client, auth, name: str) -> int:
    return client.put(f"/plants/{PLANT}", json={"id": PLANT, "name": name}, headers=auth).status_code


def put_acknowledged(client, auth, name: str) -> int:
    """A write not held: on a loaded machine its new connection may take its whole deadline (a 503
    whose fate is settled, README), so it is sent again, as a client would, a few times."""
    for _ in range(5):
        status = put(client, auth, name)
        if status != 503:
            break
    return status


def assert_held_write_never_lands_after_a_later_one(client, auth, proxy: HoldingProxy) -> None:
    assert put_acknowledged(client, auth, "version 1") in (200, 201)
    proxy.hold()
    assert put(client, auth, "version 2") == 503
    assert proxy.held_bytes > 0  # version 2 is on its way, held
    proxy.stop_holding()
    assert put_acknowledged(client, auth, "version 3") == 200
    proxy.release()
    # Redis answers the late bytes to a client that has gone.
    wait_until(lambda: proxy.orphan_replies)
    answer = client.get(f"/plants/{PLANT}", headers=auth)
    assert answer.status_code == 200
    assert answer.get_json()["name"] == "version 3"
    assert b"LATE" in b"".join(proxy.orphan_replies)  # the write refused itself


def test_a_write_held_in_the_network_never_lands_after_a_later_write_on_one_redis(
    redis_server, make_app, auth
):
    proxy = HoldingProxy(redis_server.port)
    try:
        settings = redis_settings(redis_server)
        settings["PLANTS_STORE_URL"] = f"redis://127.0.0.1:{proxy.port}/0"
        client = make_app(**settings, **TIMEOUTS).test_client()
        assert_held_write_never_lands_after_a_later_one(client, auth, proxy)
    finally:
        proxy.close()


@pytest.fixture
def small_cluster(tmp_path):
    cluster = RedisClusterServers(tmp_path, nodes=3, replicas=0)
    yield cluster
    cluster.stop()


def test_a_write_held_in_the_network_never_lands_after_a_later_write_on_a_cluster(
    small_cluster, make_app, auth
):
    settings = cluster_settings(small_cluster)
    groups = Groups(settings["PLANTS_STORE_PREFIX"], count=CLUSTER_GROUPS, capacity=1, cluster=True)
    probe = RedisCluster(host="127.0.0.1", port=small_cluster.nodes[0].port)
    try:
        port = probe.get_node_from_key(groups.bucket_key(PLANT)).port
    finally:
        probe.close()
    node = next(node for node in small_cluster.nodes if node.port == port)
    proxy = HoldingProxy(port)
    try:
        # The node tells clients to reach it through the proxy; the other nodes learn it by gossip.
        node.command("CONFIG", "SET", "cluster-announce-port", str(proxy.port))
        wait_until(
            lambda: all(str(proxy.port) in other.command("CLUSTER", "SLOTS") for other in small_cluster.nodes)
        )
        client = make_app(**settings, **TIMEOUTS).test_client()
        assert_held_write_never_lands_after_a_later_one(client, auth, proxy)
    finally:
        proxy.close()


def wait_until(condition, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


# A real partition: cluster nodes in network namespaces (tests/netns.py), packets dropped.

NODE_TIMEOUT_S = 3.0  # deploy/redis.conf's cluster-node-timeout
#: docs/redis-cluster.md: once a surviving node shows a cut-off primary's replica promoted, the
#: service finds it at its next read of the slot map, made every 0.25 s while writes time out on
#: the old primary (slot_map.py): within 1 s, and 0.5 s more for a busy machine.
FOLLOWS_PROMOTION_S = 1.5
#: A write's 503 leaves within PLANTS_STORE_TIMEOUT (1 s) and 0.2 s, waiting for no read of the
#: slot map; a write whose reply was lost (a flapping link) within twice that: the reads of its
#: group's feed and its second run share what is left of two timeouts (docs/redis-cluster.md,
#: app/store/redis/lost.py); 0.5 s more for a busy machine.
SLOWEST_503_S = 2.5
PREFIX = "partition"


@pytest.fixture
def namespaced_service(tmp_path):
    """3 primaries with 2 replicas each (a promoted replica has one to confirm its writes), and
    gunicorn (2 workers, the 1 s store timeout) with PLANTS_STORE_MIN_REPLICAS=1."""
    why_not = netns.available()
    if why_not:
        pytest.skip(f"network namespaces: {why_not}")
    cluster = netns.NamespacedCluster(
        tmp_path, primaries=3, replicas=2, node_timeout_ms=int(NODE_TIMEOUT_S * 1000)
    )
    try:
        server = redis_gunicorn(
            {"PLANTS_STORE_URL": cluster.url, "PLANTS_STORE_PREFIX": PREFIX, "PLANTS_STORE_MIN_REPLICAS": "1"}
        )
        try:
            yield cluster, server
        finally:
            server.stop()
    finally:
        cluster.close()


#: Each fault, its length, and the plants it writes (a range of its own). One test runs them all
#: on one cluster: the addresses and the guard route exist once on a machine, whatever the number
#: of test processes.
PARTITIONS = [("packets dropped", 8.0, 1000), ("primary-replica dropped", 4.0, 2000), ("flapping", 1.0, 3000)]


def test_partitions_lose_no_acknowledged_write_and_a_cut_shard_takes_writes_again_soon(namespaced_service):
    cluster, server = namespaced_service
    failures = []
    for fault, fault_s, first_plant in PARTITIONS:
        phase = partition_run.run_phase(
            cluster,
            server.port,
            PREFIX,
            fault,
            first_plant=first_plant,
            fault_s=fault_s,
            before_s=1.0,
            after_s=2.0,
        )
        cluster.wait_until_healthy(primaries=3)
        summary = phase.summary()
        print(summary)
        failures += [
            f"{fault}: {why}, in {summary}" for why in partition_failures(server.port, phase, fault_s)
        ]
    assert not failures, "\n".join(failures)


def partition_failures(port: int, phase: partition_run.Phase, fault_s: float) -> list[str]:
    """What went wrong in one fault's phase (every check, so that one failure hides no other)."""
    failures = [f"{name}: {n}" for name, n in partition_run.verdict(port, phase.answers).items() if n]
    summary = phase.summary()
    if phase.fault == "packets dropped":
        # The shard follows its promoted replica while the old primary is still cut off.
        followed = summary["faulted shard's first write after its replica's promotion s"]
        if phase.promoted_at is None or summary["replica promoted after s"] >= fault_s:
            failures.append("no replica promoted while the primary was cut off")
        elif followed is None or followed > FOLLOWS_PROMOTION_S:
            failures.append(f"the shard's first write {followed} s after the promotion")
    elif phase.promoted_at is not None:
        # Shorter than the node timeout, or between two nodes that others reach: no failover.
        failures.append("a replica was promoted")
    if summary["slowest 503 s"] > SLOWEST_503_S:
        failures.append(f"a 503 after {summary['slowest 503 s']} s")
    if summary["healthy shards' 503"]:
        # cluster-require-full-coverage no: the other shards serve while one fails over.
        failures.append("a shard that was not cut off answered 503")
    if phase.fault == "primary-replica dropped" and summary["longest a shard took no write s"] >= 1.0:
        # With a second replica to confirm its writes, the primary goes on taking them.
        failures.append("a shard stopped taking writes")
    return failures
