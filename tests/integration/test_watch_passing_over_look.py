"""A quiet filtered stream on a shared store (a single Redis, a cluster) moves past what it passed
over only once a look at the store finds the feed still holds its position (app/watch/
passing_over.py: `PassingOver._held`): its listener hears new entries, not a feed that began
again. When that look cannot be made at its turn (every read slot of the worker taken), the
stream stays where it stands and waits for a slot, as a read does; its turn at the slot's end
looks, and meets the 410 as `event: gone`: it never sends a bookmark into the feed that began
again, past a loss it never heard of (docs/change-feed.md, "Retention and 410").

The stream is the app's own `EventStream`, driven here as the packaged worker drives a parked one
(its deadline, then `subscribe`), on an app whose gate is bounded as the worker bounds it: so its
turns, and the read slots taken at one of them, are the test's to choose. The feed begins again
as after a FLUSHALL, which no listener hears; a write made with the feed off leaves a mark that
the listener may hear first, and wake every stream to read (test_watch_passing_over.py meets that
410 end to end)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis

from app import create_app
from app.extension import plants_state
from app.http.cursor import EVENTS, encode_cursor
from app.plants.events import event_records
from app.store.redis.groups import CLUSTER_GROUPS
from app.watch.filters import EventFilter
from app.watch.watches import EventStream
from tests.conftest import settings_for_store
from tests.servers import TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}
MINE = EventFilter(tags=frozenset({"look-mine"}))
#: The test's plants, all in one group on a cluster (CLUSTER_GROUPS apart): the feed that begins
#: again is that group's stream, as a single Redis's, and so are the writes after.
PLANTS = range(790_000, 800_000, CLUSTER_GROUPS)


def until(condition: Callable[[], object], seconds: float = 10.0) -> None:
    """Wait, a few milliseconds at a time, until `condition()` holds (the listener's thread)."""
    ends = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < ends, "not within the time given"
        time.sleep(0.01)


def bookmarks(chunk: bytes) -> list[str]:
    """The ids of the bookmarks in `chunk`, a stream's bytes."""
    return [
        line.split(b": ", 1)[1].decode()
        for block in chunk.split(b"\n\n")
        if b"event: bookmark" in block
        for line in block.split(b"\n")
        if line.startswith(b"id: ")
    ]


@pytest.fixture(params=["redis", "cluster"])
def served(request) -> Iterator[tuple]:
    """The app that serves the stream, on a real Redis or cluster, and a raw client of that store."""
    settings = settings_for_store(request, request.param)
    app = create_app({"TESTING": True, "PLANTS_API_TOKENS": [TOKEN], **settings})
    if request.param == "redis":
        raw = redis.Redis.from_url(settings["PLANTS_STORE_URL"])
    else:
        host, port = settings["PLANTS_STORE_URL"].removeprefix("redis+cluster://").split(",")[0].split(":")
        raw = redis.RedisCluster(host=host, port=int(port))
    yield app, raw
    raw.close()
    plants_state(app).close()


def test_a_quiet_stream_whose_look_finds_no_read_slot_stays_and_meets_the_410_at_the_slots_end(served):
    app, raw = served
    state = plants_state(app)
    store, signal = state.store, state.feed_signal
    signal.gate.resize(2)  # as the packaged worker bounds it: its request threads but one
    client = app.test_client()

    def put(plant_id: int, tag: str) -> None:
        answer = client.put(f"/plants/{plant_id}", json={"name": "n", "tag": tag}, headers=AUTH)
        assert answer.status_code in (200, 201), answer.get_data()

    # A position past events of the group whose feed begins again below: one its new history
    # cannot hold.
    plants = iter(PLANTS)
    first = next(plants)
    put(first, "look-other")
    woken: list[int] = []
    signal.admit(b"look")
    stream = EventStream(
        store,
        signal,
        store.events_now(),
        heartbeat=60,
        stream_max=3600,
        bookmarks=True,
        cursor_key=store.cursor_key(),
        caller=b"look",
        parkable=True,
        records=event_records,
        only=MINE,
    )

    def wake() -> None:
        woken.append(1)

    def beat() -> bytes:
        """The stream at its heartbeat, then parked again, as the worker does."""
        chunk = stream.next_chunk(stream.next_beat)
        if not stream.done:
            stream.subscribe(wake)
        return chunk

    def heard(position: bytes | None) -> bool:
        """Whether the listener has heard every event up to `position` (still quiet)."""
        quiet = signal.quiet(wake, position)
        return quiet is not None and quiet[1]

    def settle() -> bytes:
        """What it sends, read each time it is woken, until its listener has heard every event
        written so far with the stream filed again: the worker's part in between."""
        end, sent, ends = store.events_now(), b"", time.monotonic() + 10
        while not heard(end):
            assert time.monotonic() < ends, "not heard within the time given"
            if woken:
                woken.clear()
                sent += stream.next_chunk(time.monotonic())
                stream.subscribe(wake)
            time.sleep(0.01)
        return sent

    try:
        assert next(stream).startswith(b"retry:")  # it read from its position: nothing yet
        stream.subscribe(wake)
        for _ in range(100):  # writes it passes over, until its listener tells how far it heard
            put(next(plants), "look-other")
            if signal.hears:
                break
            time.sleep(0.02)
        assert signal.hears, "the listener heard none"
        # The listener's start is a change not known, which wakes it; then a plant it selects
        # does: each time it reads, as the worker has it.
        sent = settle()
        mine = next(plants)
        put(mine, "look-mine")
        sent += settle()
        assert b"event: plant.created" in sent, sent
        assert b'"id":%d' % mine in sent, sent
        told = bookmarks(sent)
        put(next(plants), "look-other")
        assert not settle()
        told += bookmarks(beat())  # the turn reads the feed's end...
        ahead = stream.passing.ahead
        assert ahead is not None
        until(lambda: heard(ahead))
        told += bookmarks(beat())  # ...and the next moves there: the look finds the feed holds it
        assert stream.position == ahead
        standing = stream.position
        # The store loses its data, `mine` with it, and no event says so (a FLUSHALL, a Redis
        # restarted without its data: here the keys of the group the test's plants live in, the
        # cursors' secret kept). The feed begins again with writes it passes over; its
        # listener hears them, as new entries, and never hears of the loss.
        lost = [key for key in raw.scan_iter(match=store.groups.tags[store.groups.of(mine)] + "*")]
        raw.delete(*[key for key in lost if not key.endswith(b":cursor-key")])
        assert client.get(f"/plants/{mine}", headers=AUTH).status_code == 404
        for _ in range(3):
            put(next(plants), "look-other")
        told += bookmarks(beat())  # the turn reads the end of the feed that began again...
        ahead = stream.passing.ahead
        assert ahead is not None, (woken, stream.done)
        assert ahead != standing
        until(lambda: heard(ahead))  # ...and its listener hears up to it
        assert not woken  # nothing it selects was heard: it passes over at its turns
        taken = 0
        while signal.gate.enter(None):  # other streams' reads hold every read slot
            taken += 1
        try:
            busy = bookmarks(beat())
            # It did not move, its look not made: its client, resuming from the bookmark it was
            # told then, meets the 410 that has it copy again, where the feed that began again
            # would have it keep `mine` for good.
            assert busy, "no bookmark at its heartbeat"
            for cursor in busy:
                answer = client.get(f"/events?after={cursor}&tags=look-mine", headers=AUTH)
                assert answer.status_code == 410, (cursor, answer.get_data())
            assert stream.position == standing
            told += busy
            # It waits for a read slot, as a read does, not for its next heartbeat.
            assert not stream.next_chunk(time.monotonic())  # the worker asks again at once
            stream.subscribe(wake)
            assert not woken
        finally:
            for _ in range(taken):
                signal.gate.leave()
        assert woken  # a slot's end: its turn looks, and it reads the 410
        last = stream.next_chunk(time.monotonic())
        assert b"event: gone" in last, last
        assert stream.done
    finally:
        stream.close()
    # Each position it told its client reads as the 410, as a reconnect from it would: none
    # stands past the write it never heard of, in the feed that began again.
    assert told[-1] == encode_cursor(store.cursor_key(), standing, None, EVENTS)
    for cursor in told:
        answer = client.get(f"/events?after={cursor}&tags=look-mine", headers=AUTH)
        assert answer.status_code == 410, (cursor, answer.get_data())
