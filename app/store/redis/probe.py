"""Whether a Redis store can serve, asked for `/readyz`: a PING is not enough.

A single Redis must be a primary (a replica refuses every write) and not a Redis Cluster node
(which redirects most keys elsewhere). On a cluster, one read of each node's first group tells
which nodes fail: the store is degraded while only some do, and unavailable when all do.
"""

from __future__ import annotations

from typing import Any

from app.store.base import StoreUnavailableError
from app.store.readiness import READY, FailingNode, Readiness
from app.store.redis.client import LazyClient
from app.store.redis.failures import CLUSTER_NODE_AS_PLAIN
from app.store.redis.groups import Groups


def probe(clients: LazyClient, groups: Groups) -> Readiness:
    client = clients.get()
    if not clients.cluster:
        return _single(client)
    by_node: dict[str, list[int]] = {}
    for group, tag in enumerate(groups.tags):
        by_node.setdefault(client.get_node_from_key(tag).name, []).append(group)
    failing = []
    for node, members in by_node.items():
        key = groups.count_key(members[0])
        try:
            clients.read(key, "EXISTS", key)
        except StoreUnavailableError as exc:
            failing.append(FailingNode(node, tuple(members), str(exc)))
    if len(failing) == len(by_node):
        causes = "; ".join(f"{failed.node}: {failed.cause}" for failed in failing)
        raise StoreUnavailableError("cluster", f"no node of the cluster serves its plants ({causes})")
    return Readiness(tuple(failing))


def _single(client: Any) -> Readiness:
    replication, cluster = client.pipeline(transaction=False).info("replication").info("cluster").execute()
    if cluster.get("cluster_enabled"):
        raise StoreUnavailableError("wrong_kind", CLUSTER_NODE_AS_PLAIN)
    if replication.get("role") != "master":
        raise StoreUnavailableError(
            "read_only",
            "it is a read-only replica (Redis: role:slave): set PLANTS_STORE_URL to its primary",
        )
    return READY
