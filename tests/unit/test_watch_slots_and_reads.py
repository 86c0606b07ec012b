"""The watch's bounded parts (issue 48): woken watchers take at most the gate's many request
threads at once (a read slot each), the rest waiting without one (app/watch/wake_gate.py); the shared
reads keep only positions several watchers stand at, within their bounds, and share a store
failure rather than each waiting for it again (app/watch/shared_reads.py)."""

from __future__ import annotations

import pytest

from app.store import StoreUnavailableError
from app.watch.feed_signal import FeedSignal
from app.watch.shared_reads import SharedReads
from app.watch.wake_gate import WakeGate
from app.watch.wake_up import NoReadSlot, WakeUp


def test_watchers_past_the_gate_wait_without_a_slot_and_all_look_again_at_its_end():
    gate = WakeGate(2)
    woken: list[str] = []
    first, second, third = (lambda name=name: woken.append(name) for name in ("a", "b", "c"))
    assert gate.enter(None)
    assert gate.enter(None)
    assert not gate.enter(first)
    gate.defer(first)
    assert not gate.enter(second)
    gate.defer(second)
    gate.defer(third)
    gate.forget(third)  # it ended while it waited
    assert woken == []
    gate.leave()
    assert woken == ["a", "b"]  # most share the read just made; one that does not waits again
    assert gate.enter(first)
    assert not gate.enter(second)
    gate.defer(second)
    gate.leave()
    gate.leave()
    assert woken == ["a", "b", "b"]
    assert gate.deferred == 0


def test_a_watcher_deferred_while_a_slot_is_free_is_woken_at_once():
    gate = WakeGate(1)
    woken: list[int] = []
    gate.defer(lambda: woken.append(1))
    assert woken == [1]


def test_a_watch_with_no_read_slot_free_is_woken_by_the_slots_end_not_by_a_change():
    """Its store call is not made; its next wake-up waits for the slot, and once it has read, a
    wake-up waits for a change again."""
    signal = FeedSignal(lambda: None, max_watchers=10, max_per_caller=10)
    signal.gate.resize(1)
    wake_up = WakeUp(signal, None)
    woken: list[int] = []
    calls: list[int] = []
    assert signal.gate.enter(None)  # another watch's read holds the only slot
    with pytest.raises(NoReadSlot):
        wake_up.fetch(calls.append, 7)
    assert calls == []
    wake_up.file(lambda: woken.append(1), signal.version)
    signal.notify()  # a change does not wake it: its wake-up waits with the gate
    assert woken == []
    assert signal.gate.deferred == 1
    signal.gate.leave()
    assert woken == [1]
    assert signal.gate.deferred == 0
    assert wake_up.fetch(lambda position: position * 2, 7) == 14
    wake_up.file(lambda: woken.append(2), signal.version)
    assert signal.waiting == 1  # filed with the signal again, for the next change
    signal.notify()
    assert woken == [1, 2]
    wake_up.cancel()
    signal.close()


def test_the_gate_never_bounds_to_no_thread():
    gate = WakeGate()
    gate.resize(0)  # a worker of one request thread
    assert gate.enter(None)
    assert not gate.enter(None)


def test_only_positions_where_several_stand_are_kept_within_the_bounds():
    reads = SharedReads(max_entries=3, max_bytes=10_000)
    fetches = []

    def fetch(position: int) -> tuple[bytes, int]:  # the store's read, counted
        fetches.append(position)
        return b"x" * 100, position + 1

    for position in range(50):  # one stream each: read on its own, nothing kept
        reads.stand(position)
        reads.read(("stream", position), position, fetch, 7)
    assert reads.size == (0, 0)
    for position in range(50):  # two at each: kept, the least recently used dropped
        reads.stand(position)
        reads.read(("stream", position), position, fetch, 7)
    entries, size = reads.size
    assert entries == 3
    assert size <= 10_000
    fetches.clear()
    reads.read(("stream", 49), 49, fetch, 7)
    assert fetches == []  # shared
    reads.read(("stream", 49), 49, fetch, 8)
    assert fetches == [49]  # a new version reads again
    assert reads.size == (1, 164)


def test_the_bytes_bound_holds_whatever_the_entries():
    reads = SharedReads(max_entries=100, max_bytes=1_000)
    for position in range(20):
        reads.stand(position)
        reads.stand(position)
        reads.read(position, position, lambda _: (b"y" * 300, 0), 1)
    entries, size = reads.size
    assert size <= 1_000
    assert entries == 2


def test_a_store_failure_is_shared_by_the_versions_other_reads():
    reads = SharedReads()
    calls = []

    def failing(position: int) -> None:
        calls.append(1)
        raise StoreUnavailableError("timeout", "the store did not answer")

    for position in range(5):
        with pytest.raises(StoreUnavailableError):
            reads.read(position, position, failing, 3)
    assert calls == [1]  # once for the version
    assert reads.read(0, 0, lambda _: ([], 0), 4) == ([], 0)  # the next version asks again
