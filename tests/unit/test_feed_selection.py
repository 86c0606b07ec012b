"""The memory store's filtered read of its feed (`feed_select`), judged on its columns, answers what
picking from whole entries answers (`FeedSelection.pick`, as Redis does): the same entries, end,
counts and feed's end, for every filter, position, limit and read length, across the ring's wrap."""

from __future__ import annotations

import itertools
import random

import pytest

from app.store import MemoryPlantStore
from app.store.base import Event, FeedEntry, FeedSelection, Selected, selected_of
from app.store.memory.feed import MemoryFeed, select_from

TAGS = ("a", "b", "c", None)
SELECTIONS = [
    FeedSelection(tags=frozenset({"a"})),
    FeedSelection(tags=frozenset({"a", "c"}), kinds=frozenset({1})),
    FeedSelection(ids=frozenset({3, 5})),
    FeedSelection(ids=frozenset({3}), tags=frozenset({"b"})),
    FeedSelection(kinds=frozenset({2})),
    FeedSelection(kinds=frozenset({0, 1}), ids=frozenset({1, 2, 3, 4})),
    FeedSelection(tags=frozenset({"absent"})),
]


def filled(retain: int, events: int, seed: int) -> MemoryFeed:
    rng = random.Random(seed)
    feed = MemoryFeed(retain)
    for _ in range(events):
        tag, before = rng.choice(TAGS), rng.choice(TAGS)
        feed.append(rng.randrange(3), rng.randrange(8), "n", tag, "", before)
    return feed


@pytest.mark.parametrize(
    ("retain", "events", "carried_into"),
    [(50, 30, None), (50, 237, None), (7, 7, None), (7, 100, None), (20, 53, 30), (20, 53, 7)],
)
def test_the_columns_select_what_picking_from_whole_entries_selects(retain, events, carried_into):
    feed = filled(retain, events, seed=retain * 1000 + events)
    if carried_into is not None:  # a reload's feed kept with another retention: its slots shifted
        feed, kept = MemoryFeed(carried_into), vars(feed)
        feed.carry(kept)
    oldest = feed.count(feed.entries(None, 1)[0][0].position)
    starts = [None, *(n.to_bytes(8, "big") for n in range(oldest - 1, events + 1))]
    for after, selection, limit, read_most in itertools.product(
        starts, SELECTIONS, (1, 2, 5), (1, 3, 16, 64)
    ):
        entries, end = feed.entries(after, read_most)
        assert select_from(feed, after, limit, selection, read_most) == selection.pick(
            entries, end, read_most, limit
        )


def test_the_store_selects_under_its_lock_as_its_feed_does():
    store = MemoryPlantStore(capacity=10, events_retain=10)
    for plant_id, tag in enumerate(("a", "b", "a", None)):
        store.create(plant_id, "n", tag)
    selected = store.feed_select(None, 10, FeedSelection(tags=frozenset({"a"})), read_most=100)
    assert [entry.event.plant_id for entry in selected.entries] == [0, 2]
    assert (selected.read, selected.passed, selected.at_end) == (4, 1, True)
    assert selected.end == store.events_now()


def numbered(n: int) -> FeedEntry:
    return FeedEntry(Event(0, n, "n", None, 0), str(n), n.to_bytes(8, "big"))


END = b"end"


@pytest.mark.parametrize(
    ("selected", "asked", "limit", "expected"),
    [
        # Fewer selected than `limit`: it ends where the read ended, and counts what followed the last.
        ((0, 1, 0, 1, 0), 5, 5, ([1, 3], END, 5, 1, False)),
        ((0, 1, 0, 1, 0), 8, 5, ([1, 3], END, 5, 1, True)),
        ((), 3, 1, ([], END, 0, 0, True)),
        # `limit` found: it ends after the last selected, at the feed's end only if nothing followed.
        ((0, 1, 0, 1, 0), 8, 2, ([1, 3], (3).to_bytes(8, "big"), 4, 0, False)),
        ((0, 1, 0, 1), 8, 2, ([1, 3], (3).to_bytes(8, "big"), 4, 0, True)),
        ((0, 1, 0, 1), 4, 2, ([1, 3], (3).to_bytes(8, "big"), 4, 0, False)),
    ],
)
def test_a_filtered_read_ends_after_its_limit_or_its_read(selected, asked, limit, expected):
    """The one bookkeeping of every filtered read that judges after it reads (Redis's, `pick`):
    the entries, the position after them, the events read and passed over since the last, and
    whether the feed's end was reached."""
    candidates = [numbered(n) if chosen else None for n, chosen in enumerate(selected)]
    answer = selected_of(candidates, asked, limit, end=lambda: END, more=lambda read: read < len(candidates))
    entries, end, read, passed, at_end = expected
    assert answer == Selected([numbered(n) for n in entries], end, read, passed, at_end)
