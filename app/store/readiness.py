"""What a store can serve right now, for `/readyz`: everything, or everything but the bucket
groups of some failing nodes, and whether it is full (Redis at its `maxmemory`: reads and
deletes served, new plants and changes refused), and whether it evicts keys at that maxmemory
(an `allkeys-*` policy: plants and events vanish instead of a write being refused). A store
that can serve nothing raises StoreUnavailableError instead."""

from __future__ import annotations

from typing import NamedTuple


class FailingNode(NamedTuple):
    """A node whose groups' plants cannot be served now, and why (for people: no password)."""

    node: str
    groups: tuple[int, ...]
    cause: str


class Readiness(NamedTuple):
    failing: tuple[FailingNode, ...] = ()
    full: bool = False
    #: Redis's maxmemory-policy when it evicts the service's keys (a node's, on a cluster), else "".
    evicting: str = ""

    @property
    def degraded(self) -> bool:
        return bool(self.failing) or self.full or bool(self.evicting)


READY = Readiness()
#: What an evicting store means, for people (/readyz, the start's log): `{policy}` is Redis's.
EVICTING = (
    "Redis (or one node of a cluster) evicts keys at its maxmemory (maxmemory-policy {policy}):"
    " plants and events stored can vanish without a trace. Set maxmemory-policy noeviction."
)
