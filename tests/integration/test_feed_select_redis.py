"""A single Redis's and a cluster's filtered read of the feed (`feed_select`), judged by the feed's
script, answers what picking from whole entries answers (`FeedSelection.pick` of `feed_entries`):
the same entries, end, counts and feed's end, for every filter, position, limit and read length.
The plants' names and tags hold what the script parses around (spaces, colons, bytes of more
than one byte, a tag that looks like a number), and updates move plants between tags."""

from __future__ import annotations

import itertools
import random

import pytest

from app.store import KEEP, UNCONDITIONAL, store_from_url
from app.store.base import FeedSelection
from tests.conftest import settings_for_store

#: Ids in several of a cluster's bucket groups, a negative one and a large one among them.
IDS = (1, 2, 3, 5, 40_001, 70_003, -7, 2**40 + 3)
TAGS = ("a", "b c", "ü:1", "7", None)
NAMES = ("n", "a b: c", "3:x", "fougère 1", "")
SELECTIONS = [
    FeedSelection(tags=frozenset({"a"})),
    FeedSelection(tags=frozenset({"a", "ü:1"}), kinds=frozenset({1})),
    FeedSelection(tags=frozenset({"b c", "7"})),
    FeedSelection(ids=frozenset({3, -7})),
    FeedSelection(ids=frozenset({2**40 + 3}), tags=frozenset({"b c"})),
    FeedSelection(kinds=frozenset({2})),
    FeedSelection(kinds=frozenset({0, 1}), ids=frozenset({1, 2, 3, 40_001})),
    FeedSelection(tags=frozenset({"absent"})),
    FeedSelection(ids=frozenset()),
]


def write_randomly(store, writes: int, seed: int) -> None:
    """Creates, renames, retags and deletes of IDS, each recorded in the feed."""
    rng = random.Random(seed)
    for _ in range(writes):
        plant_id = rng.choice(IDS)
        if store.get(plant_id) is None:
            store.create(plant_id, rng.choice(NAMES) or "x", rng.choice(TAGS))
        elif rng.random() < 0.2:
            store.delete(plant_id)
        else:
            name = rng.choice((KEEP, *NAMES[:-1]))
            store.change(plant_id, name, rng.choice(TAGS), UNCONDITIONAL, create=False)


@pytest.mark.parametrize("kind", ["redis", "cluster"])
def test_the_script_selects_what_picking_from_whole_entries_selects(request, kind):
    settings = settings_for_store(request, kind)
    store = store_from_url(
        settings["PLANTS_STORE_URL"],
        capacity=100,
        prefix=settings["PLANTS_STORE_PREFIX"],
        connect_timeout=1,
        timeout=5,
        events_retain=1000,
    )
    try:
        write_randomly(store, 40, seed=len(kind))
        entries, _ = store.feed_entries(None, 1000)
        assert len(entries) > 30  # an update that changed nothing recorded nothing
        starts = [None, *(entry.position for entry in entries[::3]), entries[-1].position]
        for after, selection, limit, read_most in itertools.product(
            starts, SELECTIONS, (1, 2, 5), (1, 3, 16, 64)
        ):
            whole, end = store.feed_entries(after, read_most)
            expected = selection.pick(whole, end, read_most, limit)
            assert store.feed_select(after, limit, selection, read_most=read_most) == expected, (
                after,
                selection,
                limit,
                read_most,
            )
    finally:
        store.close()
