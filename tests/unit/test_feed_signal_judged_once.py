"""A write a process hears twice on a shared store, from its own signal (`notify`) and from its
feed listener (`_notify` with how far it heard), wakes the watchers it concerns once, whichever
comes first; known by its write's mark only, so that nothing the listener hears is skipped unless
this process judged that very write already (app/watch/judged_once.py)."""

from __future__ import annotations

from app.watch.feed_signal import FeedSignal
from app.watch.filters import EventFilter
from app.watch.judged_once import JudgedOnce
from app.watch.wake_index import Touched

MINE = EventFilter(tags=frozenset({"mine"}))


class Heard:
    """Stands for the Redis listener's `Heard`: heard through every position."""

    def covers(self, position: bytes) -> bool:
        return True


def watching(signal: FeedSignal) -> list[int]:
    """A watcher of the tag "mine", filed again after each wake-up (as a stream re-parks)."""
    woken: list[int] = []

    def wake() -> None:
        woken.append(signal.version)
        signal.subscribe(signal.version, wake, MINE)

    signal.subscribe(signal.version, wake, MINE)
    return woken


def mine(plant_id: int, mark: bytes | None) -> Touched:
    return Touched(0, plant_id, ("mine",), mark)


def listening() -> tuple[FeedSignal, list[int]]:
    signal = FeedSignal(lambda: None, max_watchers=10, max_per_caller=10)
    woken = watching(signal)
    signal._notify(None, Heard())  # the listener's start: every watcher woken once
    assert woken == [1]
    assert signal.hears
    woken.clear()
    return signal, woken


def test_a_write_signalled_then_heard_wakes_its_watcher_once():
    signal, woken = listening()
    signal.notify(mine(1, b"a1"))
    signal._notify([mine(1, b"a1")], Heard())
    assert woken == [2]
    assert signal.version == 2  # nor moved: a watch that read since is not sent to read again


def test_a_write_heard_then_signalled_wakes_its_watcher_once():
    signal, woken = listening()
    signal._notify([mine(1, b"a1")], Heard())
    signal.notify(mine(1, b"a1"))
    assert woken == [2]


def test_a_write_whose_signal_never_came_is_woken_for_by_the_listener():
    """A write whose store call failed sent no signal, though its entry may have been added."""
    signal, woken = listening()
    signal.notify(mine(1, b"a1"))
    signal._notify([mine(2, b"b2")], Heard())
    assert woken == [2, 3]


def test_a_batch_with_a_write_judged_already_still_wakes_for_the_others():
    signal, woken = listening()
    signal.notify(mine(1, b"a1"))
    signal._notify([mine(1, b"a1"), mine(2, b"b2")], Heard())
    assert woken == [2, 3]


def test_the_same_plant_and_type_written_again_is_another_write():
    signal, woken = listening()
    signal.notify(mine(1, b"a1"))
    signal._notify([mine(1, b"a1")], Heard())
    signal._notify([mine(1, b"a2")], Heard())  # another process's write of the same plant
    assert woken == [2, 3]


def test_writes_without_a_mark_are_judged_each_time_they_are_heard():
    signal, woken = listening()
    signal.notify(mine(1, None))
    signal._notify([mine(1, None)], Heard())
    assert woken == [2, 3]


def test_a_mark_never_heard_again_is_forgotten_after_twice_as_many_others():
    judged = JudgedOnce(most=2)
    assert not judged.again(b"m")
    for n in range(3):
        assert not judged.again(b"other %d" % n)
    assert judged.again(b"m")  # still kept: at most twice `most` kept
    assert not judged.again(b"m")  # heard twice at most: the next is another write
    assert not judged.again(b"x")
    for n in range(4):
        judged.again(b"more %d" % n)
    assert not judged.again(b"x")  # forgotten: a second wake-up, never a skipped event
