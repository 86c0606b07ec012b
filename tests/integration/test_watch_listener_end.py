"""An app's feed listener ends when its owner closes the app (`PlantsState.close`), or after a
while with no watcher: its threads end and its Redis connections close, so an app made and dropped
(by a host, or a test) does not go on reading, or retrying, a store no one uses any more.

Each test has a Redis of its own, so that its connection count is the app's alone."""

from __future__ import annotations

import threading
import time

import pytest

from app import create_app
from app.extension import plants_state
from app.settings.schema import LONGEST_WAIT
from app.watch import feed_listener
from tests.conftest import redis_settings
from tests.servers import TOKEN, RedisServer

AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: Far longer than a listener takes to end (its blocking calls last at most 5 s).
END_BOUND_S = 20.0


@pytest.fixture
def redis(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.stop()


def connected_clients(redis: RedisServer) -> int:
    """Redis's clients, the one asking not counted."""
    info = redis.command("INFO", "clients")
    return int(info.split("connected_clients:")[1].split()[0]) - 1


def listener_threads(before: set[threading.Thread]) -> list[str]:
    """The feed's threads (the listener's, each stream's) started since `before`."""
    return [t.name for t in threading.enumerate() if t.name.startswith("feed-") and t not in before]


def until(condition, bound: float = END_BOUND_S) -> bool:
    deadline = time.monotonic() + bound
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def watched(client) -> None:
    """A long-poll that waits its second out: the app's listener starts for it."""
    answer = client.get("/events?after=now&wait=1", headers=AUTH)
    assert answer.status_code == 200, answer.json
    assert answer.json["events"] == []


def test_closing_the_app_ends_its_listener_and_closes_its_connections(redis):
    before = set(threading.enumerate())
    app = create_app({"PLANTS_API_TOKENS": TOKEN, **redis_settings(redis)})
    client = app.test_client()
    assert client.post("/plants", json={"id": 1, "name": "Fern"}, headers=AUTH).status_code == 200
    watched(client)
    assert "feed-listener" in listener_threads(before)
    assert connected_clients(redis) > 0
    assert plants_state(app).close() is True
    assert until(lambda: not listener_threads(before)), listener_threads(before)
    assert until(lambda: connected_clients(redis) == 0), redis.command("CLIENT", "LIST")
    assert plants_state(app).close() is True  # again: nothing left to end
    assert client.get("/readyz").status_code == 503  # closed: not to be sent requests


def test_closing_ends_a_listener_that_retries_a_redis_gone_away(redis, caplog):
    """The store went away under a watcher: the listener retries it, until its app is closed."""
    before = set(threading.enumerate())
    app = create_app({"PLANTS_API_TOKENS": TOKEN, **redis_settings(redis)})
    client = app.test_client()
    # Waiting through the steps below (about 5 s), so that the listener is wanted until the close.
    poll = threading.Thread(target=client.get, args=("/events?after=now&wait=12",), kwargs={"headers": AUTH})
    poll.start()
    assert until(lambda: "feed-listener" in listener_threads(before))
    redis.stop()
    assert until(lambda: "listener failed" in caplog.text)
    plants_state(app).close()
    assert until(lambda: not listener_threads(before)), listener_threads(before)
    caplog.clear()
    time.sleep(2.5)  # past two of its retries, had it gone on
    assert "listener failed" not in caplog.text
    poll.join(25)  # the long-poll ends by its wait, or at the failure's wake-up
    assert not poll.is_alive()


def test_the_listener_ends_after_a_while_with_no_watcher_and_starts_again_for_the_next(redis, monkeypatch):
    monkeypatch.setattr(feed_listener, "IDLE_END_SECONDS", 1.0)
    before = set(threading.enumerate())
    settings = {"PLANTS_API_TOKENS": TOKEN, **redis_settings(redis)}
    watching, writing = create_app(settings), create_app(settings)  # each another process to the other
    try:
        client = watching.test_client()
        watched(client)
        assert "feed-listener" in listener_threads(before)
        # No one watches now: within its idle time and one blocking call, it ends, its connections closed.
        assert until(lambda: not listener_threads(before)), listener_threads(before)
        assert until(lambda: "cmd=xread" not in redis.command("CLIENT", "LIST"))  # the store's own stay
        # The next watcher starts it again, and hears a write the other app makes.
        answer: list = []
        poll = threading.Thread(
            target=lambda: answer.append(client.get(f"/events?after=now&wait={LONGEST_WAIT}", headers=AUTH)),
            daemon=True,
        )
        poll.start()
        assert until(lambda: "feed-listener" in listener_threads(before))
        assert until(lambda: "cmd=xread" in redis.command("CLIENT", "LIST"))  # its cursors taken
        response = writing.test_client().post("/plants", json={"id": 7, "name": "Fern"}, headers=AUTH)
        assert response.status_code == 200
        poll.join(20)
        assert answer, "not woken by the write: the long-poll would answer at its wait's end, 55 s"
        assert [event["plant"]["id"] for event in answer[0].json["events"]] == [7]
    finally:
        plants_state(watching).close()
        plants_state(writing).close()
