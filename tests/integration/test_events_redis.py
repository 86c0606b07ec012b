"""The change feed on real Redis servers behind real gunicorns: the sync recipe across two masters
and four workers, and every acknowledged change in the feed after a kill -9 of Redis."""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import pytest

from app import create_app
from app.extension import plants_state
from app.store import Plant
from app.store.redis.cursor_secret import CONFIRM_SECONDS
from tests.conftest import redis_settings, settings_for_store
from tests.helpers import apply_events, call, create_until_200, in_time, kill_and_restart, walk_pages
from tests.load import SHORT_TIMEOUTS, open_store, redis_gunicorn
from tests.servers import ROOT, TOKEN, Gunicorn, RedisServer

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def get_json(server: Gunicorn, path: str) -> tuple[int, Any]:
    status, _, body = call(server.connection(), "GET", path, None, AUTH)
    return status, json.loads(body)


def follow(server: Gunicorn, after: str, limit: int = 7) -> tuple[list[dict], str]:
    """The events after `after`, page by page to an empty one (retrying a 503), and the last `next`."""
    events: list[dict] = []
    while True:
        status, body = get_json(server, f"/events?limit={limit}&after={after}")
        if status == 503:
            time.sleep(0.05)
            continue
        assert status == 200, body
        events += body["events"]
        if not body["events"]:
            return events, body["next"]
        after = body["next"]


def test_the_sync_recipe_across_two_masters_and_four_workers(redis_server):
    settings = redis_settings(redis_server)
    servers = [redis_gunicorn(settings), redis_gunicorn(settings)]
    stop = threading.Event()

    def write(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            server = servers[rng.randrange(2)]
            plant_id = rng.randrange(300)
            action = rng.random()
            if action < 0.25:
                call(server.connection(), "DELETE", f"/plants/{plant_id}", None, AUTH)
            elif action < 0.6:
                body = {"id": plant_id, "name": f"n{rng.randrange(5)}", "tag": rng.choice(["a", "b"])}
                call(server.connection(), "POST", "/plants", body, AUTH)
            else:
                body = {"name": f"n{rng.randrange(5)}"}
                call(server.connection(), "PUT", f"/plants/{plant_id}", body, AUTH)

    writers = [threading.Thread(target=write, args=(seed,)) for seed in range(6)]
    try:
        for writer in writers:
            writer.start()
        time.sleep(0.5)
        # The recipe: the position, then the list, then the feed from the position.
        status, body = get_json(servers[0], "/events?after=now")
        assert status == 200
        position = body["next"]
        copy: dict[int, dict] = {}
        after = ""
        while True:
            status, page = get_json(servers[1], f"/plants?limit=13{after}")
            assert status == 200
            copy.update({item["id"]: item for item in page["plants"]})
            if "next" not in page:
                break
            after = f"&after={page['next']}"
        for turn in range(6):
            events, position = follow(servers[turn % 2], position)
            apply_events(copy, events)
    finally:
        stop.set()
        for writer in writers:
            writer.join(10)
        for server in servers:
            outputs = server.output()
            server.stop()
            assert "Traceback" not in outputs
    store = open_store(settings)
    try:
        stored = {plant_id: plant for plant_id, plant in walk_pages(store, 1000)}
        remaining, _ = _follow_store(store, position)
    finally:
        store.close()
    apply_events(copy, remaining)
    assert {plant_id: _plant(item) for plant_id, item in copy.items()} == stored
    assert len(stored) > 50


def _plant(item: dict) -> Plant:
    return Plant(item["name"], item.get("tag"))


def _follow_store(store: Any, cursor: str) -> tuple[list[dict], bytes]:
    """The rest of the feed, read from the store directly (the servers are stopped)."""
    from app.http.cursor import EVENTS, decode_cursor
    from app.plants.events import event_records

    position = decode_cursor(store.cursor_key(), cursor, None, EVENTS)
    events: list[dict] = []
    while True:
        page = store.events(position, 100)
        events += event_records(page.events)
        if not page.events:
            return events, position
        position = page.next


def test_kill_9_of_redis_keeps_every_acknowledged_change_in_the_feed(tmp_path):
    """deploy/redis.conf has appendfsync always: an acknowledged change and its event are on disk."""
    own_redis = RedisServer(tmp_path, config_file=ROOT / "deploy" / "redis.conf")
    settings = redis_settings(own_redis)
    server = redis_gunicorn(settings, workers=2, **SHORT_TIMEOUTS)
    acknowledged: list[tuple[int, str]] = []
    stop = threading.Event()
    try:
        start = get_json(server, "/events?after=now")[1]["next"]

        def change(worker: int) -> None:
            version = 0
            while not stop.is_set():
                version += 1
                name = f"w{worker}v{version}"
                status, _, _ = call(server.connection(), "PUT", f"/plants/{worker}", {"name": name}, AUTH)
                if status in (200, 201):
                    acknowledged.append((worker, name))
                else:
                    time.sleep(0.01)

        threads = [threading.Thread(target=change, args=(worker,)) for worker in range(6)]
        for thread in threads:
            thread.start()
        kill_and_restart(own_redis)
        stop.set()
        for thread in threads:
            thread.join(10)
        events, _ = follow(server, start, limit=500)
    finally:
        stop.set()
        server.stop()
    recorded = [(event["plant"]["id"], event["plant"]["name"]) for event in events]
    try:
        assert len(acknowledged) > 20
        assert set(acknowledged) <= set(recorded)
        assert len(recorded) == len(set(recorded))  # each change once
        for worker in range(6):  # each plant's events in the order of its changes
            names = [name for plant_id, name in recorded if plant_id == worker]
            assert names == sorted(names, key=lambda name: int(name.split("v")[1]))
    finally:
        own_redis.stop()


def test_a_position_past_events_redis_lost_in_a_restart_is_410_at_once(tmp_path):
    """A Redis without persistence, killed and started again, has lost its events: a position past
    any of them is 410 at once, never the new history's events as if they followed it (they were
    answered, and the 410 came only a page later). A position from before any event follows on."""
    own_redis = RedisServer(tmp_path)  # no append-only file, no snapshot
    server = redis_gunicorn(redis_settings(own_redis), workers=1, **SHORT_TIMEOUTS)

    try:
        start = get_json(server, "/events?after=now")[1]["next"]
        create_until_200(server, range(3), AUTH)
        passed = get_json(server, "/events?after=now")[1]["next"]
        kill_and_restart(own_redis, before_s=0)
        create_until_200(server, range(10, 15), AUTH)
        status, body = get_json(server, f"/events?after={passed}")
        assert status == 410, body
        events, _ = follow(server, start)
        assert [event["plant"]["id"] for event in events] == list(range(10, 15))
    finally:
        server.stop()
        own_redis.stop()


def test_a_long_poll_whose_position_is_lost_answers_at_the_next_write_not_at_its_wait(tmp_path):
    """A long-poll parked at a position the store then loses (a Redis restarted without its data)
    answers its empty page at the next write, from where it stood, and that position is 410: it
    waited out its whole `wait` before, woken by every write in vain."""
    own_redis = RedisServer(tmp_path)  # no append-only file, no snapshot
    server = redis_gunicorn(redis_settings(own_redis), workers=1, **SHORT_TIMEOUTS)
    answer: list[tuple[int, Any]] = []

    def long_poll(after: str) -> None:
        path = f"/events?after={after}&wait=55"  # the longest: its wait is not what answers it
        status, _, body = call(server.connection(timeout=60), "GET", path, None, AUTH)
        answer.append((status, json.loads(body)))

    try:
        create_until_200(server, range(3), AUTH)
        passed = get_json(server, "/events?after=now")[1]["next"]
        poll = threading.Thread(target=long_poll, args=(passed,))
        poll.start()
        kill_and_restart(own_redis, before_s=0.5)
        create_until_200(server, range(10, 15), AUTH)
        poll.join(30)  # generous for a loaded machine, and well before its 55 s: at a write
        assert answer, "answered at its wait, not at a write after the restart"
        ((status, body),) = answer
        assert status == 200, body
        assert body == {"events": [], "next": passed}
        assert get_json(server, f"/events?after={passed}")[0] == 410
    finally:
        server.stop()
        own_redis.stop()


def test_positions_taken_after_redis_lost_its_data_hold_on_the_processes_started_later(tmp_path):
    """Redis restarted without its data lost the cursor secret too, which the running workers
    still sign with. A client that did what the 410 says (a new position from `now`) keeps it on
    the processes started after (a reload's workers, another host), and its old position is still
    the 410 there: were the secret made anew, both would be 400s, the new position lost again."""
    own_redis = RedisServer(tmp_path)  # no append-only file, no snapshot
    settings = redis_settings(own_redis)
    first = redis_gunicorn(settings, workers=1, **SHORT_TIMEOUTS)
    later = None
    try:
        create_until_200(first, range(3), AUTH)
        passed = get_json(first, "/events?after=now")[1]["next"]
        kill_and_restart(own_redis, before_s=0)
        create_until_200(first, range(10, 15), AUTH)
        assert get_json(first, f"/events?after={passed}")[0] == 410
        time.sleep(CONFIRM_SECONDS)  # the worker looks for its secret at a use after this long
        status, body = get_json(first, "/events?after=now")
        assert status == 200, body
        now = body["next"]
        later = redis_gunicorn(settings, workers=1, **SHORT_TIMEOUTS)
        create_until_200(later, range(20, 22), AUTH)
        status, body = get_json(later, f"/events?after={now}")
        assert status == 200, body
        assert [event["plant"]["id"] for event in body["events"]] == [20, 21]
        status, body = get_json(later, f"/events?after={passed}")
        assert status == 410, body
    finally:
        for server in (first, later):
            if server is not None:
                server.stop()
        own_redis.stop()


def test_a_hung_redis_does_not_hold_a_request_that_needs_only_the_cursor_secret(tmp_path):
    """The secret kept is confirmed in Redis once a second, beside the requests that use it: a
    ticket (signed with it, and nothing read from Redis) is answered at once while Redis hangs,
    not after the store's timeout, and the secret is confirmed again once Redis answers."""
    import signal

    from app import create_app
    from app.extension import plants_state

    own_redis = RedisServer(tmp_path)
    timeout = 3600.0  # what a request that waited on the hung Redis would take
    settings = {**redis_settings(own_redis), "PLANTS_STORE_TIMEOUT": timeout}
    app = create_app({"TESTING": True, "PLANTS_API_TOKENS": [TOKEN], **settings})
    client = app.test_client()
    try:
        assert client.post("/events/tickets", headers=AUTH).status_code == 200  # the secret read
        time.sleep(CONFIRM_SECONDS)  # due to be confirmed at the next use
        own_redis.signal(signal.SIGSTOP)
        try:
            for _ in range(2):
                assert in_time(lambda: client.post("/events/tickets", headers=AUTH)).status_code == 200
        finally:
            own_redis.signal(signal.SIGCONT)
        own_redis.command("FLUSHALL")  # the secret lost: put back once confirmed again
        deadline = time.monotonic() + 20
        while own_redis.command("EXISTS", f"{{{settings['PLANTS_STORE_PREFIX']}}}:cursor-key") != "1":
            assert time.monotonic() < deadline
            client.post("/events/tickets", headers=AUTH)
            time.sleep(0.1)
    finally:
        plants_state(app).close()
        own_redis.stop()


def test_a_process_that_had_not_yet_used_the_cursor_secret_keeps_positions_410_after_a_loss(tmp_path):
    """Two hosts (masters) on one Redis, started before it loses its data; only the first has
    answered a cursor. A position from before the loss is a 410 on both, and a ticket minted then
    still watches from `now`: the second, which first needed the secret after the loss, made a new
    one, which every process then took, so that position was a 400 everywhere (and the ticket 401),
    and a reader told its cursor is not the service's own rather than to list the store again."""
    own_redis = RedisServer(tmp_path)  # no append-only file, no snapshot
    settings = redis_settings(own_redis)
    first = redis_gunicorn(settings, workers=1, **SHORT_TIMEOUTS)
    second = redis_gunicorn(settings, workers=1, **SHORT_TIMEOUTS)
    try:
        create_until_200(first, range(3), AUTH)
        passed = get_json(first, "/events?after=now")[1]["next"]
        _, _, minted = call(first.connection(), "POST", "/events/tickets", None, AUTH)
        ticket = json.loads(minted)["ticket"]
        kill_and_restart(own_redis, before_s=CONFIRM_SECONDS)
        for server in (second, first):
            status, body = get_json(server, f"/events?after={passed}")
            assert status == 410, body
        time.sleep(CONFIRM_SECONDS)  # each process looks for its secret at a use after this long
        for server in (first, second, first):
            status, body = get_json(server, f"/events?after={passed}")
            assert status == 410, body
            status, _, page = call(server.connection(), "GET", f"/events?after=now&ticket={ticket}&wait=1")
            assert status == 200, page
    finally:
        for server in (first, second):
            server.stop()
        own_redis.stop()


def assert_a_position_taken_since_follows_on(client: Any, auth: dict[str, str]) -> None:
    cursor = client.get("/events?after=now", headers=auth).json["next"]
    assert client.post("/plants", json={"id": 4, "name": "Moss"}, headers=auth).status_code == 200
    events = client.get(f"/events?after={cursor}", headers=auth).json["events"]
    assert [event["plant"]["id"] for event in events] == [4]


def test_a_write_while_the_feed_is_off_leaves_no_earlier_position_to_follow_on(redis_server):
    """PLANTS_EVENTS_RETAIN=0 records no write: a position read before (a follower's cursor) is a
    410 once the feed is read again, never followed on past the writes it missed. It was, the
    plant written while the feed was off left out of the follower's copy."""
    shared = {"TESTING": True, "PLANTS_API_TOKENS": TOKEN, **redis_settings(redis_server)}
    on, off = create_app(shared), create_app({**shared, "PLANTS_EVENTS_RETAIN": 0})
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        client = on.test_client()
        assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=auth).status_code == 200
        cursor = client.get("/events?after=now", headers=auth).json["next"]
        unrecorded = {"id": 2, "name": "Written while the feed is off"}
        assert off.test_client().post("/plants", json=unrecorded, headers=auth).status_code == 200
        assert client.post("/plants", json={"id": 3, "name": "Ivy"}, headers=auth).status_code == 200
        assert client.get(f"/events?after={cursor}", headers=auth).status_code == 410
        assert_a_position_taken_since_follows_on(client, auth)
    finally:
        plants_state(on).close()
        plants_state(off).close()


@pytest.mark.parametrize("store", ["redis", "cluster"])
def test_a_position_on_an_empty_feed_is_gone_after_a_write_while_the_feed_is_off(request, store):
    """A position taken while the feed (a cluster's group) had never held an event is a 410 once a
    write was made with the feed off, whether or not the feed holds events again: it was followed
    on past that write as if none had been made. A webhook deliverer, which keeps no copy, still
    reads on past it (`read_on`), to the events recorded since."""
    shared = {"TESTING": True, "PLANTS_API_TOKENS": TOKEN, **settings_for_store(request, store)}
    on, off = create_app(shared), create_app({**shared, "PLANTS_EVENTS_RETAIN": 0})
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        client = on.test_client()
        cursor = client.get("/events?after=now", headers=auth).json["next"]
        store_of = plants_state(on).store
        delivered = store_of.events_now()  # a webhook endpoint's position, taken alike
        unrecorded = {"id": 2, "name": "Written while the feed is off"}
        assert off.test_client().post("/plants", json=unrecorded, headers=auth).status_code == 200
        assert client.get(f"/events?after={cursor}", headers=auth).status_code == 410
        assert client.post("/plants", json={"id": 2 + 24, "name": "Ivy"}, headers=auth).status_code == 200
        assert client.get(f"/events?after={cursor}", headers=auth).status_code == 410
        entries, _ = store_of.feed_entries(delivered, 10, read_on=True)
        assert [entry.event.plant_id for entry in entries] == [2 + 24]
        assert_a_position_taken_since_follows_on(client, auth)
    finally:
        plants_state(on).close()
        plants_state(off).close()
