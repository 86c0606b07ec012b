"""The feed signal's part in a filtered stream passing over what concerns it not (app/watch/
watches.py: `EventStream._passes_over`): a watcher still filed is quiet, and told whether the
listener had heard through a position by then; a still-filed wake-up filed again is not woken by
changes that did not concern it (unless its watch asks to read on); and a write the listener
hears again counts once towards the sweep."""

from __future__ import annotations

from app.watch.feed_signal import FeedSignal
from app.watch.filters import EventFilter
from app.watch.wake_index import Touched

MINE = EventFilter(tags=frozenset({"mine"}))


class Heard:
    """Stands for the Redis listener's `Heard`: positions here are numbers, heard up to `upto`."""

    def __init__(self, upto: int) -> None:
        self.upto = upto

    def covers(self, position: bytes) -> bool:
        return int(position) <= self.upto


def other(plant_id: int) -> Touched:
    return Touched(0, plant_id, ("other",))


def filed(signal: FeedSignal) -> tuple[list[int], object]:
    woken: list[int] = []

    def wake() -> None:
        woken.append(signal.version)

    signal.subscribe(signal.version, wake, MINE)
    return woken, wake


def test_a_still_filed_watcher_is_quiet_and_told_whether_a_position_was_heard():
    signal = FeedSignal(lambda: None, max_watchers=10, max_per_caller=10)
    woken, wake = filed(signal)
    assert signal.quiet(wake, b"5") == (0, False)  # nothing heard yet
    signal._notify([other(1)], Heard(5))  # what the listener thread calls
    assert signal.hears
    assert signal.quiet(wake, b"5") == (1, True)
    assert signal.quiet(wake, b"6") == (1, False)
    assert signal.quiet(wake, None) == (1, False)
    signal._notify([Touched(0, 2, ("mine",))], Heard(7))
    assert woken == [2]
    assert signal.quiet(wake, b"5") is None  # taken: a change concerned it


def test_a_still_filed_wake_up_filed_again_waits_for_a_change_that_concerns_it():
    signal = FeedSignal(lambda: None, max_watchers=10, max_per_caller=10)
    woken, wake = filed(signal)
    signal.notify(other(1))
    signal.subscribe(0, wake, MINE)  # at its deadline, from the version it had read at
    assert woken == []
    signal.subscribe(-1, wake, MINE)  # its watch reads on at once
    assert woken == [1]
    signal.subscribe(1, wake, MINE)
    signal.notify(Touched(1, 3, ("other", "mine")))
    assert woken == [1, 2]


def test_a_write_the_listener_hears_again_counts_once_towards_the_sweep():
    signal = FeedSignal(lambda: None, max_watchers=10, max_per_caller=10, sweep_every=3)
    woken, _ = filed(signal)
    signal._notify([other(1)], Heard(1))
    for plant_id in (2, 3):
        signal.notify(other(plant_id))  # this process's write, then the listener hears it
        assert woken == []
        signal._notify([other(plant_id)], Heard(plant_id))
    assert woken == [signal.version]  # the third change heard: the sweep
