"""On a Redis Cluster with PLANTS_STORE_MIN_REPLICAS=1, a create answered 200 is on a replica, and so
is what lists it: the sets of groups a page reads (hints.py) live on the shard of the prefix's own
hash tag, not the plant's, and a failover of that shard must not take an acknowledged plant off
every page."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest
from redis.cluster import RedisCluster
from redis.crc import key_slot

from app.store import CreateOutcome, Plant, StoreUnavailableError, store_from_url
from tests.conftest import cluster_settings
from tests.servers import RedisClusterServers, RedisServer


@pytest.fixture
def own_cluster(tmp_path):
    cluster = RedisClusterServers(tmp_path)
    yield cluster
    cluster.stop()


def _node_of(cluster: RedisClusterServers, key: str) -> RedisServer:
    client = RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    try:
        port = client.get_node_from_key(key).port
    finally:
        client.close()
    return next(node for node in cluster.nodes if node.port == port)


def _listed(store) -> list[int]:
    """The ids of the store's first page, read again while it answers 503 (a failover under way:
    the service finds the promoted replica by itself), for at most 30 s."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return [plant[0] for plant in store.page(None, 100).plants]
        except StoreUnavailableError:
            assert time.monotonic() < deadline, "the pages answered 503 for 30 s"
            time.sleep(0.1)


def _confirming_store(cluster: RedisClusterServers) -> tuple[Any, str]:
    """A store of its own prefix whose writes a replica confirms (PLANTS_STORE_MIN_REPLICAS=1)."""
    settings = cluster_settings(cluster)
    prefix = settings["PLANTS_STORE_PREFIX"]
    url = settings["PLANTS_STORE_URL"]
    store = store_from_url(url, capacity=1000, prefix=prefix, connect_timeout=1, timeout=1, min_replicas=1)
    return store, prefix


def test_a_create_whose_pages_entry_no_replica_confirms_is_503_and_an_acknowledged_one_stays_listed(
    own_cluster,
):
    store, prefix = _confirming_store(own_cluster)
    try:
        hints = _node_of(own_cluster, f"{{{prefix}}}:groups:a")
        # A plant whose group lives on another shard: its own replica runs and confirms it.
        plant_id = next(
            n
            for n in range(1, 100)
            if _node_of(own_cluster, store.groups.count_key(store.groups.of(n))) != hints
        )
        hints_replica = own_cluster.replica_of(hints)
        hints_replica.signal(signal.SIGSTOP)
        try:
            with pytest.raises(StoreUnavailableError) as refused:
                store.create(plant_id, "Boston fern", "fern")
        finally:
            hints_replica.signal(signal.SIGCONT)
        assert refused.value.reason == "replication"
        # Refused before its script ran: nothing stored.
        assert store.get(plant_id) is None
        own_cluster.wait_until_healthy()
        # The resumed replica takes a moment to read its link again (longer on a loaded machine):
        # a client retries the 503 until one confirms.
        deadline, outcome = time.monotonic() + 30, None
        while outcome is None:
            try:
                outcome = store.create(plant_id, "Boston fern", "fern")
            except StoreUnavailableError as error:
                if error.reason != "replication" or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert outcome is CreateOutcome.CREATED
        assert _listed(store) == [plant_id]
        # The entry is on the replica: with the shard's primary lost, the plant is still listed.
        hints.kill()
        deadline = time.monotonic() + 30
        while not hints_replica.command("ROLE").startswith("master"):
            assert time.monotonic() < deadline, "the replica was not promoted"
            time.sleep(0.05)
        assert _listed(store) == [plant_id]
        assert store.get(plant_id) == Plant("Boston fern", "fern")
    finally:
        store.close()


def test_a_create_while_the_pages_sets_slot_migrates_lands_its_entry_on_the_importing_node(own_cluster):
    """Resharding moves the slot of the prefix's hash tag (the pages' sets) key by key: a set not
    on the migrating node any more, or not yet made, is answered ASK there. The create whose
    group's entry was new answered 503 (an AskError named in its message) for the whole move,
    where without PLANTS_STORE_MIN_REPLICAS it was created; it now adds the entry on the node ASK
    names, confirmed by that node's replica, and the plant stays listed once the slot is moved."""
    store, prefix = _confirming_store(own_cluster)
    try:
        key = f"{{{prefix}}}:groups:a"
        slot = str(key_slot(key.encode()))
        source = _node_of(own_cluster, key)
        target = next(node for node in own_cluster.primaries() if node is not source)
        plant_id = next(
            n
            for n in range(1, 100)
            if _node_of(own_cluster, store.groups.count_key(store.groups.of(n))) != source
        )
        target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", own_cluster.node_id(source))
        source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", own_cluster.node_id(target))
        assert store.create(plant_id, "Boston fern", "fern") is CreateOutcome.CREATED
        # The entries (every plant's set, and its tag's hint's) are on the importing node.
        assert [node.command("CLUSTER", "COUNTKEYSINSLOT", slot) for node in (source, target)] == ["0", "2"]
        # The move ends: the slot (and the entry) is the importing node's.
        for node in own_cluster.primaries():
            node.command("CLUSTER", "SETSLOT", slot, "NODE", own_cluster.node_id(target))
        assert _listed(store) == [plant_id]
        assert store.get(plant_id) == Plant("Boston fern", "fern")
    finally:
        store.close()
