"""A change of a webhook endpoint sent to a Redis that stalls (SIGSTOP) once the change has read
what it needs: it is answered 503, and when Redis goes on, the change it had queued refuses
itself (its deadline, as a plant's write's: app/store/redis/deadline.py), so that what the 503
said (nothing changed) stays true. Over the unix socket, where a closed connection's bytes
still reach Redis."""

from __future__ import annotations

import signal

import pytest

from app.extension import plants_state
from tests.conftest import redis_settings
from tests.helpers import assert_error
from tests.servers import RedisServer

HOOK = "http://127.0.0.1:9/hook"
#: A change's window: it lands within this of its start, or never.
TIMEOUTS = {"PLANTS_STORE_TIMEOUT": 0.5, "PLANTS_STORE_CONNECT_TIMEOUT": 0.5}


@pytest.fixture
def own_redis(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def store_settings(own_redis):
    return redis_settings(own_redis)


@pytest.fixture
def app(make_app):
    return make_app(PLANTS_WEBHOOKS_ALLOW_HOSTS="127.0.0.1", PLANTS_WEBHOOKS_DELIVER=False, **TIMEOUTS)


def registered(client, auth) -> dict:
    """An endpoint, once every script that changes one is loaded in Redis: a script Redis does not
    know yet is refused (NOSCRIPT) rather than run, when it comes out of a stall."""
    other = client.post("/webhooks", json={"url": HOOK}, headers=auth).json["id"]
    assert client.patch(f"/webhooks/{other}", json={"description": "-"}, headers=auth).status_code == 200
    assert client.delete(f"/webhooks/{other}", headers=auth).status_code == 204
    return client.post("/webhooks", json={"url": HOOK}, headers=auth).json


def stalls_after(monkeypatch, owner, name: str, redis: RedisServer) -> None:
    """Redis stops (SIGSTOP) just after the next call of `owner.name`: a change's last read."""
    real = getattr(owner, name)

    def call(*args, **kwargs):
        answer = real(*args, **kwargs)
        monkeypatch.setattr(owner, name, real)
        redis.signal(signal.SIGSTOP)
        return answer

    monkeypatch.setattr(owner, name, call)


def answered_during_a_stall(redis: RedisServer, request) -> object:
    """`request()`'s answer, Redis woken (SIGCONT) after it; then Redis has run whatever it had
    queued: a new connection's command is read after the bytes waiting since before the stop."""
    try:
        answer = request()
    finally:
        redis.signal(signal.SIGCONT)
    assert redis.command("PING") == "PONG"
    return answer


def assert_503(answer) -> None:
    assert_error(answer.status_code, answer.headers, answer.get_data(), 503)


@pytest.mark.parametrize("change", ["patch", "replay", "rotate"])
def test_a_change_answered_503_in_a_stall_does_not_land_after_it(
    monkeypatch, app, client, auth, own_redis, change
):
    hook = registered(client, auth)
    path = f"/webhooks/{hook['id']}"
    endpoints = plants_state(app).store.endpoints
    before = endpoints.get(hook["id"])
    stalls_after(monkeypatch, endpoints, "get", own_redis)
    if change == "patch":
        answer = answered_during_a_stall(
            own_redis, lambda: client.patch(path, json={"description": "changed"}, headers=auth)
        )
    else:
        body = {"after": "start"} if change == "replay" else None
        answer = answered_during_a_stall(
            own_redis, lambda: client.post(f"{path}/{change}", json=body, headers=auth)
        )
    assert_503(answer)
    assert endpoints.get(hook["id"]) == before  # its fields, a replay's position and epoch among them
    assert client.get(path, headers=auth).json == hook


def test_a_delete_answered_503_in_a_stall_does_not_land_after_it(app, client, auth, own_redis):
    hook = registered(client, auth)
    path = f"/webhooks/{hook['id']}"
    own_redis.signal(signal.SIGSTOP)
    assert_503(answered_during_a_stall(own_redis, lambda: client.delete(path, headers=auth)))
    assert client.get(path, headers=auth).json == hook


def test_a_registration_answered_503_in_a_stall_does_not_land_after_it(
    monkeypatch, app, client, auth, own_redis
):
    hook = registered(client, auth)
    stalls_after(monkeypatch, plants_state(app).store, "events_now", own_redis)
    answer = answered_during_a_stall(
        own_redis, lambda: client.post("/webhooks", json={"url": HOOK}, headers=auth)
    )
    assert_503(answer)
    assert client.get("/webhooks", headers=auth).json == {"webhooks": [hook]}
