"""Which bucket groups each index has ever used, so that a cluster's pages skip the groups it never did.

A cluster spreads plants over `CLUSTER_GROUPS` groups, and one page reads at most a few of them.
Without hints a small store, or a rare tag, would be walked through many empty pages. Each
index (`a`, every plant; `t<tag>`) keeps a set `{prefix}:groups:<index>` of the groups that have
held one of its plants. A create adds its group to the sets *before* its script runs, and a group
is never removed, so a page that reads the sets first skips only groups that never held a plant
of its indexes. On a single Redis there is one group and no set.
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any

from app.store.redis.groups import Groups

#: Hints this process knows are set, kept so a create costs no round trip once its group is known.
_REMEMBERED = 100_000


class GroupHints:
    def __init__(self, prefix: str, groups: Groups) -> None:
        self._prefix = prefix
        self._groups = groups
        self._known: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def _key(self, index: str) -> str:
        return f"{{{self._prefix}}}:groups:{index}"

    def note(self, client: Any, plant_id: int, tag: str | None) -> None:
        """Before a create: its group is in the sets of its indexes. Raises what Redis raises."""
        if self._groups.count == 1:
            return
        group = self._groups.of(plant_id)
        missing = [index for index in ("a", None if tag is None else "t" + tag) if index is not None]
        missing = [index for index in missing if (index, group) not in self._known]
        if not missing:
            return
        pipe = client.pipeline(transaction=False)
        for index in missing:
            pipe.sadd(self._key(index), group)
        pipe.execute()
        with self._lock:
            if len(self._known) > _REMEMBERED:
                self._known.clear()
            self._known.update((index, group) for index in missing)

    def used(self, client: Any, indexes: Collection[str]) -> list[int]:
        """The groups that ever held a plant of one of `indexes`, in order."""
        if self._groups.count == 1:
            return [0]
        pipe = client.pipeline(transaction=False)
        for index in indexes:
            pipe.smembers(self._key(index))
        return sorted({int(group) for members in pipe.execute() for group in members})
