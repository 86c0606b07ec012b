"""A filtered copy of part of the store, kept by following `GET /events` with `tags`, on memory,
Redis and the 3+3 Redis Cluster, while four writers create, retag and delete at random.

- The follower that lists, then follows pages and long-polls from the position it took first,
  and the one that reads one `snapshot=true` stream, each end equal to `GET /plants?tags=…`.
- A follower whose tag stays quiet while 5,000 other writes pass through a feed that keeps
  1,000 is never answered 410, by pages, long-polls or a stream it resumes from its bookmarks,
  and gets its next match.
- A create wakes the stream of its tag, not every stream: at most two a write by the worker's
  `plants_watch_woken_per_change`, on memory, Redis and the cluster (where the store's listener
  reads each change's tags from the feed).
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import settings_for_store
from tests.feed_client import Client, Stream, apply, assert_selected, listed, query
from tests.servers import Gunicorn

#: The feed keeps (at least) this many events; on a cluster, this many per bucket group.
RETAIN = 1000
SETTINGS = {
    "PLANTS_EVENTS_RETAIN": str(RETAIN),
    "PLANTS_EVENTS_HEARTBEAT": "1",
    "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": "50",
}
WRITERS = 4
#: Writes per writer in the exactness runs: enough for every kind of change to every tag.
CHURN = {"memory": 400, "redis": 200, "cluster": 150}
#: Bucket groups on a cluster (app/store/redis/groups.py): an id that is a multiple of 65,536 is
#: in group 0, so the quiet follower's 5,000 foreign writes all go through one group's log.
GROUP_0_STEP = 65_536


@pytest.fixture(scope="module", params=["memory", "redis", "cluster"])
def server(request):
    env = {**SETTINGS, **settings_for_store(request, request.param)}
    if request.param != "memory":
        env["WEB_CONCURRENCY"] = "2"
    server = Gunicorn(env=env)
    yield request.param, server
    server.stop()
    assert "Traceback" not in server.output()


def fresh_tags() -> tuple[str, str, str]:
    """Two tags a follower follows and one it does not, of this test alone."""
    run = uuid.uuid4().hex[:8]
    return f"in-{run}", f"also-{run}", f"out-{run}"


def churn(port: int, seed: int, first_id: int, writes: int, tags: tuple[str, ...]) -> list[int]:
    """`writes` random changes: creates (of a tag of `tags` or none), retags (to another, or to
    none), deletes, of this writer's own plants; the statuses answered."""
    rng, client = random.Random(seed), Client(port)
    pool: list[str | None] = [*tags, None]
    mine: list[int] = []
    statuses = []
    for number in range(writes):
        roll = rng.random()
        if roll < 0.4 or not mine:
            plant_id, tag = first_id + number, rng.choice(pool)
            plant: dict[str, Any] = {"id": plant_id, "name": f"w{seed}-{number}"}
            if tag is not None:
                plant["tag"] = tag
            status, _ = client.call("POST", "/plants", plant)
            mine.append(plant_id)
        elif roll < 0.8:
            status, _ = client.call("PATCH", f"/plants/{rng.choice(mine)}", {"tag": rng.choice(pool)})
        else:
            plant_id = mine.pop(rng.randrange(len(mine)))
            status, _ = client.call("DELETE", f"/plants/{plant_id}")
        statuses.append(status)
    client.close()
    return statuses


class Writers:
    """Four writers churning in threads; `join` checks that every change was accepted (a 404 is
    a retag or delete of a plant whose create another writer's churn never saw fail: none here)."""

    def __init__(self, port: int, writes: int, tags: tuple[str, ...]) -> None:
        base = random.randrange(1, 1 << 40) << 20
        self.results: list[list[int]] = [[] for _ in range(WRITERS)]
        self.threads = [
            threading.Thread(target=self._run, args=(n, port, base + (n << 16), writes, tags), daemon=True)
            for n in range(WRITERS)
        ]
        for thread in self.threads:
            thread.start()

    def _run(self, n: int, port: int, first_id: int, writes: int, tags: tuple[str, ...]) -> None:
        self.results[n] = churn(port, n, first_id, writes, tags)

    def alive(self) -> bool:
        return any(thread.is_alive() for thread in self.threads)

    def join(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        assert not self.alive(), "the writers did not finish in time"
        statuses = [status for result in self.results for status in result]
        assert statuses
        assert set(statuses) <= {200, 201, 204}, sorted(set(statuses))


def seed_plants(client: Client, tags: tuple[str, ...], count: int) -> None:
    """Plants of each tag before anyone follows: a snapshot has something to send."""
    base = random.randrange(1, 1 << 40) << 20
    for number in range(count):
        plant = {"id": base + number, "name": f"seed-{number}", "tag": tags[number % len(tags)]}
        assert client.call("POST", "/plants", plant)[0] == 200


# --- a. an exact copy ----------------------------------------------------------------------------


def churning(store: str, port: int) -> tuple[Client, frozenset[str], Writers]:
    """Plants of two tags a follower follows and of one it does not, then four writers churning
    them: a client, the followed tags, and the writers, under way."""
    followed, also, other = fresh_tags()
    client = Client(port)
    seed_plants(client, (followed, also, other), 30)
    writers = Writers(port, CHURN[store], (followed, also, other))
    time.sleep(0.2)
    return client, frozenset({followed, also}), writers


def test_a_follower_by_pages_and_long_polls_keeps_an_exact_filtered_copy(server):
    store, gunicorn = server
    client, tags, writers = churning(store, gunicorn.port)
    # The recipe: the position first, then the list, then the feed from the position.
    status, body = client.call("GET", f"/events?{query(after='now', tags=sorted(tags))}")
    assert status == 200, body
    position = body["next"]
    copy = listed(client, tags)
    received = 0

    def read(**params: Any) -> bool:
        """One page or long-poll applied to the copy; whether it had events."""
        nonlocal position, received
        status, page = client.call("GET", f"/events?{query(after=position, tags=sorted(tags), **params)}")
        assert status == 200, page
        for event in page["events"]:
            assert_selected(event, tags)
            apply(copy, event, tags)
        received += len(page["events"])
        position = page["next"]
        return bool(page["events"])

    turn = 0
    while writers.alive():
        if turn % 2:
            read(wait=1)
        else:
            read(limit=7)
        turn += 1
    writers.join()
    while read(limit=50):
        pass
    assert copy == listed(client, tags)
    assert received > 0
    # The filter sent only what concerns its tags: fewer events than writes.
    assert received < WRITERS * CHURN[store]


def test_one_snapshot_stream_keeps_an_exact_filtered_copy(server):
    store, gunicorn = server
    client, tags, writers = churning(store, gunicorn.port)
    stream = Stream(gunicorn.port, f"/events?{query(snapshot='true', tags=sorted(tags))}", timeout=20)
    assert stream.status == 200, stream.response.read()
    copy: dict[int, dict] = {}
    kinds: list[str] = []
    sentinel: int | None = None
    deadline = time.monotonic() + 60
    try:
        for block in stream.blocks():
            if "data" not in block:
                continue
            event, data = block.get("event"), json.loads(block["data"])
            kinds.append(event if event != "bookmark" or not data.get("initial_end") else "initial_end")
            if event == "bookmark":
                assert data["next"] == block["id"], block
            elif event in ("plant.existing", "plant.created", "plant.updated", "plant.deleted"):
                assert data["type"] == event, block
                assert_selected(data, tags)
                apply(copy, data, tags)
            else:
                pytest.fail(f"unexpected block {block}")
            if sentinel is None and "initial_end" in kinds and not writers.alive():
                writers.join()
                # A last change after every writer's: once it arrives, so has everything before.
                sentinel = random.randrange(1, 1 << 40) << 20
                last = {"id": sentinel, "name": "last", "tag": min(tags)}
                assert client.call("POST", "/plants", last)[0] == 200
            if sentinel is not None and sentinel in copy and copy == listed(client, tags):
                break
            if time.monotonic() > deadline:
                break  # the assertion below shows what differs
    finally:
        stream.close()
    assert copy == listed(client, tags)
    # The snapshot, its end once, then only live events.
    end = kinds.index("initial_end")
    assert kinds.count("initial_end") == 1
    assert set(kinds[:end]) == {"plant.existing"}, kinds[:end]
    assert "plant.existing" not in kinds[end:]
    assert {"plant.created"} <= set(kinds[end:])


# --- b. a quiet follower through 5,000 writes it does not match -----------------------------------

QUIET_WRITES = 5000
#: The foreign writes' pace, under the retention per heartbeat (1 s) and per long-poll (1 s).
QUIET_RATE = 600


class Quiet:
    """One follower of a tag nobody writes to; every status it was answered, and its events."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.events: list[dict] = []
        self.connections = 0
        self.error: BaseException | None = None


def follow_pages(
    port: int, tag: str, position: str, stop: threading.Event, wait: int | None, quiet: Quiet
) -> None:
    """Pages (`wait` None, every 50 ms) or long-polls, each from the `next` of the one before."""
    client = Client(port)
    while not stop.is_set():
        status, page = client.call("GET", f"/events?{query(after=position, tags=tag, limit=100, wait=wait)}")
        quiet.statuses.append(status)
        if status != 200:
            return
        quiet.events += page["events"]
        position = page["next"]
        if wait is None:
            time.sleep(0.05)


def follow_stream(port: int, tag: str, position: str, stop: threading.Event, quiet: Quiet) -> None:
    """A stream that the client ends after two bookmarks and opens again from the last one."""
    bookmark = position
    while not stop.is_set():
        stream = Stream(port, f"/events?{query(tags=tag)}", last_event_id=bookmark)
        quiet.statuses.append(stream.status)
        quiet.connections += 1
        if stream.status != 200:
            return
        bookmarks = 0
        try:
            for block in stream.blocks():
                if block.get("event") == "bookmark":
                    bookmark, bookmarks = block["id"], bookmarks + 1
                elif "data" in block:
                    quiet.events.append(json.loads(block["data"]))
                    bookmark = block["id"]
                if bookmarks == 2 or stop.is_set():
                    break
        finally:
            stream.close()


def in_thread(target: Callable[..., None], quiet: Quiet, *args: Any) -> threading.Thread:
    def run() -> None:
        try:
            target(*args, quiet)
        except BaseException as exc:  # reported by the test, which fails on it
            quiet.error = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def rename_others(port: int, ids: list[int], writes: int, seed: int) -> list[int]:
    """`writes` renames of the other tag's plants, at QUIET_RATE / WRITERS a second."""
    client, rng, statuses = Client(port), random.Random(seed), []
    started = time.monotonic()
    for number in range(writes):
        pause = started + number * WRITERS / QUIET_RATE - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        statuses.append(client.call("PATCH", f"/plants/{rng.choice(ids)}", {"name": f"r{seed}-{number}"})[0])
    client.close()
    return statuses


def test_a_quiet_filtered_follower_is_never_410_and_gets_its_next_match(server):
    _, gunicorn = server
    followed, _, other = fresh_tags()
    client = Client(gunicorn.port)
    base = random.randrange(1, 1 << 20) * GROUP_0_STEP * 64
    others = [base + number * GROUP_0_STEP for number in range(20)]
    for plant_id in others:
        assert client.call("PUT", f"/plants/{plant_id}", {"name": "other", "tag": other})[0] == 201
    unfiltered = client.call("GET", "/events?after=now")[1]["next"]
    position = client.call("GET", f"/events?{query(after='now', tags=followed)}")[1]["next"]
    stop = threading.Event()
    pages, polls, streams = Quiet(), Quiet(), Quiet()
    followers = [
        in_thread(follow_pages, pages, gunicorn.port, followed, position, stop, None),
        in_thread(follow_pages, polls, gunicorn.port, followed, position, stop, 1),
        in_thread(follow_stream, streams, gunicorn.port, followed, position, stop),
    ]
    results: list[list[int]] = [[] for _ in range(WRITERS)]

    def write(n: int) -> None:
        results[n] = rename_others(gunicorn.port, others, QUIET_WRITES // WRITERS, n)

    writers = [threading.Thread(target=write, args=(n,), daemon=True) for n in range(WRITERS)]
    try:
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(120)
        assert all(status == 200 for result in results for status in result)
        assert sum(map(len, results)) == QUIET_WRITES
        # The feed kept no more than it must: a follower without the filter fell out.
        assert client.call("GET", f"/events?after={unfiltered}")[0] == 410
        match = base + GROUP_0_STEP * 63
        assert client.call("POST", "/plants", {"id": match, "name": "at last", "tag": followed})[0] == 200
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all(q.events or q.error for q in (pages, polls, streams)):
            time.sleep(0.05)
    finally:
        stop.set()
        for follower in followers:
            follower.join(15)
    for quiet in (pages, polls, streams):
        assert quiet.error is None, repr(quiet.error)
        assert set(quiet.statuses) == {200}, quiet.statuses
        assert [(event["type"], event["plant"]["id"]) for event in quiet.events] == [("plant.created", match)]
    assert len(pages.statuses) > 10
    assert len(polls.statuses) > 2
    # The stream was resumed from its bookmarks, again and again.
    assert streams.connections > 2


# --- c. a write wakes the streams of its tag, not every stream -------------------------------------

TAGGED_STREAMS = 50


@pytest.fixture(params=["memory", "redis", "cluster"])
def one_worker(request):
    """One worker (whose metric is the one scraped), with room for the streams."""
    env = {
        **SETTINGS,
        **settings_for_store(request, request.param),
        "PLANTS_EVENTS_MAX_WATCHERS_PER_TOKEN": str(TAGGED_STREAMS + 10),
    }
    server = Gunicorn(env=env)
    server.store = request.param
    yield server
    server.stop()


def woken(port: int) -> tuple[float, float]:
    """The worker's `plants_watch_woken_per_change`: its sum and its count."""
    status, text = Client(port).text("/metrics")
    assert status == 200
    found = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("plants_watch_woken_per_change_")
    }
    return found.get("plants_watch_woken_per_change_sum", 0.0), found.get(
        "plants_watch_woken_per_change_count", 0.0
    )


def park_streams(server: Gunicorn, run: str, streams: list[Stream]) -> tuple[float, float]:
    """TAGGED_STREAMS streams put in `streams` (the caller closes them), the nth of tag
    `wk-{run}-{n}`, each parked; the worker's `woken` once they are."""
    for n in range(TAGGED_STREAMS):
        streams.append(Stream(server.port, f"/events?{query(after='now', tags=f'wk-{run}-{n}')}"))
    assert {stream.status for stream in streams} == {200}
    time.sleep(1.0)  # each parked
    # On Redis, the feed listener's start (with the first watch) wakes every watch once, as a
    # change not known: the count starts after it, however late a loaded machine makes it.
    started = 0 if server.store == "memory" else 1
    deadline = time.monotonic() + 15
    while (before := woken(server.port))[1] < started:
        assert time.monotonic() < deadline, "the feed listener did not start"
        time.sleep(0.1)
    return before


def assert_woken_by_their_tag(before: tuple[float, float], after: tuple[float, float], least: int) -> None:
    """At least `least` changes, each waking about one stream (two on a shared store: the writer's
    own wake-up, then the feed listener's), not every stream."""
    total, changes = after[0] - before[0], after[1] - before[1]
    assert changes >= least
    assert total <= 2 * changes, f"{total} streams woken by {changes} changes"


def test_a_write_wakes_the_stream_of_its_tag_not_every_stream(one_worker):
    run = uuid.uuid4().hex[:8]
    client = Client(one_worker.port)
    streams: list[Stream] = []
    try:
        before = park_streams(one_worker, run, streams)
        base = random.randrange(1, 1 << 40) << 20
        for n in range(20):
            plant = {"id": base + n, "name": "woken", "tag": f"wk-{run}-{n}"}
            assert client.call("POST", "/plants", plant)[0] == 200
            time.sleep(0.05)  # one change at a time, not one wake-up for several
        for n in range(20):
            created = next(block for block in streams[n].blocks() if block.get("event") == "plant.created")
            assert json.loads(created["data"])["plant"]["id"] == base + n
        after = woken(one_worker.port)
    finally:
        for stream in streams:
            stream.close()
    assert_woken_by_their_tag(before, after, 20)


def test_a_rename_or_a_delete_wakes_the_stream_of_its_tag_not_every_stream(one_worker):
    # A PUT names the plant's tag before as well as after, and a delete the tag it had: on Redis
    # the view learns them from the write's script, as the memory store tells them (they woke
    # every stream filed by tag there, a PUT that kept its tag too).
    run = uuid.uuid4().hex[:8]
    client = Client(one_worker.port)
    base = random.randrange(1, 1 << 40) << 20
    for n in range(20):
        assert (
            client.call("POST", "/plants", {"id": base + n, "name": "v0", "tag": f"wk-{run}-{n}"})[0] == 200
        )
    streams: list[Stream] = []
    try:
        before = park_streams(one_worker, run, streams)
        for n in range(20):
            assert client.call("PUT", f"/plants/{base + n}", {"name": "v1", "tag": f"wk-{run}-{n}"})[0] == 200
            time.sleep(0.05)  # one change at a time, not one wake-up for several
            assert client.call("DELETE", f"/plants/{base + n}")[0] == 204
            time.sleep(0.05)
        for n in range(20):
            blocks = (block for block in streams[n].blocks() if block.get("event", "").startswith("plant."))
            assert [next(blocks)["event"], next(blocks)["event"]] == ["plant.updated", "plant.deleted"]
        after = woken(one_worker.port)
    finally:
        for stream in streams:
            stream.close()
    assert_woken_by_their_tag(before, after, 40)
