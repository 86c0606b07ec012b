"""Which parked watchers a change wakes (app/watch/wake_index.py): those whose filter it may
concern, everyone for a change not known, and everyone at each sweep but those it turns (a
filtered stream that moves at a turn without reading), which it turns three times as often."""

from app.store import CREATED_EVENT, DELETED_EVENT, UPDATED_EVENT
from app.watch.filters import EventFilter
from app.watch.wake_index import Touched, WakeIndex, WokenTally


def watcher(name: str, woken: list[str]):
    return lambda: woken.append(name)


def filed(index: WakeIndex, woken: list[str], **filters) -> dict:
    wakes = {}
    for name, only in filters.items():
        wakes[name] = watcher(name, woken)
        index.add(wakes[name], only)
    return wakes


def fire(index: WakeIndex, change: Touched | None, woken: list[str]) -> list[str]:
    for wake in index.take(change):
        wake()
    taken = sorted(woken)
    woken.clear()
    return taken


def test_a_change_wakes_the_watchers_of_its_tag_id_and_type_and_the_unfiltered():
    index, woken = WakeIndex(), []
    filed(
        index,
        woken,
        green=EventFilter(tags=frozenset({"green"})),
        blue=EventFilter(tags=frozenset({"blue"})),
        seven=EventFilter(ids=frozenset({7}), tags=frozenset({"blue"})),
        deletes=EventFilter(kinds=frozenset({DELETED_EVENT})),
        everything=None,
    )
    assert fire(index, Touched(CREATED_EVENT, 1, ("green",)), woken) == ["everything", "green"]
    assert len(index) == 3  # the woken are taken out until they park again
    assert fire(index, Touched(CREATED_EVENT, 7, (None,)), woken) == ["seven"]
    assert fire(index, Touched(DELETED_EVENT, 2, ("red",)), woken) == ["deletes"]
    assert len(index) == 1


def test_a_change_whose_tags_are_not_known_wakes_every_watcher_filed_by_tag():
    index, woken = WakeIndex(), []
    filed(
        index,
        woken,
        green=EventFilter(tags=frozenset({"green"})),
        blue=EventFilter(tags=frozenset({"blue", "green"})),
        seven=EventFilter(ids=frozenset({7})),
    )
    assert fire(index, Touched(UPDATED_EVENT, 3, None), woken) == ["blue", "green"]
    assert fire(index, None, woken) == ["seven"]  # not known at all: everyone
    assert len(index) == 0


def test_removed_watchers_are_not_woken_and_leave_no_bucket_behind():
    index, woken = WakeIndex(), []
    wakes = filed(index, woken, both=EventFilter(tags=frozenset({"a", "b"})), plain=None)
    index.remove(wakes["both"])
    index.remove(wakes["plain"])
    assert len(index) == 0
    assert fire(index, Touched(CREATED_EVENT, 1, ("a",)), woken) == []
    assert index._filed == {}


def test_every_sweep_wakes_everyone_so_no_position_falls_behind():
    index, woken = WakeIndex(sweep_every=3), []
    for round_ in range(2):
        filed(index, woken, quiet=EventFilter(tags=frozenset({"quiet"})))
        assert fire(index, Touched(CREATED_EVENT, 1, ("loud",)), woken) == [], round_
        assert fire(index, Touched(CREATED_EVENT, 2, ("loud",)), woken) == []
        assert fire(index, Touched(CREATED_EVENT, 3, ("loud",)), woken) == ["quiet"]


def test_the_tally_counts_each_change_in_its_bucket():
    tally = WokenTally()
    for woken in (0, 1, 2, 3, 20_000):
        tally.observe(woken)
    assert tally.counts == [1, 1, 1, 1, 0, 0, 0, 0, 1]
    assert (tally.changes, tally.total) == (5, 20_006)


def test_changes_heard_together_wake_the_watchers_of_each_once():
    index, woken = WakeIndex(), []
    filed(index, woken, **{tag: EventFilter(tags=frozenset({tag})) for tag in ("green", "blue", "red")})
    heard = [Touched(UPDATED_EVENT, 1, ("blue", "green")), Touched(CREATED_EVENT, 2, ("green", "green"))]
    for wake in index.take_all(heard):
        wake()
    assert sorted(woken) == ["blue", "green"]
    assert len(index) == 1


def test_the_sweep_turns_a_watcher_that_moves_without_reading_thrice_as_often_and_leaves_it_filed():
    index, woken = WakeIndex(sweep_every=6), []
    filed(index, woken, reads=EventFilter(tags=frozenset({"quiet"})))
    turning = watcher("turns", woken)
    index.add(turning, EventFilter(tags=frozenset({"still"})), turns=True)
    loud = [Touched(CREATED_EVENT, n, ("loud",)) for n in range(12)]
    assert [fire(index, change, woken) for change in loud[:6]] == [
        [],
        ["turns"],
        [],
        ["turns"],
        [],
        ["reads", "turns"],
    ]
    assert turning in index  # turned, never taken: filed as before
    assert len(index) == 1
    assert [fire(index, change, woken) for change in loud[6:]] == [[], ["turns"]] * 3
    # A change that concerns it takes it as any watcher; one not known takes it with everyone.
    assert fire(index, Touched(CREATED_EVENT, 9, ("still",)), woken) == ["turns"]
    index.add(turning, EventFilter(tags=frozenset({"still"})), turns=True)
    assert fire(index, None, woken) == ["turns"]
    assert len(index) == 0


def test_changes_heard_together_turn_a_watcher_once_and_wake_it_once_when_one_concerns_it():
    index, woken = WakeIndex(sweep_every=2), []
    index.add(watcher("turns", woken), EventFilter(tags=frozenset({"still"})), turns=True)
    heard = [Touched(CREATED_EVENT, 1, ("loud",)), Touched(CREATED_EVENT, 2, ("still",))]
    for wake in index.take_all(heard):
        wake()
    assert woken == ["turns"]
    assert len(index) == 0
