"""Which parked watchers a write wakes (app/watch/wake_index.py): those filed under its plant's
tag before or after the change. The memory store tells the writing request its tag before; on a
shared store the listener reads both from the feed's entries, for every process's writes."""

from __future__ import annotations

import random
import threading
import time

import pytest

from app.store import CREATED_EVENT, DELETED_EVENT, UPDATED_EVENT
from app.store.redis import listener as listener_module
from app.watch.feed_signal import FeedSignal
from app.watch.filters import EventFilter
from tests.servers import free_port

MERGE_PATCH = "application/merge-patch+json"


def park(signal, woken: list[str], *tags: str) -> None:
    for tag in tags:
        signal.subscribe(
            signal.version, lambda tag=tag: woken.append(tag), EventFilter(tags=frozenset({tag}))
        )


def started(listener) -> None:
    """Wait until every stream's thread of the listener has its first cursor: the start is heard
    as one change not known (it wakes every watcher once)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if listener.wait(1.0):
            assert listener.take() is None
            return
    pytest.fail("the listener's threads did not start")


@pytest.mark.parametrize("store_settings", ["memory"], indirect=True)
def test_a_retag_and_a_delete_wake_the_watchers_of_the_tag_before_and_after_only(app, client, auth):
    signal = app.extensions["plants"].feed_signal
    woken: list[str] = []
    assert (
        client.post("/plants", json={"id": 1, "name": "fern", "tag": "shade"}, headers=auth).status_code
        == 200
    )
    park(signal, woken, "shade", "sun", "dry")
    answer = client.patch("/plants/1", json={"tag": "sun"}, headers={**auth, "Content-Type": MERGE_PATCH})
    assert answer.status_code == 200
    assert sorted(woken) == ["shade", "sun"]
    woken.clear()
    park(signal, woken, "shade", "sun")  # "dry" is still parked
    assert client.delete("/plants/1", headers=auth).status_code == 204
    assert woken == ["sun"]


@pytest.mark.parametrize("store_settings", ["redis", "cluster"], indirect=True)
def test_the_listener_hears_each_writes_tag_before_and_after(client, auth, store):
    listener = store.feed_listener()
    try:
        started(listener)  # its threads start from each stream's newest entry
        plant_id = random.randrange(1, 1 << 40)
        path = f"/plants/{plant_id}"
        assert client.put(path, json={"name": "fern", "tag": "shade"}, headers=auth).status_code == 201
        patch = {**auth, "Content-Type": MERGE_PATCH}
        assert client.patch(path, json={"tag": "sun"}, headers=patch).status_code == 200
        assert client.patch(path, json={"name": "fern 2"}, headers=patch).status_code == 200
        assert client.delete(path, headers=auth).status_code == 204
        heard: list = []
        deadline = time.monotonic() + 10
        while len(heard) < 4 and time.monotonic() < deadline:
            if listener.wait(1.0):
                touched = listener.take()
                assert touched is not None  # four entries: read one by one, never "not known"
                heard += [change for change in touched if change[1] == plant_id]
    finally:
        listener.close()
    marks = [change[3] for change in heard]
    assert None not in marks
    assert len(set(marks)) == 4
    assert [change[:3] for change in heard] == [
        (CREATED_EVENT, plant_id, ("shade", "shade")),
        (UPDATED_EVENT, plant_id, ("sun", "shade")),
        (UPDATED_EVENT, plant_id, ("sun", "sun")),
        (DELETED_EVENT, plant_id, ("sun", "sun")),
    ]


@pytest.mark.parametrize("store_settings", ["redis"], indirect=True)
def test_a_burst_of_writes_is_heard_write_by_write(store, monkeypatch):
    """More entries than one read takes (listener.BATCH) come while the listener rests: it reads
    on, so each is still known, and no watcher filed by another tag is woken for them."""
    monkeypatch.setattr(listener_module, "REST_SECONDS", 0.5)
    listener = store.feed_listener()
    count = listener_module.BATCH * 2 + 10
    try:
        started(listener)
        base = random.randrange(1, 1 << 40) << 12
        for n in range(count):
            store.create(base + n, "burst", f"t{n}")
        heard: list = []
        deadline = time.monotonic() + 10
        while len(heard) < count and time.monotonic() < deadline:
            if listener.wait(1.0):
                touched = listener.take()
                assert touched is not None
                heard += touched
    finally:
        listener.close()
    assert [change[:3] for change in heard] == [
        (CREATED_EVENT, base + n, (f"t{n}", f"t{n}")) for n in range(count)
    ]


@pytest.mark.parametrize("store_settings", ["redis"], indirect=True)
def test_what_the_listener_keeps_while_no_one_takes_is_bounded(store, monkeypatch):
    """While no one watches, the listener's threads go on reading every write and nothing takes
    what they touched: past MAX_KEPT it is "not known" (one wake-up of everyone), not a list that
    grows with every write until the next watcher comes."""
    monkeypatch.setattr(listener_module, "MAX_KEPT", 10)
    listener = store.feed_listener()
    try:
        started(listener)
        base = random.randrange(1, 1 << 40) << 12
        for n in range(30):
            store.create(base + n, "unwatched", "t")
        deadline = time.monotonic() + 20
        while listener.wait(2.0) and time.monotonic() < deadline:
            pass  # until the writes are all heard: two quiet seconds
        assert listener.take() is None
    finally:
        listener.close()


@pytest.mark.parametrize("store_settings", ["redis", "cluster"], indirect=True)
def test_a_write_before_the_listener_took_its_cursors_wakes_the_watcher(store):
    """The listener starts with the first watcher, after that watcher's read. Another process's
    write that lands before the listener's threads take their cursors (here: while it is made) is
    behind them; the watcher, parked at the version of its read, is woken all the same, and the
    write is in the feed it then reads."""
    plant_id = random.randrange(1, 1 << 40)
    read_at = store.events_now()  # the watcher's read: nothing of its tag yet

    def listener_after_another_write():
        store.create(plant_id, "late", "late-tag")  # another process's: no one here notifies it
        return store.feed_listener()

    signal = FeedSignal(listener_after_another_write, max_watchers=1, max_per_caller=1)
    woken = threading.Event()
    try:
        signal.subscribe(signal.version, woken.set, EventFilter(tags=frozenset({"late-tag"})))
        assert woken.wait(20), "the watcher was never woken"
    finally:
        signal.close()
    entries, _ = store.feed_entries(read_at, 10)
    assert [(entry.event.plant_id, entry.event.tag) for entry in entries] == [(plant_id, "late-tag")]


def parked(signal: FeedSignal, tag: str) -> threading.Event:
    """A watcher of `tag` parked at the signal's version now: the Event its wake-up sets."""
    woken = threading.Event()
    signal.subscribe(signal.version, woken.set, EventFilter(tags=frozenset({tag})))
    return woken


@pytest.mark.parametrize("store_settings", ["cluster"], indirect=True)
def test_a_listener_first_made_while_the_cluster_was_down_hears_writes_once_it_is_up(make_app, store):
    """A worker's first watcher comes while the cluster is down: its listener, whose client reads
    the slot map as it is made, cannot be made. That is a failure like any: the watchers are woken
    (to find the store away), the listener is made again, and once made it hears the writes."""
    down = make_app(PLANTS_STORE_URL=f"redis+cluster://127.0.0.1:{free_port()}").extensions["plants"].store
    makers = iter([down.feed_listener, store.feed_listener])
    signal = FeedSignal(lambda: next(makers)(), max_watchers=3, max_per_caller=3)
    plant_id = random.randrange(1, 1 << 40)
    try:
        assert parked(signal, "back").wait(10), "the listener's failure did not wake the watcher"
        # It is made again (after 1 s): its start wakes the watchers once, every cursor taken.
        assert parked(signal, "back").wait(20), "the listener was not made again"
        woken = parked(signal, "back")
        store.create(plant_id, "back", "back")  # another process's write: no one here notifies it
        assert woken.wait(20), "the write was not heard"
    finally:
        signal.close()
