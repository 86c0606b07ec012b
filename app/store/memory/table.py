"""The memory store's plants: each one's name and tag by id, and the ids in order, overall and
per tag, that a page walks. The store (store.py) guards it with its lock and keeps the rest: the
capacity, the preconditions and the feed."""

from __future__ import annotations

import heapq
import sys
from collections.abc import Collection, Iterator
from itertools import islice

from sortedcontainers import SortedList

#: The plants are spread over this many pairs of dicts, by id. A dict that outgrows its table is
#: copied whole, under the lock and the GIL: with hundreds of thousands of plants in one pair, a
#: growth paused every request for tens of milliseconds (bench/README.md). Spread, a growth
#: copies a thousandth.
SHARDS = 1024


class PlantTable:
    """Dicts for the plants, sorted lists for pages; not thread-safe on its own.

    Names and tags live in separate dicts keyed by id rather than as one record object per
    plant: at a million plants a tuple per plant costs ~20 bytes more. Tags repeat, so they are
    interned and shared. Each is spread over SHARDS dicts by id, so no growth pauses the store.
    Pages come from a SortedList of every id and one per tag, which hold references to the
    dicts' own int objects (about 8 bytes a plant each).
    """

    def __init__(self) -> None:
        self.names: list[dict[int, str]] = [{} for _ in range(SHARDS)]
        self.tags: list[dict[int, str]] = [{} for _ in range(SHARDS)]
        self.count = 0
        self.ids = SortedList()
        self.ids_by_tag: dict[str, SortedList] = {}

    def add(self, plant_id: int, name: str, tag: str | None) -> str | None:
        """Add a plant whose id is new; its tag, interned (None for none)."""
        self.names[plant_id % SHARDS][plant_id] = name
        self.count += 1
        self.ids.add(plant_id)
        return self.tag(plant_id, tag)

    def remove(self, plant_id: int) -> None:
        """Remove a plant that is there."""
        del self.names[plant_id % SHARDS][plant_id]
        self.count -= 1
        self.ids.remove(plant_id)
        self.untag(plant_id)

    def tag(self, plant_id: int, tag: str | None) -> str | None:
        """Index the plant under its tag; the tag, interned (None for none)."""
        if tag is not None:
            tag = self.tags[plant_id % SHARDS][plant_id] = sys.intern(tag)
            tagged = self.ids_by_tag.get(tag)
            if tagged is None:
                tagged = self.ids_by_tag[tag] = SortedList()
            tagged.add(plant_id)
        return tag

    def untag(self, plant_id: int) -> None:
        tag = self.tags[plant_id % SHARDS].pop(plant_id, None)
        if tag is not None:
            tagged = self.ids_by_tag[tag]
            tagged.remove(plant_id)
            if not tagged:
                del self.ids_by_tag[tag]

    def page(
        self, after_id: int | None, limit: int, tags: Collection[str] | None
    ) -> tuple[list[tuple[int, str, str | None]], bool]:
        """Up to `limit` plants (id, name, tag) after `after_id`, in id order, of any tag or of
        one of `tags`; and whether more follow."""
        if tags is None:
            ids: Iterator[int] = _above(self.ids, after_id)
        else:
            # A plant has one tag, so the tags' lists are disjoint: a merge never repeats an id.
            ids = heapq.merge(
                *(_above(self.ids_by_tag[tag], after_id) for tag in tags if tag in self.ids_by_tag)
            )
        found = list(islice(ids, limit + 1))
        names, stored_tags = self.names, self.tags
        plants = [
            (plant_id, names[plant_id % SHARDS][plant_id], stored_tags[plant_id % SHARDS].get(plant_id))
            for plant_id in found[:limit]
        ]
        return plants, len(found) > limit


def _above(ids: SortedList, after: int | None) -> Iterator[int]:
    return ids.irange(minimum=after, inclusive=(False, True))
