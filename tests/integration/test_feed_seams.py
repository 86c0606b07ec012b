"""The change feed's and the webhooks' answers at their seams, through a real gunicorn (two workers)
on a real Redis: a registration under `If-Match`, the attempts' preconditions, and the bookmarks
of a `snapshot=true` stream's reconnect (`Last-Event-ID`, the same URL, as `EventSource` sends).
tests/contract/ holds each rule on every store; this is the served answer, headers included."""

from __future__ import annotations

import json

import pytest

from tests.conftest import redis_settings
from tests.servers import TOKEN, Gunicorn

AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json"}
STREAM = {"Accept": "text/event-stream"}
HOOK = json.dumps({"url": "http://127.0.0.1:9/hook"})


@pytest.fixture(scope="module")
def server(redis_server):
    server = Gunicorn(
        env={
            **redis_settings(redis_server),
            "WEB_CONCURRENCY": "2",
            "PLANTS_EVENTS_HEARTBEAT": "1",
            "PLANTS_EVENTS_STREAM_MAX": "2",
            "PLANTS_WEBHOOKS_ALLOW_HOSTS": "127.0.0.1",
            "PLANTS_WEBHOOKS_DELIVER": "false",
        }
    )
    yield server
    server.stop()


def call(server: Gunicorn, method: str, path: str, headers: dict | None = None, body: str | None = None):
    conn = server.connection(timeout=20)
    try:
        conn.request(method, path, body, {**AUTH, **(headers or {})})
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def hook_ids(server: Gunicorn) -> list[str]:
    status, _, body = call(server, "GET", "/webhooks")
    assert status == 200
    return [hook["id"] for hook in json.loads(body)["webhooks"]]


def test_a_registration_under_if_match_is_412_and_registers_nothing(server):
    before = hook_ids(server)
    for condition in ('"0123456789abcdef"', "*"):
        status, headers, body = call(server, "POST", "/webhooks", {**JSON, "If-Match": condition}, HOOK)
        assert status == 412, body
        assert headers["Content-Type"] == "application/json"
        assert "If-Match" in json.loads(body)["message"]
    assert hook_ids(server) == before
    status, _, body = call(server, "POST", "/webhooks", {**JSON, "If-None-Match": "*"}, HOOK)
    assert status == 201, body
    assert hook_ids(server) == [*before, json.loads(body)["id"]]


def test_the_attempts_judge_if_match_and_if_none_match(server):
    status, _, body = call(server, "POST", "/webhooks", JSON, HOOK)
    assert status == 201
    path = f"/webhooks/{json.loads(body)['id']}/attempts"
    status, headers, body = call(server, "GET", path, {"If-Match": '"abc"'})
    assert status == 412, body
    assert headers["Content-Type"] == "application/json"
    for method in ("GET", "HEAD"):
        status, headers, body = call(server, method, path, {"If-None-Match": "*"})
        assert (status, body) == (304, b"")
        assert headers["Cache-Control"] == "private, no-cache"
    status, _, body = call(server, "GET", path, {"If-Match": "*"})
    assert (status, json.loads(body)) == (200, {"attempts": []})


def test_a_snapshot_streams_reconnect_sends_bookmarks_at_its_heartbeats(server):
    call(server, "PUT", "/plants/41", JSON, json.dumps({"name": "Fern"}))
    status, _, first = call(server, "GET", "/events?snapshot=true", STREAM)  # the whole 2 s stream
    assert status == 200
    end = next(block for block in first.decode().split("\n\n") if '"initial_end":true' in block)
    last_id = end.split("id: ", 1)[1].split("\n", 1)[0]
    status, headers, again = call(
        server, "GET", "/events?snapshot=true", {**STREAM, "Last-Event-ID": last_id}
    )
    assert status == 200
    assert headers["Content-Type"].startswith("text/event-stream")
    text = again.decode()
    assert "plant.existing" not in text
    assert ": keep-alive" not in text
    assert (
        f"id: {last_id}\nevent: bookmark\ndata: {json.dumps({'next': last_id}, separators=(',', ':'))}\n\n"
        in text
    )
