"""A watch behind a host app's WSGI middleware that wraps the answer's iterable (a generator
passing items through): the packaged worker sees a plain iterable and does not park it, so the
watch must wait in its thread, not answer "nothing yet" again and again, a store read each time,
until its deadline. The store's reads are counted by Redis itself (`INFO stats`)."""

from __future__ import annotations

import json
import time

import pytest
import redis

from tests.conftest import redis_settings
from tests.rawhttp import exchange, request
from tests.servers import TOKEN, Gunicorn

MIDDLEWARE = '''
from app import create_app

inner = create_app()


def application(environ, start_response):
    """A host app's middleware: its own generator around the app's iterable (PEP 3333)."""
    result = inner(environ, start_response)
    try:
        yield from result
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
'''
WAIT = 2


@pytest.fixture
def wrapped(tmp_path, redis_server):
    (tmp_path / "host_middleware.py").write_text(MIDDLEWARE)
    env = {**redis_settings(redis_server), "GUNICORN_THREADS": "2", "WEB_CONCURRENCY": "1"}
    server = Gunicorn(env=env, args=("--pythonpath", str(tmp_path), "host_middleware:application"))
    yield server, redis.Redis.from_url(redis_server.url)
    server.stop()


def commands(client: redis.Redis) -> int:
    return int(client.info("stats")["total_commands_processed"])


def test_a_long_poll_behind_a_wrapping_middleware_waits_without_reading_in_a_loop(wrapped):
    server, client = wrapped
    auth = [("Authorization", f"Bearer {TOKEN}")]
    before, started = commands(client), time.monotonic()
    answer = exchange(server.port, request("GET", f"/events?after=now&wait={WAIT}", headers=auth))
    waited, read = time.monotonic() - started, commands(client) - before
    assert answer is not None
    assert answer.status == 200, answer.body
    page = json.loads(answer.body)
    assert page["events"] == []
    assert page["next"]
    assert waited >= WAIT - 0.2  # it waited for its deadline, not answered at once
    # A handful of commands (the watch's reads, the app's own); a busy loop makes thousands.
    assert read < 200, f"{read} Redis commands over a {WAIT} s long-poll"
