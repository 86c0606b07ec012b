"""Whether a Redis store can serve, asked for `/readyz`: a PING is not enough.

A single Redis must be a primary (a replica refuses every write), asked on a connection made for
the probe, which resolves the name afresh (a failover behind the same name moves every connection:
`_single`) and not a Redis
Cluster node (which redirects most keys elsewhere); one past its `maxmemory` is full (it serves
reads and deletes, and refuses every other write); one whose maxmemory-policy evicts any key drops
plants and events there instead of refusing. On a cluster, one read of each node's first group tells
which nodes fail: the store is degraded while only some do, and unavailable when all do; and
the INFO memory of each node that serves tells whether one is full. A page that finds its
group's `:layout` missing asks the same of its node (`unindexed`): evicted, or a 1.0.0 store.
"""

from __future__ import annotations

from typing import Any

from app.store.base import StoreUnavailableError
from app.store.readiness import EVICTING, READY, FailingNode, Readiness
from app.store.redis.client import LazyClient
from app.store.redis.failures import CLUSTER_NODE_AS_PLAIN, FAILURES
from app.store.redis.groups import Groups
from app.store.redis.renewal import fresh_client


def probe(clients: LazyClient, groups: Groups) -> Readiness:
    client = clients.get()
    if not clients.cluster:
        return _single(clients, client)
    by_node: dict[str, list[int]] = {}
    for group, tag in enumerate(groups.tags):
        by_node.setdefault(client.get_node_from_key(tag).name, []).append(group)
    failing = []
    shard_full = False
    evicts = ""
    for node, members in by_node.items():
        key = groups.count_key(members[0])
        try:
            clients.read(key, "EXISTS", key)
            memory = clients.node_for(key).info("memory")
            shard_full, evicts = shard_full or full(memory), evicts or evicting(memory)
        except StoreUnavailableError as exc:
            failing.append(FailingNode(node, tuple(members), str(exc)))
        except FAILURES:
            pass  # the node served its key: whether it is full is unknown, and not a failure
    if len(failing) == len(by_node):
        causes = "; ".join(f"{failed.node}: {failed.cause}" for failed in failing)
        raise StoreUnavailableError("cluster", f"no node of the cluster serves its plants ({causes})")
    return Readiness(tuple(failing), full=shard_full, evicting=evicts)


def _single(clients: LazyClient, client: Any) -> Readiness:
    # Asked on a connection made now, which resolves the name afresh: the server the name names,
    # not the one the process's connections reach. When that is another server than at the last
    # probe (a failover behind the same name), every connection connects again (`renew`): a
    # process that only reads would otherwise read on from the old primary, a replica now
    # (possibly lagging, or detached), for as long as none of its writes meets READONLY.
    fresh = fresh_client(client)
    try:
        pipe = fresh.pipeline(transaction=False)
        for section in ("replication", "cluster", "memory", "server"):
            pipe.info(section)
        replication, cluster, memory, server = pipe.execute()
    finally:
        fresh.close()
    if clients.server_changed(server.get("run_id")):
        clients.renew(client)
    if cluster.get("cluster_enabled"):
        raise StoreUnavailableError("wrong_kind", CLUSTER_NODE_AS_PLAIN)
    if replication.get("role") != "master":
        raise StoreUnavailableError(
            "read_only",
            "it is a read-only replica (Redis: role:slave): set PLANTS_STORE_URL to its primary",
        )
    readiness = Readiness(full=full(memory), evicting=evicting(memory))
    return readiness if readiness.degraded else READY


#: What the operator does once Redis keeps every key: the migration indexes the plants that remain
#: and writes each group's mark again, on a single Redis and on a cluster (app/store/migrate.py).
REINDEX = (
    "run `python -m app.store.migrate` once, with room under Redis's maxmemory for the indexes"
    " (/readyz says `full` while there is none): it indexes the plants that remain and writes the mark"
    " again"
)


def unindexed(clients: LazyClient, key: str, needs_migration: StoreUnavailableError) -> StoreUnavailableError:
    """The error for a page whose group has plants but no `:layout`, the mark that its indexes hold
    them all: Redis evicted it if the node that serves `key` evicts keys, or has evicted some since
    it started (INFO read only on this rare path), or is a cluster's (1.0.0 never ran on one); else
    the store was written by 1.0.0 (`needs_migration`). Either way the migration is the fix, once
    Redis keeps every key."""
    try:
        node = clients.node_for(key)
        policy = evicting(node.info("memory"))
        evicted = int(node.info("stats").get("evicted_keys") or 0)
    except FAILURES:
        return needs_migration  # unknown: the page's own error stands
    cause = "Redis evicted the mark that the store's plants are indexed, so it cannot list them. "
    if policy:
        steps = EVICTING.format(policy=policy) + f" Then {REINDEX}."
        return StoreUnavailableError("evicted", cause + steps, needs_migration.node)
    if evicted or clients.cluster:
        seen = f" (Redis: evicted_keys:{evicted})" if evicted else " (or it was deleted)"
        return StoreUnavailableError(
            "evicted", f"{cause.rstrip('. ')}{seen}: {REINDEX}.", needs_migration.node
        )
    return needs_migration


def full(memory: dict[str, Any]) -> bool:
    """Whether Redis refuses writes for memory, from its INFO memory: what it counts against
    `maxmemory` (its buffers for replicas and the AOF are not) is past it, after the evictions
    its policy allows, which Redis makes before each command, this INFO included."""
    limit = int(memory.get("maxmemory") or 0)
    counted = int(memory.get("used_memory") or 0) - int(memory.get("mem_not_counted_for_evict") or 0)
    return 0 < limit < counted


def evicting(memory: dict[str, Any]) -> str:
    """Redis's maxmemory-policy when, at its maxmemory, it drops any key (a plant, an index leaf,
    a feed's stream) rather than refuse the write; "" when it refuses (`noeviction`) or drops only
    keys that expire (`volatile-*`: the service's are leases and counters), or has no maxmemory."""
    policy = str(memory.get("maxmemory_policy") or "")
    return policy if int(memory.get("maxmemory") or 0) and policy.startswith("allkeys-") else ""
